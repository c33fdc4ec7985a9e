// Package auth is Busbar's security: the shared access policies a
// namespace is configured with (and the rules its entities define), the
// validation of the tokens clients present (over AMQP CBS put-token and in
// HTTP Authorization headers) — Shared Access Signatures and Entra ID
// JWTs — the creation of SAS tokens for our own CLI and tests, and the
// parsing of Service Bus connection strings.
//
// A SAS token is
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
// (sr with no path, or the bare namespace host "myns.servicebus.windows.net")
// grants every entity. A host the resource names must be the host the
// client connected to (ports ignored, loopback names alike).
//
// skn names a namespace policy or, for a resource inside an entity, a rule
// defined on that entity (Config.EntityRules), which grants nothing
// outside it.
//
// Entra ID tokens are compact JWTs (jwt.go) checked in one of two modes:
// development (shape, audience, exp/nbf, roles; no signature) or OpenID
// Connect (signature against the configured issuers' published keys,
// oidc.go, plus iss, tid and a clock skew). Roles map to rights: Data
// Owner → Manage, Send, Listen; Data Sender → Send; Data Receiver → Listen.
//
// Error messages never repeat a token, only short prefixes of its parts.
//
// The package uses only the standard library and internal/clock.
package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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

// EntraMode selects how Entra ID (JWT) tokens are checked.
type EntraMode int

const (
	// EntraAuto is EntraOIDC when issuers are configured, else EntraDev
	// when the well-known emulator key is in use or AllowAnyKey is set,
	// else EntraOff.
	EntraAuto EntraMode = iota
	// EntraOff refuses every JWT.
	EntraOff
	// EntraDev checks a JWT's shape, audience, exp and nbf and maps its
	// roles, but not its signature: for a laptop, never for a server
	// others can reach.
	EntraDev
	// EntraOIDC verifies signatures with the keys of the configured
	// OpenID Connect issuers and checks iss, aud, tid, exp and nbf.
	EntraOIDC
)

func (m EntraMode) String() string {
	switch m {
	case EntraOff:
		return "off"
	case EntraDev:
		return "dev"
	case EntraOIDC:
		return "oidc"
	}
	return "auto"
}

