package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
)

var now = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// goSDKToken builds a token the way azservicebus v1.11.0's internal/sas
// does: sr = lower(url.QueryEscape(audience)), sig = QueryEscape(base64).
// It is written independently of NewToken so each checks the other.
func goSDKToken(keyName, key, audience string, expiry time.Time) string {
	sr := strings.ToLower(url.QueryEscape(audience))
	se := strconv.FormatInt(expiry.Unix(), 10)
	h := hmac.New(sha256.New, []byte(key))
	fmt.Fprintf(h, "%s\n%s", sr, se)
	sig := url.QueryEscape(base64.StdEncoding.EncodeToString(h.Sum(nil)))
	return fmt.Sprintf("SharedAccessSignature sr=%s&sig=%s&se=%s&skn=%s", sr, sig, se, keyName)
}

// encodeURIComponent is JavaScript's: everything but A-Z a-z 0-9 - _ . ! ~ * ' ( )
// is percent-encoded as UTF-8 with upper-case hex.
func encodeURIComponent(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			strings.IndexByte("-_.!~*'()", c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// jsSDKToken builds a token the way @azure/core-amqp does:
// sr = encodeURIComponent(audience) (lower-cased first when lower is set, as
// core-amqp 4.x does; case kept otherwise, as older versions did),
// skn = encodeURIComponent(keyName), sig = encodeURIComponent(base64), and
// sr written last.
func jsSDKToken(keyName, key, audience string, expiry time.Time, lower bool) string {
	if lower {
		audience = strings.ToLower(audience)
	}
	sr := encodeURIComponent(audience)
	se := strconv.FormatInt(expiry.Unix(), 10)
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(sr + "\n" + se))
	sig := encodeURIComponent(base64.StdEncoding.EncodeToString(h.Sum(nil)))
	return "SharedAccessSignature sig=" + sig + "&se=" + se + "&skn=" + encodeURIComponent(keyName) + "&sr=" + sr
}

func newAuth(t *testing.T, cfg Config) *Authenticator {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = clock.NewFake(now)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestNewTokenVector pins NewToken to a token computed outside Go
// (Python hmac/base64/urllib.parse.quote_plus).
func TestNewTokenVector(t *testing.T) {
	const want = "SharedAccessSignature sr=amqp%3a%2f%2f127.0.0.1%3a5672%2fmyqueue&sig=k%2B%2FKaDj%2FhMHmuq0LpRSOC42e2MegPvOWp3gM73X95u4%3D&se=1700000000&skn=RootManageSharedAccessKey"
	got := NewToken(DefaultKeyName, DefaultKey, "amqp://127.0.0.1:5672/myqueue", time.Unix(1700000000, 0))
	if got != want {
		t.Fatalf("NewToken:\n got %s\nwant %s", got, want)
	}
	if g := goSDKToken(DefaultKeyName, DefaultKey, "amqp://127.0.0.1:5672/myqueue", time.Unix(1700000000, 0)); g != want {
		t.Fatalf("goSDKToken:\n got %s\nwant %s", g, want)
	}
}

func TestValidate(t *testing.T) {
	policies := []Policy{
		DefaultPolicy(),
		{Name: "sender", PrimaryKey: "s3nd-primary", SecondaryKey: "s3nd-secondary", Rights: Send},
		{Name: "my listen/policy", PrimaryKey: "l1sten+key=", Rights: Listen},
	}
	a := newAuth(t, Config{Policies: policies})
	later := now.Add(time.Hour)

	tests := []struct {
		name       string
		token      string
		audience   string
		wantErr    error
		wantRights Rights
		wantRes    string
		wantAud    string
	}{
		{name: "go sdk entity", token: goSDKToken(DefaultKeyName, DefaultKey, "amqp://127.0.0.1:5672/myqueue", later),
			audience: "amqp://127.0.0.1:5672/myqueue", wantRights: Manage, wantRes: "myqueue", wantAud: "myqueue"},
		{name: "go sdk management", token: goSDKToken(DefaultKeyName, DefaultKey, "amqp://127.0.0.1:5672/MyQueue/$management", later),
			audience: "amqp://127.0.0.1:5672/MyQueue/$management", wantRights: Manage, wantRes: "myqueue/$management", wantAud: "MyQueue/$management"},
		{name: "go sdk subscription", token: goSDKToken("sender", "s3nd-primary", "amqps://ns.servicebus.windows.net/topic/Subscriptions/sub", later),
			audience: "amqps://ns.servicebus.windows.net/topic/Subscriptions/sub", wantRights: Send, wantRes: "topic/subscriptions/sub", wantAud: "topic/Subscriptions/sub"},
		{name: "NewToken", token: NewToken("sender", "s3nd-secondary", "sb://localhost/q", later),
			audience: "q", wantRights: Send, wantRes: "q", wantAud: "q"},
		{name: "js sdk case kept", token: jsSDKToken(DefaultKeyName, DefaultKey, "sb://localhost/MyQueue", later, false),
			audience: "sb://localhost/MyQueue", wantRights: Manage, wantRes: "MyQueue", wantAud: "MyQueue"},
		{name: "js sdk lower-cased", token: jsSDKToken(DefaultKeyName, DefaultKey, "sb://localhost/MyQueue/$management", later, true),
			audience: "sb://localhost/MyQueue/$management", wantRights: Manage, wantRes: "myqueue/$management", wantAud: "MyQueue/$management"},
		{name: "js sdk encoded key name", token: jsSDKToken("my listen/policy", "l1sten+key=", "sb://localhost/q", later, true),
			audience: "amqp://127.0.0.1:5672/q", wantRights: Listen, wantRes: "q", wantAud: "q"},
		{name: "go token for js-style audience", token: goSDKToken(DefaultKeyName, DefaultKey, "amqp://localhost/q", later),
			audience: "sb://other-host:5673/Q/$DeadLetterQueue", wantRights: Manage, wantRes: "q", wantAud: "Q/$DeadLetterQueue"},
		{name: "secondary key", token: goSDKToken("sender", "s3nd-secondary", "sb://localhost/q", later),
			audience: "q", wantRights: Send, wantRes: "q", wantAud: "q"},
		{name: "key name case-insensitive", token: goSDKToken("SENDER", "s3nd-primary", "sb://localhost/q", later),
			audience: "q", wantRights: Send, wantRes: "q", wantAud: "q"},

		// A token grants its resource and everything beneath it.
		{name: "namespace token grants all", token: goSDKToken(DefaultKeyName, DefaultKey, "sb://localhost/", later),
			audience: "amqp://127.0.0.1:5672/any/Subscriptions/thing/$management", wantRights: Manage, wantRes: "", wantAud: "any/Subscriptions/thing/$management"},
		{name: "namespace token no slash", token: jsSDKToken(DefaultKeyName, DefaultKey, "sb://localhost", later, false),
			audience: "q", wantRights: Manage, wantRes: "", wantAud: "q"},
		{name: "entity token grants management", token: goSDKToken(DefaultKeyName, DefaultKey, "sb://localhost/q", later),
			audience: "amqp://127.0.0.1/q/$management", wantRights: Manage, wantRes: "q", wantAud: "q/$management"},
		{name: "entity token grants dlq", token: jsSDKToken(DefaultKeyName, DefaultKey, "sb://localhost/Q", later, false),
			audience: "q/$deadletterqueue", wantRights: Manage, wantRes: "Q", wantAud: "q/$deadletterqueue"},
		{name: "http audience with query", token: goSDKToken(DefaultKeyName, DefaultKey, "https://localhost:5300/q1?api-version=2024-05", later),
			audience: "https://localhost:5300/q1?api-version=2024-05", wantRights: Manage, wantRes: "q1", wantAud: "q1"},
		{name: "js supplementary host:port token", token: jsSDKToken(DefaultKeyName, DefaultKey, "localhost:5300", later, false),
			audience: "q2", wantRights: Manage, wantRes: "", wantAud: "q2"},
		{name: "go supplementary raw entity token", token: goSDKToken(DefaultKeyName, DefaultKey, "q2", later),
			audience: "https://localhost:5300/q2", wantRights: Manage, wantRes: "q2", wantAud: "q2"},

		{name: "wrong audience", token: goSDKToken(DefaultKeyName, DefaultKey, "amqp://localhost/q1", later),
			audience: "amqp://localhost/q2", wantErr: ErrWrongAudience},
		{name: "audience prefix not at boundary", token: goSDKToken(DefaultKeyName, DefaultKey, "amqp://localhost/q", later),
			audience: "amqp://localhost/q2", wantErr: ErrWrongAudience},
		{name: "child does not grant parent", token: goSDKToken(DefaultKeyName, DefaultKey, "amqp://localhost/q/$management", later),
			audience: "amqp://localhost/q", wantErr: ErrWrongAudience},
		{name: "expired", token: goSDKToken(DefaultKeyName, DefaultKey, "sb://localhost/q", now.Add(-time.Second)),
			audience: "q", wantErr: ErrExpired},
		{name: "expires now", token: goSDKToken(DefaultKeyName, DefaultKey, "sb://localhost/q", now),
			audience: "q", wantErr: ErrExpired},
		{name: "wrong key", token: goSDKToken(DefaultKeyName, "not-the-key", "sb://localhost/q", later),
			audience: "q", wantErr: ErrBadSignature},
		{name: "key of another policy", token: goSDKToken(DefaultKeyName, "s3nd-primary", "sb://localhost/q", later),
			audience: "q", wantErr: ErrBadSignature},
		{name: "js wrong key", token: jsSDKToken(DefaultKeyName, "nope", "sb://localhost/q", later, true),
			audience: "q", wantErr: ErrBadSignature},
		{name: "unknown key name", token: goSDKToken("nobody", DefaultKey, "sb://localhost/q", later),
			audience: "q", wantErr: ErrUnknownKey},
		{name: "tampered resource", token: strings.Replace(goSDKToken(DefaultKeyName, DefaultKey, "sb://localhost/q1", later), "q1", "q2", 1),
			audience: "q2", wantErr: ErrBadSignature},
		{name: "tampered expiry", token: strings.Replace(goSDKToken(DefaultKeyName, DefaultKey, "sb://localhost/q", later),
			"se="+strconv.FormatInt(later.Unix(), 10), "se="+strconv.FormatInt(later.Unix()+1, 10), 1),
			audience: "q", wantErr: ErrBadSignature},
		{name: "signature over decoded sr is rejected", token: func() string {
			// A signer that (wrongly) signs the decoded resource.
			se := strconv.FormatInt(later.Unix(), 10)
			h := hmac.New(sha256.New, []byte(DefaultKey))
			h.Write([]byte("sb://localhost/q\n" + se))
			return "SharedAccessSignature sr=sb%3a%2f%2flocalhost%2fq&sig=" + url.QueryEscape(base64.StdEncoding.EncodeToString(h.Sum(nil))) + "&se=" + se + "&skn=" + DefaultKeyName
		}(), audience: "q", wantErr: ErrBadSignature},

		{name: "empty", token: "", audience: "q", wantErr: ErrMalformed},
		{name: "prefix only", token: "SharedAccessSignature ", audience: "q", wantErr: ErrMalformed},
		{name: "jwt", token: "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJ4In0.c2ln", audience: "q", wantErr: ErrMalformed},
		{name: "missing sig", token: "SharedAccessSignature sr=q&se=9999999999&skn=RootManageSharedAccessKey", audience: "q", wantErr: ErrMalformed},
		{name: "missing sr", token: "SharedAccessSignature sig=abcd&se=9999999999&skn=RootManageSharedAccessKey", audience: "q", wantErr: ErrMalformed},
		{name: "missing se", token: "SharedAccessSignature sr=q&sig=abcd&skn=RootManageSharedAccessKey", audience: "q", wantErr: ErrMalformed},
		{name: "missing skn", token: "SharedAccessSignature sr=q&sig=abcd&se=9999999999", audience: "q", wantErr: ErrMalformed},
		{name: "se not a number", token: "SharedAccessSignature sr=q&sig=abcd&se=tomorrow&skn=RootManageSharedAccessKey", audience: "q", wantErr: ErrMalformed},
		{name: "sig not base64", token: "SharedAccessSignature sr=q&sig=%%%&se=9999999999&skn=RootManageSharedAccessKey", audience: "q", wantErr: ErrMalformed},
		{name: "sr bad escape", token: "SharedAccessSignature sr=q%zz&sig=abcd&se=9999999999&skn=RootManageSharedAccessKey", audience: "q", wantErr: ErrMalformed},
		{name: "field without value", token: "SharedAccessSignature sr=q&sig&se=9999999999&skn=RootManageSharedAccessKey", audience: "q", wantErr: ErrMalformed},
		{name: "duplicate field", token: "SharedAccessSignature sr=q&sr=r&sig=abcd&se=9999999999&skn=RootManageSharedAccessKey", audience: "q", wantErr: ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := a.Validate(tt.token, tt.audience)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Validate = %v, %v; want error %v", g, err, tt.wantErr)
				}
				var ae *Error
				if !errors.As(err, &ae) || ae.Msg == "" {
					t.Fatalf("error %v is not a *Error with a message", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if g.Rights != tt.wantRights || g.Resource != tt.wantRes || g.Audience != tt.wantAud {
				t.Fatalf("grant = %+v; want rights %v resource %q audience %q", g, tt.wantRights, tt.wantRes, tt.wantAud)
			}
			if !g.ExpiresAt.Equal(later.Truncate(time.Second)) {
				t.Fatalf("ExpiresAt = %v; want %v", g.ExpiresAt, later)
			}
			if !g.Covers(tt.audience) {
				t.Fatalf("grant does not cover its own audience %q", tt.audience)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	a := newAuth(t, Config{})
	later := now.Add(time.Hour)
	for _, tc := range []struct {
		token, audience, want string
	}{
		{goSDKToken(DefaultKeyName, "x", "sb://h/q", later), "q", "invalid signature"},
		{goSDKToken("who", DefaultKey, "sb://h/q", later), "q", `"who"`},
		{goSDKToken(DefaultKeyName, DefaultKey, "sb://h/q", now.Add(-time.Hour)), "q", "expired"},
		{goSDKToken(DefaultKeyName, DefaultKey, "sb://h/q", later), "r", `"r"`},
		{"junk", "q", "MalformedToken"},
	} {
		_, err := a.Validate(tc.token, tc.audience)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%q) = %v; want message containing %q", tc.token, err, tc.want)
		}
	}
}

func TestExpiryFollowsClock(t *testing.T) {
	fc := clock.NewFake(now)
	a := newAuth(t, Config{Clock: fc})
	tok := NewToken(DefaultKeyName, DefaultKey, "sb://localhost/q", now.Add(time.Minute))
	if _, err := a.Validate(tok, "q"); err != nil {
		t.Fatal(err)
	}
	fc.Advance(59 * time.Second)
	if _, err := a.Validate(tok, "q"); err != nil {
		t.Fatalf("1s before expiry: %v", err)
	}
	fc.Advance(time.Second)
	if _, err := a.Validate(tok, "q"); !errors.Is(err, ErrExpired) {
		t.Fatalf("at expiry: %v; want ErrExpired", err)
	}
}

func TestAllowAnyKey(t *testing.T) {
	a := newAuth(t, Config{AllowAnyKey: true, Policies: []Policy{{Name: "listener", PrimaryKey: "k", Rights: Listen}}})
	later := now.Add(time.Hour)
	tests := []struct {
		name, token, audience string
		wantErr               error
		wantRights            Rights
	}{
		{"any key", goSDKToken("whoever", "whatever", "sb://localhost/q", later), "q", nil, Manage},
		{"known name keeps its rights", goSDKToken("listener", "wrong", "sb://localhost/q", later), "q", nil, Listen},
		{"emulator default", jsSDKToken(DefaultKeyName, DefaultKey, "sb://localhost/q", later, true), "q", nil, Manage},
		{"garbage signature", "SharedAccessSignature sr=q&sig=***&se=" + strconv.FormatInt(later.Unix(), 10) + "&skn=x", "q", nil, Manage},
		{"no expiry", "SharedAccessSignature sr=q&sig=abcd&skn=x", "q/$management", nil, Manage},
		{"unparsable expiry", "SharedAccessSignature sr=q&sig=abcd&se=soon&skn=x", "q", nil, Manage},
		{"no key name", "SharedAccessSignature sr=q&sig=abcd", "q", nil, Manage},
		{"expired still refused", goSDKToken("x", "y", "sb://localhost/q", now.Add(-time.Minute)), "q", ErrExpired, 0},
		{"audience still checked", goSDKToken("x", "y", "sb://localhost/q", later), "other", ErrWrongAudience, 0},
		{"no resource", "SharedAccessSignature sig=abcd&se=1&skn=x", "q", ErrMalformed, 0},
		{"not a token", "", "q", ErrMalformed, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := a.Validate(tt.token, tt.audience)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v; want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g.Rights != tt.wantRights {
				t.Fatalf("rights = %v; want %v", g.Rights, tt.wantRights)
			}
		})
	}
	if !a.AllowAnyKey() || !a.IsWellKnownDefault() {
		t.Fatal("AllowAnyKey authenticator must report AllowAnyKey and IsWellKnownDefault")
	}
}

func TestValidateHeader(t *testing.T) {
	a := newAuth(t, Config{})
	later := now.Add(time.Hour)
	// Go's admin client signs the full request URL, lower-cased.
	url := "https://localhost:5300/MyQueue?api-version=2024-05"
	g, err := a.ValidateHeader(goSDKToken(DefaultKeyName, DefaultKey, url, later), url)
	if err != nil || g.Audience != "MyQueue" || g.Rights != Manage {
		t.Fatalf("ValidateHeader = %+v, %v", g, err)
	}
	// JS's admin client signs http://host:port/path for the emulator.
	if _, err := a.ValidateHeader("  "+jsSDKToken(DefaultKeyName, DefaultKey, "http://localhost:5300/q", later, true)+" ", "http://localhost:5300/q/Subscriptions/s"); err != nil {
		t.Fatalf("ValidateHeader (js): %v", err)
	}
	for _, h := range []string{"", "Bearer eyJ0eXAiOiJKV1QifQ.e30.sig", "Basic dTpw", "sr=q&sig=a&se=1&skn=x"} {
		if _, err := a.ValidateHeader(h, url); !errors.Is(err, ErrMalformed) {
			t.Errorf("ValidateHeader(%q) = %v; want ErrMalformed", h, err)
		}
	}
	if _, err := a.ValidateHeader(goSDKToken(DefaultKeyName, "bad", url, later), url); !errors.Is(err, ErrBadSignature) {
		t.Errorf("bad key: %v", err)
	}
}

func TestNormalizeAudience(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://localhost:5672/myqueue":            "myqueue",
		"amqps://ns.servicebus.windows.net/q":      "q",
		"sb://localhost/myqueue/":                  "myqueue",
		"SB://LOCALHOST/MyQueue":                   "MyQueue",
		"http://localhost:5300/q?api-version=2024": "q",
		"https://h/t/Subscriptions/s#frag":         "t/Subscriptions/s",
		"myqueue/$management":                      "myqueue/$management",
		"/myqueue":                                 "myqueue",
		"sb://localhost":                           "",
		"sb://localhost/":                          "",
		"localhost:5300":                           "",
		"localhost:5300/q":                         "q",
		"q/%24DeadLetterQueue":                     "q/$DeadLetterQueue",
		"$cbs":                                     "$cbs",
		"":                                         "",
	} {
		if got := NormalizeAudience(in); got != want {
			t.Errorf("NormalizeAudience(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestRights(t *testing.T) {
	for _, tc := range []struct {
		have, want Rights
		ok         bool
	}{
		{Manage, Send, true}, {Manage, Listen, true}, {Manage, Manage, true}, {Manage, Send | Listen | Manage, true},
		{Send, Send, true}, {Send, Listen, false}, {Send, Manage, false},
		{Listen, Listen, true}, {Listen, Send, false},
		{Send | Listen, Send | Listen, true}, {Send | Listen, Manage, false},
		{0, Send, false},
	} {
		if got := tc.have.Has(tc.want); got != tc.ok {
			t.Errorf("%v.Has(%v) = %v; want %v", tc.have, tc.want, got, tc.ok)
		}
	}
	r, err := ParseRights("Send, listen")
	if err != nil || r != Send|Listen {
		t.Fatalf("ParseRights = %v, %v", r, err)
	}
	if r.String() != "Send, Listen" || Manage.String() != "Manage" || Rights(0).String() != "None" {
		t.Fatalf("String: %q %q", r.String(), Manage.String())
	}
	for _, bad := range []string{"", "read", "Send,,Write"} {
		if _, err := ParseRights(bad); err == nil {
			t.Errorf("ParseRights(%q) succeeded", bad)
		}
	}
}

func TestPolicies(t *testing.T) {
	a := newAuth(t, Config{})
	if p := a.Policies(); len(p) != 1 || p[0] != DefaultPolicy() {
		t.Fatalf("default policies = %+v", p)
	}
	if !a.IsWellKnownDefault() {
		t.Fatal("default configuration must report IsWellKnownDefault")
	}
	b := newAuth(t, Config{Policies: []Policy{{Name: DefaultKeyName, PrimaryKey: "s3cret", Rights: Manage}}})
	if b.IsWellKnownDefault() {
		t.Fatal("custom key reported as well-known")
	}
	c := newAuth(t, Config{Policies: []Policy{{Name: "x", PrimaryKey: "s3cret", SecondaryKey: DefaultKey, Rights: Send}}})
	if !c.IsWellKnownDefault() {
		t.Fatal("well-known secondary key not reported")
	}
	for _, bad := range [][]Policy{
		{{PrimaryKey: "k", Rights: Send}},
		{{Name: "a", Rights: Send}},
		{{Name: "a", PrimaryKey: "k"}},
		{{Name: "a", PrimaryKey: "k", Rights: Send}, {Name: "A", PrimaryKey: "k2", Rights: Listen}},
	} {
		if _, err := New(Config{Policies: bad}); err == nil {
			t.Errorf("New(%+v) succeeded", bad)
		}
	}
}

func TestParseToken(t *testing.T) {
	tok, err := ParseToken(jsSDKToken("a b", "k", "sb://localhost/Q", time.Unix(1700000000, 0), false))
	if err != nil {
		t.Fatal(err)
	}
	if tok.Resource != "sb://localhost/Q" || tok.KeyName != "a b" || !tok.ExpiresAt.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("ParseToken = %+v", tok)
	}
}
