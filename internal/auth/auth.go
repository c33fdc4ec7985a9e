// Package auth is Busbar's Shared Access Signature (SAS) security: the
// policies a namespace is configured with, the validation of the SAS tokens
// clients present (over AMQP CBS put-token and in HTTP Authorization
// headers), the creation of such tokens for our own CLI and tests, and the
// parsing of Service Bus connection strings.
//
// A token is
//
//	SharedAccessSignature sr=<enc-resource>&sig=<enc-base64-hmac>&se=<unix-expiry>&skn=<key-name>
//
// with sig = base64(HMAC-SHA256(UTF-8 bytes of the key string,
// sr-as-written + "\n" + se)). The Go SDK writes sr as
// lower(url.QueryEscape(audience)); the JS SDK as encodeURIComponent and
// also URL-encodes skn. Validation works on the raw sr, so both verify.
//
// Audiences are compared as entity paths: a scheme (sb, amqp, amqps, http,
// https), a host[:port], a query and leading or trailing slashes are
// stripped, so "amqp://localhost:5672/myqueue", "sb://localhost/myqueue" and
// "myqueue" are the same audience, and "myqueue/$management" lies beneath
// it. A token grants its own path and everything beneath it, matched
// case-insensitively at a path-segment boundary; a namespace-level token
// (sr with no path) grants every entity.
//
// The package uses only the standard library and internal/clock.
package auth

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
)

// Rights is a set of SAS access rights.
type Rights uint8

// The SAS rights. Manage implies Send and Listen (see Has).
const (
	Send Rights = 1 << iota
	Listen
	Manage
)

// Has reports whether r grants every right in want. Manage grants Send and
// Listen as well.
func (r Rights) Has(want Rights) bool {
	if r&Manage != 0 {
		r |= Send | Listen
	}
	return r&want == want
}

// String lists the rights as Service Bus writes them, e.g. "Manage, Send, Listen".
func (r Rights) String() string {
	var parts []string
	if r&Manage != 0 {
		parts = append(parts, "Manage")
	}
	if r&Send != 0 {
		parts = append(parts, "Send")
	}
	if r&Listen != 0 {
		parts = append(parts, "Listen")
	}
	if len(parts) == 0 {
		return "None"
	}
	return strings.Join(parts, ", ")
}

// ParseRights parses a list of rights separated by commas, spaces or '|',
// case-insensitively: "Manage", "Send,Listen", "send listen".
func ParseRights(s string) (Rights, error) {
	var r Rights
	f := strings.FieldsFunc(s, func(c rune) bool { return c == ',' || c == ' ' || c == '|' || c == '\t' })
	for _, w := range f {
		switch strings.ToLower(w) {
		case "manage":
			r |= Manage
		case "send":
			r |= Send
		case "listen":
			r |= Listen
		default:
			return 0, fmt.Errorf("auth: unknown right %q (want Manage, Send or Listen)", w)
		}
	}
	if r == 0 {
		return 0, errors.New("auth: no rights given")
	}
	return r, nil
}

// The emulator's documented, publicly known credentials.
const (
	DefaultKeyName = "RootManageSharedAccessKey"
	DefaultKey     = "SAS_KEY_VALUE"
)

// Policy is a shared access policy: a key name with two interchangeable
// keys (so keys can be rotated) and the rights a token signed with either
// grants.
type Policy struct {
	Name         string
	PrimaryKey   string
	SecondaryKey string // optional
	Rights       Rights
}

// DefaultPolicy is the emulator's policy: RootManageSharedAccessKey with
// key SAS_KEY_VALUE and Manage rights. Its key is public knowledge.
func DefaultPolicy() Policy {
	return Policy{Name: DefaultKeyName, PrimaryKey: DefaultKey, Rights: Manage}
}

// IsWellKnownDefault reports whether either of p's keys is the emulator's
// published key, which anyone can sign tokens with.
func (p Policy) IsWellKnownDefault() bool {
	return p.PrimaryKey == DefaultKey || p.SecondaryKey == DefaultKey
}

// Config configures an Authenticator.
type Config struct {
	// Policies are the accepted shared access policies. Empty means
	// []Policy{DefaultPolicy()}.
	Policies []Policy
	// AllowAnyKey accepts any key name and any signature, as Microsoft's
	// emulator is commonly assumed to. Tokens must still be well formed
	// and name a matching audience; an expiry that parses is still
	// enforced, an absent or unparsable one is ignored. Granted rights are
	// those of the named policy if it exists, else Manage.
	AllowAnyKey bool
	// Clock tells the time for expiry checks; nil means the wall clock.
	Clock clock.Clock
}

// Authenticator validates SAS tokens against a fixed set of policies. It
// is immutable and safe for concurrent use.
type Authenticator struct {
	policies    []Policy
	allowAnyKey bool
	clock       clock.Clock
}