// ParseEntraMode parses "auto", "off", "dev" or "oidc".
func ParseEntraMode(s string) (EntraMode, error) {
	for _, m := range []EntraMode{EntraAuto, EntraOff, EntraDev, EntraOIDC} {
		if strings.EqualFold(strings.TrimSpace(s), m.String()) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("auth: %q is not an Entra ID mode (auto, off, dev or oidc)", s)
}

// EntraConfig configures the checking of Entra ID (JWT) tokens.
type EntraConfig struct {
	Mode EntraMode
	// DevDefaultRole is the role a development-mode token without a roles
	// claim gets (tokens from DefaultAzureCredential and az have none:
	// Azure looks the roles up in its RBAC assignments). Any form
	// RoleRights accepts, or "none" to refuse such tokens. Empty means
	// Data Owner.
	DevDefaultRole string
	// Issuers are the OpenID Connect issuer URLs whose keys sign accepted
	// tokens (EntraOIDC), e.g. https://login.microsoftonline.com/<tenant>/v2.0.
	Issuers []string
	// Audiences are accepted in aud besides https://servicebus.azure.net
	// and the namespace's own URLs; each grants the whole namespace.
	Audiences []string
	// Tenants, when set, are the only accepted tid claims (EntraOIDC).
	Tenants []string
	// ClockSkew is the tolerance on exp and nbf in EntraOIDC mode;
	// zero means 5 minutes. Development mode allows none.
	ClockSkew time.Duration
	// HTTPClient fetches discovery documents and key sets; nil is a
	// client with FetchTimeout.
	HTTPClient *http.Client
	// FetchTimeout bounds one discovery-and-JWKS fetch; zero means 10 s.
	FetchTimeout time.Duration
	// MinRefresh is the least time between two fetches of one issuer's
	// keys (a token with an unknown key id triggers one); zero means a
	// minute.
	MinRefresh time.Duration
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
	// EntityRules returns the shared access rules defined on an entity
	// (a queue or topic, by name); nil when there are none or the entity
	// does not exist. A SAS token whose key name is such a rule is valid
	// for that entity and what lies beneath it, and nowhere else. Nil
	// means no entity has rules.
	EntityRules func(entity string) []Policy
	// Entra configures Entra ID (JWT) tokens.
	Entra EntraConfig
	// Clock tells the time for expiry checks; nil means the wall clock.
	Clock clock.Clock
}

// Authenticator validates SAS tokens against a fixed set of policies (and
// the entities' own rules), and Entra ID tokens as configured. It is
// immutable and safe for concurrent use.
type Authenticator struct {
	policies    []Policy
	allowAnyKey bool
	entityRules func(string) []Policy
	clock       clock.Clock

	entra      EntraMode // resolved: never EntraAuto
	devDefault Rights    // 0: refuse tokens without roles
	audiences  []string
	tenants    []string
	skew       time.Duration
	oidc       *oidcKeys
}

// New returns an Authenticator for cfg. It fails on a policy without a
// name, key or rights, or on two policies with the same name
// (names compare case-insensitively), on an unknown role or a bad issuer
// URL, and on EntraOIDC without issuers.
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
	a := &Authenticator{policies: append([]Policy(nil), pols...), allowAnyKey: cfg.AllowAnyKey, entityRules: cfg.EntityRules, clock: c}

	e := cfg.Entra
	a.entra = e.Mode
	if a.entra == EntraAuto {
		switch {
		case len(e.Issuers) > 0:
			a.entra = EntraOIDC
		case a.IsWellKnownDefault():
			a.entra = EntraDev
		default:
			a.entra = EntraOff
		}
	}
	switch strings.ToLower(strings.TrimSpace(e.DevDefaultRole)) {
	case "":
		a.devDefault = Manage | Send | Listen
	case "none":
	default:
		r, ok := RoleRights(e.DevDefaultRole)
		if !ok {
			return nil, fmt.Errorf("auth: %q is not a Service Bus data role (Azure Service Bus Data Owner, Data Sender, Data Receiver, or none)", e.DevDefaultRole)
		}
		a.devDefault = r
	}
	a.audiences, a.tenants = trimAll(e.Audiences), trimAll(e.Tenants)
	a.skew = e.ClockSkew
	if a.skew == 0 {
		a.skew = 5 * time.Minute
	}
	if a.entra == EntraOIDC {
		if len(e.Issuers) == 0 {
			return nil, errors.New("auth: Entra ID mode oidc needs at least one OpenID Connect issuer")
		}
		timeout, refresh := e.FetchTimeout, e.MinRefresh
		if timeout <= 0 {
			timeout = 10 * time.Second
		}
		if refresh <= 0 {
			refresh = time.Minute
		}
		hc := e.HTTPClient
		if hc == nil {
			hc = &http.Client{Timeout: timeout}
		}
		var err error
		if a.oidc, err = newOIDCKeys(e.Issuers, hc, c, timeout, refresh); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func trimAll(l []string) []string {
	var out []string
	for _, s := range l {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// EntraMode reports how Entra ID tokens are checked (never EntraAuto).
func (a *Authenticator) EntraMode() EntraMode { return a.entra }

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
	// KeyName is the token's (decoded) skn, or for a JWT "Entra ID
	// principal <object id>".
	KeyName string
	// Rights are the rights of the key's policy or the JWT's roles.
	Rights Rights
	// Resource is the token's sr (or a JWT's entity audience) as an
	// entity path ("" for the whole namespace); the grant covers it and
	// everything beneath it.
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

// The CBS token types (the put-token request's "type" property).
const (
	TypeSAS = "servicebus.windows.net:sastoken"
	TypeJWT = "jwt"
)

// Presented is a token a client presents.
type Presented struct {
	// Token is the token text.
	Token string
	// Type is the CBS token type (TypeSAS, TypeJWT), or "" to tell by the
	// token's form.
	Type string
	// Audience is what the client asks access to: a URI such as
	// "amqp://host:5672/myqueue" or an entity path such as
	// "myqueue/$management".
	Audience string
	// Host is the host the client connected to (the AMQP open frame's
	// hostname, the HTTP Host header), with or without a port; "" when
	// unknown. A token naming another host is refused.
	Host string
}

// Authenticate checks a presented token and returns what it grants.
// Failures are *Error values matching one of the Err* kinds under
// errors.Is; their messages never repeat the token. ctx bounds a fetch of
// an OpenID Connect issuer's keys.
func (a *Authenticator) Authenticate(ctx context.Context, p Presented) (Grant, error) {
	if len(p.Token) > MaxTokenBytes {
		return Grant{}, newError(ErrMalformed, "MalformedToken: The token is %d bytes long; at most %d are accepted.", len(p.Token), MaxTokenBytes)
	}
	switch p.Type {
	case TypeJWT:
		return a.validateJWT(ctx, p)
	case TypeSAS:
		return a.validateSAS(p)
	case "":
		tok := strings.TrimSpace(p.Token)
		if !hasPrefixFold(tok, tokenPrefix) && looksLikeJWT(tok) {
			return a.validateJWT(ctx, p)
		}
		return a.validateSAS(p)
	}
	return Grant{}, newError(ErrMalformed, "UnsupportedTokenType: Token type '%s' is not supported; use a shared access signature (%s) or an Entra ID token (%s).", short(p.Type, 64), TypeSAS, TypeJWT)
}

// Validate checks a SAS or JWT token presented for audience, the host the
// client connected to unknown (see Authenticate).
func (a *Authenticator) Validate(token, audience string) (Grant, error) {
	return a.Authenticate(context.Background(), Presented{Token: token, Audience: audience})
}

func (a *Authenticator) validateSAS(p Presented) (Grant, error) {
	t, err := parseToken(p.Token, a.allowAnyKey)
	if err != nil {
		return Grant{}, err
	}
	host, res := splitResource(t.Resource, p.Host)
	if host != "" && p.Host != "" && !sameHost(host, p.Host) {
		return Grant{}, newError(ErrWrongAudience, "InvalidAudience: The token is for host '%s', but the client connected to '%s'.", short(host, 100), short(p.Host, 100))
	}
	g := Grant{KeyName: t.KeyName, Resource: res, Audience: NormalizeAudience(p.Audience), ExpiresAt: t.ExpiresAt}

	if a.allowAnyKey {
		g.Rights = Manage
		if p, ok := a.policy(t.KeyName); ok {
			g.Rights = p.Rights
		}
	} else {
		rights, err := a.sasRights(t, res)
		if err != nil {
			return Grant{}, err
		}
		g.Rights = rights
	}

	if !g.ExpiresAt.IsZero() {
		if now := a.clock.Now(); !now.Before(g.ExpiresAt) {
			return Grant{}, newError(ErrExpired, "ExpiredToken: The token is expired. Expiration time: '%s', now: '%s'.",
				g.ExpiresAt.UTC().Format(time.DateTime), now.UTC().Format(time.DateTime))
		}
	}

	if !pathCovers(g.Resource, g.Audience) {
		return Grant{}, newError(ErrWrongAudience, "InvalidAudience: The token's audience %q does not grant access to %q.", short(t.Resource, 200), short(p.Audience, 200))
	}
	return g, nil
}

// sasRights finds the policy t's key name names, a namespace policy or a
// rule of the entity its resource lies in, and checks the signature.
func (a *Authenticator) sasRights(t Token, res string) (Rights, error) {
	p, known := a.policy(t.KeyName)
	if known && (t.signedWith(p.PrimaryKey) || (p.SecondaryKey != "" && t.signedWith(p.SecondaryKey))) {
		return p.Rights, nil
	}
	entity, _, _ := strings.Cut(res, "/")
	if entity != "" && a.entityRules != nil {
		for _, r := range a.entityRules(entity) {
			if !strings.EqualFold(r.Name, t.KeyName) {
				continue
			}
			known = true
			if (r.PrimaryKey != "" && t.signedWith(r.PrimaryKey)) || (r.SecondaryKey != "" && t.signedWith(r.SecondaryKey)) {
				return r.Rights, nil
			}
		}
	}
	if !known {
		return 0, newError(ErrUnknownKey, "InvalidSignature: The token has an invalid signature: the key name %q is not a shared access policy of this namespace or of the entity '%s'.", short(t.KeyName, 100), short(entity, 100))
	}
	return 0, newError(ErrBadSignature, "InvalidSignature: The token has an invalid signature: it was not signed with a key of policy %q.", short(t.KeyName, 100))
}

// validateJWT checks an Entra ID token as the mode says.
func (a *Authenticator) validateJWT(ctx context.Context, p Presented) (Grant, error) {
	if a.entra == EntraOff {
		return Grant{}, newError(ErrNotEnabled, "UnsupportedTokenType: Entra ID (JWT) tokens are not enabled on this namespace; configure an OpenID Connect issuer (--oidc-issuer), or --entra dev for development.")
	}
	t, err := parseJWT(p.Token)
	if err != nil {
		return Grant{}, err
	}
	var skew time.Duration
	if a.entra == EntraOIDC {
		skew = a.skew
		if t.header.Alg != "RS256" && t.header.Alg != "ES256" {
			return Grant{}, newError(ErrMalformed, "MalformedToken: The JWT's algorithm %q is not accepted; RS256 and ES256 are.", short(t.header.Alg, 20))
		}
		is, err := a.oidc.match(ctx, t.claims.Iss)
		if err != nil {
			return Grant{}, err
		}
		key, err := a.oidc.key(ctx, is, t.header.Kid, t.header.Alg)
		if err != nil {
			return Grant{}, err
		}
		if !t.verify(key) {
			return Grant{}, newError(ErrBadSignature, "InvalidSignature: The JWT's signature does not verify with the key of issuer %q.", is.url)
		}
		if len(a.tenants) > 0 && !containsFold(a.tenants, t.claims.Tid) {
			return Grant{}, newError(ErrWrongAudience, "InvalidTenant: The token's tenant %q is not accepted by this namespace.", short(t.claims.Tid, 64))
		}
	}
	now := a.clock.Now()
	if t.claims.Exp == nil {
		return Grant{}, newError(ErrMalformed, "MalformedToken: The JWT has no expiry (exp).")
	}
	exp := t.claims.Exp.t.Add(skew)
	if !now.Before(exp) {
		return Grant{}, newError(ErrExpired, "ExpiredToken: The token is expired. Expiration time: '%s', now: '%s'.",
			t.claims.Exp.t.Format(time.DateTime), now.UTC().Format(time.DateTime))
	}
	if t.claims.Nbf != nil && now.Add(skew).Before(t.claims.Nbf.t) {
		return Grant{}, newError(ErrExpired, "ExpiredToken: The token is not valid before '%s'; now: '%s'.",
			t.claims.Nbf.t.Format(time.DateTime), now.UTC().Format(time.DateTime))
	}
	res, ok := a.jwtResource(t.claims.Aud, p.Host)
	if !ok {
		aud := "none"
		if len(t.claims.Aud) > 0 {
			aud = short(t.claims.Aud[0], 200)
		}
		return Grant{}, newError(ErrWrongAudience, "InvalidAudience: The token's audience %q is not https://servicebus.azure.net, nor a URL of this namespace or of one of its entities.", aud)
	}
	var rights Rights
	switch {
	case t.claims.Roles != nil:
		rights = rolesRights(*t.claims.Roles)
	case a.entra == EntraDev:
		rights = a.devDefault
	}
	if rights == 0 {
		return Grant{}, newError(ErrNoRole, "Unauthorized: The token of %s carries no Service Bus data role (Azure Service Bus Data Owner, Data Sender or Data Receiver).", t.claims.subject())
	}
	g := Grant{KeyName: "Entra ID principal " + t.claims.subject(), Rights: rights, Resource: res, Audience: NormalizeAudience(p.Audience), ExpiresAt: exp}
	if !pathCovers(g.Resource, g.Audience) {
		return Grant{}, newError(ErrWrongAudience, "InvalidAudience: The token's audience grants '%s', not %q.", res, short(p.Audience, 200))
	}
	return g, nil
}

// The audience of Service Bus's data plane in Entra ID.
const ServiceBusAudience = "https://servicebus.azure.net"

// jwtResource finds the broadest resource the aud values grant:
// "" (the namespace) for https://servicebus.azure.net, a configured
// audience or a namespace URL on the connected host; the entity path for
// an entity URL on it.
func (a *Authenticator) jwtResource(auds []string, host string) (string, bool) {
	best, found := "", false
	for _, aud := range auds[:min(len(auds), 16)] {
		au := strings.TrimRight(strings.TrimSpace(aud), "/")
		if strings.EqualFold(au, ServiceBusAudience) || containsFold(a.audiences, au) || containsFold(a.audiences, aud) {
			return "", true
		}
		scheme, _, ok := strings.Cut(au, "://")
		if !ok || !isAudienceScheme(scheme) {
			continue
		}
		h, res := splitResource(au, host)
		if h == "" || (host != "" && !sameHost(h, host)) {
			continue
		}
		if res == "" {
			return "", true
		}
		if !found || len(res) < len(best) {
			best, found = res, true
		}
	}
	return best, found
}

func containsFold(l []string, s string) bool {
	for _, x := range l {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// ValidateHeader checks the value of an HTTP Authorization header for the
// request's audience, typically its full URL, the client's host unknown
// (see AuthenticateHeader).
func (a *Authenticator) ValidateHeader(header, audience string) (Grant, error) {
	return a.AuthenticateHeader(context.Background(), header, audience, "")
}

// AuthenticateHeader checks the value of an HTTP Authorization header:
// "SharedAccessSignature sr=…", "Bearer <JWT>" or a bare JWT (as the Go
// admin client sends it), for audience (the request's URL or path) on
// host (the Host header).
func (a *Authenticator) AuthenticateHeader(ctx context.Context, header, audience, host string) (Grant, error) {
	h := strings.TrimSpace(header)
	if h == "" {
		return Grant{}, newError(ErrMalformed, "MissingToken: The authorization header was not provided.")
	}
	scheme, rest, _ := strings.Cut(h, " ")
	switch {
	case strings.EqualFold(scheme, tokenPrefix):
		return a.Authenticate(ctx, Presented{Token: h, Type: TypeSAS, Audience: audience, Host: host})
	case strings.EqualFold(scheme, "Bearer"):
		return a.Authenticate(ctx, Presented{Token: strings.TrimSpace(rest), Type: TypeJWT, Audience: audience, Host: host})
	case rest == "" && looksLikeJWT(h):
		return a.Authenticate(ctx, Presented{Token: h, Type: TypeJWT, Audience: audience, Host: host})
	}
	return Grant{}, newError(ErrMalformed, "MalformedToken: The authorization header is neither 'SharedAccessSignature sr=…' nor 'Bearer <token>' nor an Entra ID token.")
}