// New returns an Authenticator for cfg. It fails on a policy without a
// name, key or rights, or on two policies with the same name
// (names compare case-insensitively).
func New(cfg Config) (*Authenticator, error) {
	pols := cfg.Policies
	if len(pols) == 0 {
		pols = []Policy{DefaultPolicy()}
	}
	seen := make(map[string]bool, len(pols))
	for _, p := range pols {
		switch {
		case p.Name == "":
			return nil, errors.New("auth: policy without a name")
		case p.PrimaryKey == "":
			return nil, fmt.Errorf("auth: policy %q has no primary key", p.Name)
		case p.Rights&(Send|Listen|Manage) == 0:
			return nil, fmt.Errorf("auth: policy %q has no rights", p.Name)
		}
		k := strings.ToLower(p.Name)
		if seen[k] {
			return nil, fmt.Errorf("auth: policy %q configured twice", p.Name)
		}
		seen[k] = true
	}
	c := cfg.Clock
	if c == nil {
		c = clock.Real{}
	}
	return &Authenticator{policies: append([]Policy(nil), pols...), allowAnyKey: cfg.AllowAnyKey, clock: c}, nil
}

// Policies returns a copy of the configured policies.
func (a *Authenticator) Policies() []Policy { return append([]Policy(nil), a.policies...) }

// AllowAnyKey reports whether key names and signatures go unchecked.
func (a *Authenticator) AllowAnyKey() bool { return a.allowAnyKey }

// IsWellKnownDefault reports whether some policy uses the emulator's
// published key (see Policy.IsWellKnownDefault), or any key is accepted:
// either way anyone who can reach the broker can use it. A server should
// warn about this at start-up.
func (a *Authenticator) IsWellKnownDefault() bool {
	if a.allowAnyKey {
		return true
	}
	for _, p := range a.policies {
		if p.IsWellKnownDefault() {
			return true
		}
	}
	return false
}

// policy finds a policy by name: exactly first, then case-insensitively.
func (a *Authenticator) policy(name string) (Policy, bool) {
	for _, p := range a.policies {
		if p.Name == name {
			return p, true
		}
	}
	for _, p := range a.policies {
		if strings.EqualFold(p.Name, name) {
			return p, true
		}
	}
	return Policy{}, false
}

// Grant is what a valid token allows.
type Grant struct {
	// KeyName is the token's (decoded) skn.
	KeyName string
	// Rights are the rights of the key's policy.
	Rights Rights
	// Resource is the token's sr as an entity path ("" for the whole
	// namespace); the grant covers it and everything beneath it.
	Resource string
	// Audience is the requested audience as an entity path.
	Audience string
	// ExpiresAt is when the token expires; zero if it named no expiry
	// (possible only with AllowAnyKey).
	ExpiresAt time.Time
}

// Covers reports whether the grant's resource includes the entity path
// (any form NormalizeAudience accepts).
func (g Grant) Covers(path string) bool {
	return pathCovers(g.Resource, NormalizeAudience(path))
}

// Validate checks a SAS token presented for audience (a URI such as
// "amqp://host:5672/myqueue" or an entity path such as "myqueue/$management")
// and returns what it grants. Failures are *Error values matching one of
// ErrMalformed, ErrUnknownKey, ErrBadSignature, ErrExpired and
// ErrWrongAudience under errors.Is.
func (a *Authenticator) Validate(token, audience string) (Grant, error) {
	t, err := parseToken(token, a.allowAnyKey)
	if err != nil {
		return Grant{}, err
	}
	g := Grant{KeyName: t.KeyName, Resource: NormalizeAudience(t.Resource), Audience: NormalizeAudience(audience), ExpiresAt: t.ExpiresAt}

	if a.allowAnyKey {
		g.Rights = Manage
		if p, ok := a.policy(t.KeyName); ok {
			g.Rights = p.Rights
		}
	} else {
		p, ok := a.policy(t.KeyName)
		if !ok {
			return Grant{}, newError(ErrUnknownKey, "InvalidSignature: The token has an invalid signature: the key name %q is not a shared access policy of this namespace.", t.KeyName)
		}
		if !t.signedWith(p.PrimaryKey) && (p.SecondaryKey == "" || !t.signedWith(p.SecondaryKey)) {
			return Grant{}, newError(ErrBadSignature, "InvalidSignature: The token has an invalid signature: it was not signed with a key of policy %q.", p.Name)
		}
		g.Rights = p.Rights
	}

	if !g.ExpiresAt.IsZero() {
		if now := a.clock.Now(); !now.Before(g.ExpiresAt) {
			return Grant{}, newError(ErrExpired, "ExpiredToken: The token is expired. Expiration time: '%s', now: '%s'.",
				g.ExpiresAt.UTC().Format(time.DateTime), now.UTC().Format(time.DateTime))
		}
	}

	if !pathCovers(g.Resource, g.Audience) {
		return Grant{}, newError(ErrWrongAudience, "InvalidAudience: The token's audience %q does not grant access to %q.", t.Resource, audience)
	}
	return g, nil
}

// ValidateHeader checks the value of an HTTP Authorization header (the same
// "SharedAccessSignature sr=…" text as a token) for the request's
// audience, typically its full URL. A "Bearer" or other scheme is
// ErrMalformed.
func (a *Authenticator) ValidateHeader(header, audience string) (Grant, error) {
	h := strings.TrimSpace(header)
	if h == "" {
		return Grant{}, newError(ErrMalformed, "MissingToken: The authorization header was not provided.")
	}
	scheme, _, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, tokenPrefix) {
		return Grant{}, newError(ErrMalformed, "MalformedToken: The authorization scheme %q is not supported; use SharedAccessSignature.", scheme)
	}
	return a.Validate(h, audience)
}
