package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/auth/authtest"
	"github.com/busbarmq/busbar/internal/clock"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func claims(extra map[string]any) map[string]any {
	c := map[string]any{
		"aud": "https://servicebus.azure.net",
		"exp": t0.Add(time.Hour).Unix(),
		"nbf": t0.Add(-time.Minute).Unix(),
		"oid": "00000000-0000-0000-0000-00000000abcd",
		"tid": "tenant-1",
	}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	return c
}

func newA(t *testing.T, cfg auth.Config) (*auth.Authenticator, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(t0)
	cfg.Clock = clk
	a, err := auth.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a, clk
}

func jwtCheck(a *auth.Authenticator, tok, audience string) (auth.Grant, error) {
	return a.Authenticate(context.Background(), auth.Presented{Token: tok, Type: auth.TypeJWT, Audience: audience, Host: "localhost:5671"})
}

func TestEntraModeDefault(t *testing.T) {
	for _, tc := range []struct {
		cfg  auth.Config
		want auth.EntraMode
	}{
		{auth.Config{}, auth.EntraDev}, // the emulator key
		{auth.Config{Policies: []auth.Policy{{Name: "p", PrimaryKey: "secret", Rights: auth.Manage}}}, auth.EntraOff},
		{auth.Config{Policies: []auth.Policy{{Name: "p", PrimaryKey: "secret", Rights: auth.Manage}}, AllowAnyKey: true}, auth.EntraDev},
		{auth.Config{Entra: auth.EntraConfig{Issuers: []string{"https://login.example/t/v2.0"}}}, auth.EntraOIDC},
		{auth.Config{Entra: auth.EntraConfig{Mode: auth.EntraOff}}, auth.EntraOff},
	} {
		a, _ := newA(t, tc.cfg)
		if a.EntraMode() != tc.want {
			t.Errorf("%+v: mode %v, want %v", tc.cfg, a.EntraMode(), tc.want)
		}
	}
	if _, err := auth.New(auth.Config{Entra: auth.EntraConfig{Mode: auth.EntraOIDC}}); err == nil {
		t.Error("oidc mode without issuers accepted")
	}
	if _, err := auth.New(auth.Config{Entra: auth.EntraConfig{DevDefaultRole: "admin"}}); err == nil {
		t.Error("unknown default role accepted")
	}
}

func TestDevJWT(t *testing.T) {
	a, clk := newA(t, auth.Config{})
	owner := authtest.Sign(claims(map[string]any{"roles": []string{"Azure Service Bus Data Owner"}}), "", nil)

	g, err := jwtCheck(a, owner, "amqps://localhost:5671/q1")
	if err != nil {
		t.Fatal(err)
	}
	if g.Rights != auth.Manage|auth.Send|auth.Listen || g.Resource != "" || !g.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("grant %+v", g)
	}
	// Role names, short names and role definition ids.
	for role, want := range map[string]auth.Rights{
		"Azure Service Bus Data Sender":        auth.Send,
		"azure service bus data receiver":      auth.Listen,
		"Data Sender":                          auth.Send,
		auth.RoleIDDataReceiver:                auth.Listen,
		auth.RoleIDDataOwner:                   auth.Manage | auth.Send | auth.Listen,
		strings.ToUpper(auth.RoleIDDataSender): auth.Send,
	} {
		g, err := jwtCheck(a, authtest.Sign(claims(map[string]any{"roles": []string{"Other", role}}), "", nil), "q1")
		if err != nil || g.Rights != want {
			t.Errorf("role %q: %v %v, want %v", role, g.Rights, err, want)
		}
	}
	// Audience forms: the service, with a slash, the namespace URL, an
	// entity URL (scoped to it), an array.
	for aud, res := range map[string]string{
		"https://servicebus.azure.net/":         "",
		"https://localhost/":                    "",
		"sb://localhost:5671":                   "",
		"https://localhost/q1":                  "q1",
		"https://127.0.0.1:5671/Q1/$management": "Q1/$management",
	} {
		g, err := jwtCheck(a, authtest.Sign(claims(map[string]any{"aud": aud, "roles": []string{"Data Owner"}}), "", nil), "q1/$management")
		if err != nil || g.Resource != res {
			t.Errorf("aud %q: %+v %v, want resource %q", aud, g, err, res)
		}
	}
	g, err = jwtCheck(a, authtest.Sign(claims(map[string]any{"aud": []string{"api://x", "https://servicebus.azure.net"}, "roles": []string{"Data Owner"}}), "", nil), "q1")
	if err != nil || g.Resource != "" {
		t.Errorf("aud array: %+v %v", g, err)
	}

	refused := map[string]struct {
		tok      string
		audience string
		kind     error
	}{
		"wrong audience":       {authtest.Sign(claims(map[string]any{"aud": "https://storage.azure.com", "roles": []string{"Data Owner"}}), "", nil), "q1", auth.ErrWrongAudience},
		"other namespace host": {authtest.Sign(claims(map[string]any{"aud": "https://myns.servicebus.windows.net/", "roles": []string{"Data Owner"}}), "", nil), "q1", auth.ErrWrongAudience},
		"other entity":         {authtest.Sign(claims(map[string]any{"aud": "https://localhost/q2", "roles": []string{"Data Owner"}}), "", nil), "q1", auth.ErrWrongAudience},
		"no role":              {authtest.Sign(claims(map[string]any{"roles": []string{"Reader"}}), "", nil), "q1", auth.ErrNoRole},
		"empty roles":          {authtest.Sign(claims(map[string]any{"roles": []string{}}), "", nil), "q1", auth.ErrNoRole},
		"no exp":               {authtest.Sign(claims(map[string]any{"exp": nil, "roles": []string{"Data Owner"}}), "", nil), "q1", auth.ErrMalformed},
		"expired":              {authtest.Sign(claims(map[string]any{"exp": t0.Add(-time.Second).Unix(), "roles": []string{"Data Owner"}}), "", nil), "q1", auth.ErrExpired},
		"not yet valid":        {authtest.Sign(claims(map[string]any{"nbf": t0.Add(time.Minute).Unix(), "roles": []string{"Data Owner"}}), "", nil), "q1", auth.ErrExpired},
		"two parts":            {"eyJhbGciOiJub25lIn0.eyJ9", "q1", auth.ErrMalformed},
		"not json":             {"eyJub3QganNvbg.eyJ9.", "q1", auth.ErrMalformed},
		"claims an array":      {"eyJhbGciOiJub25lIn0.WzFd.", "q1", auth.ErrMalformed},
	}
	for name, tc := range refused {
		_, err := jwtCheck(a, tc.tok, tc.audience)
		if !errors.Is(err, tc.kind) {
			t.Errorf("%s: %v, want %v", name, err, tc.kind)
		}
		if err != nil && len(tc.tok) > 20 && strings.Contains(err.Error(), tc.tok[:20]) {
			t.Errorf("%s: the error repeats the token: %v", name, err)
		}
	}

	// A token without a roles claim (DefaultAzureCredential's) gets the
	// default role: Data Owner unless configured.
	bare := authtest.Sign(claims(nil), "", nil)
	if g, err := jwtCheck(a, bare, "q1"); err != nil || g.Rights != auth.Manage|auth.Send|auth.Listen {
		t.Errorf("no roles claim: %+v %v", g, err)
	}
	sender, _ := newA(t, auth.Config{Entra: auth.EntraConfig{DevDefaultRole: "Azure Service Bus Data Sender"}})
	if g, err := jwtCheck(sender, bare, "q1"); err != nil || g.Rights != auth.Send {
		t.Errorf("default role sender: %+v %v", g, err)
	}
	none, _ := newA(t, auth.Config{Entra: auth.EntraConfig{DevDefaultRole: "none"}})
	if _, err := jwtCheck(none, bare, "q1"); !errors.Is(err, auth.ErrNoRole) {
		t.Errorf("default role none: %v", err)
	}

	// Expiry follows the injected clock.
	clk.Advance(time.Hour)
	if _, err := jwtCheck(a, owner, "q1"); !errors.Is(err, auth.ErrExpired) {
		t.Errorf("after an hour: %v", err)
	}

	// Off: JWTs are refused, clearly.
	off, _ := newA(t, auth.Config{Entra: auth.EntraConfig{Mode: auth.EntraOff}})
	if _, err := jwtCheck(off, owner, "q1"); !errors.Is(err, auth.ErrNotEnabled) || !strings.Contains(err.Error(), "--oidc-issuer") {
		t.Errorf("off: %v", err)
	}
}

func TestOIDCJWT(t *testing.T) {
	is := authtest.NewIssuer(t)
	a, clk := newA(t, auth.Config{
		Policies: []auth.Policy{{Name: "p", PrimaryKey: "secret", Rights: auth.Manage}},
		Entra:    auth.EntraConfig{Issuers: []string{is.URL + "/"}, Tenants: []string{"tenant-1"}, Audiences: []string{"api://busbar"}},
	})
	owner := claims(map[string]any{"roles": []string{"Azure Service Bus Data Owner"}})

	// RS256 and ES256.
	if g, err := jwtCheck(a, is.Sign(owner), "q1"); err != nil || g.Rights != auth.Manage|auth.Send|auth.Listen {
		t.Fatalf("RS256: %+v %v", g, err)
	}
	owner["iss"] = is.URL
	if _, err := jwtCheck(a, authtest.Sign(owner, authtest.KidEC, is.EC), "q1"); err != nil {
		t.Fatalf("ES256: %v", err)
	}
	if _, err := jwtCheck(a, is.Sign(claims(map[string]any{"aud": "api://busbar", "roles": []string{"Data Sender"}})), "q1"); err != nil {
		t.Fatalf("configured audience: %v", err)
	}
	if n := is.Fetches.Load(); n != 1 {
		t.Errorf("%d JWKS fetches, want 1 (cached)", n)
	}

	other, _ := rsaKey(t)
	refused := map[string]struct {
		tok  string
		kind error
	}{
		"unsigned":          {authtest.Sign(owner, "", nil), auth.ErrMalformed},
		"bad signature":     {authtest.Sign(owner, authtest.KidRSA, other), auth.ErrBadSignature},
		"ES key as RS":      {authtest.Sign(owner, authtest.KidRSA, is.EC), auth.ErrBadSignature},
		"other issuer":      {is.Sign(claims(map[string]any{"iss": "https://evil.example", "roles": []string{"Data Owner"}})), auth.ErrBadSignature},
		"other tenant":      {is.Sign(claims(map[string]any{"tid": "tenant-2", "roles": []string{"Data Owner"}})), auth.ErrWrongAudience},
		"no roles claim":    {is.Sign(claims(nil)), auth.ErrNoRole},
		"wrong audience":    {is.Sign(claims(map[string]any{"aud": "api://other", "roles": []string{"Data Owner"}})), auth.ErrWrongAudience},
		"expired past skew": {is.Sign(claims(map[string]any{"exp": t0.Add(-6 * time.Minute).Unix(), "roles": []string{"Data Owner"}})), auth.ErrExpired},
	}
	for name, tc := range refused {
		if _, err := jwtCheck(a, tc.tok, "q1"); !errors.Is(err, tc.kind) {
			t.Errorf("%s: %v, want %v", name, err, tc.kind)
		}
	}
	// Within the clock skew (5 minutes) a token is still good.
	if _, err := jwtCheck(a, is.Sign(claims(map[string]any{"exp": t0.Add(-4 * time.Minute).Unix(), "roles": []string{"Data Owner"}})), "q1"); err != nil {
		t.Errorf("within skew: %v", err)
	}

	// An unknown key id fetches the keys again, at most once a minute.
	clk.Advance(time.Minute)
	before := is.Fetches.Load()
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rotated := authtest.Sign(owner, "ec-2", ek)
	if _, err := jwtCheck(a, rotated, "q1"); !errors.Is(err, auth.ErrBadSignature) {
		t.Fatalf("unknown kid: %v", err)
	}
	is.AddKey("ec-2", ek)
	for range 5 {
		if _, err := jwtCheck(a, rotated, "q1"); !errors.Is(err, auth.ErrBadSignature) {
			t.Fatalf("unknown kid within a minute: %v", err)
		}
	}
	if n := is.Fetches.Load() - before; n != 1 {
		t.Errorf("%d fetches for unknown kids within a minute, want 1", n)
	}
	clk.Advance(time.Minute)
	if _, err := jwtCheck(a, rotated, "q1"); err != nil {
		t.Errorf("rotated key after a minute: %v", err)
	}
}

func TestOIDCBounds(t *testing.T) {
	is := authtest.NewIssuer(t)
	a, clk := newA(t, auth.Config{Entra: auth.EntraConfig{Issuers: []string{is.URL}}})
	tok := is.Sign(claims(map[string]any{"roles": []string{"Data Owner"}}))

	// A JWKS over the size cap is refused (and not kept).
	is.ServeJWKS([]byte(`{"keys":[` + strings.Repeat(`{"kty":"oct"},`, 100000) + `{}]}`))
	if _, err := jwtCheck(a, tok, "q1"); !errors.Is(err, auth.ErrKeysUnavailable) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("huge JWKS: %v", err)
	}
	clk.Advance(time.Minute)
	is.ServeJWKS([]byte(`{"keys":[` + strings.Repeat(`{"kty":"oct"},`, 200) + `{}]}`))
	if _, err := jwtCheck(a, tok, "q1"); !errors.Is(err, auth.ErrKeysUnavailable) || !strings.Contains(err.Error(), "at most 100") {
		t.Errorf("too many keys: %v", err)
	}
	// An oversized token is refused before it is decoded.
	if _, err := jwtCheck(a, "eyJ"+strings.Repeat("a", auth.MaxTokenBytes)+".x.y", "q1"); !errors.Is(err, auth.ErrMalformed) {
		t.Errorf("huge token: %v", err)
	}
}

func TestAuthorizationHeaderForms(t *testing.T) {
	a, _ := newA(t, auth.Config{})
	tok := authtest.Sign(claims(map[string]any{"roles": []string{"Data Owner"}}), "", nil)
	for _, h := range []string{"Bearer " + tok, "bearer " + tok, tok} {
		if _, err := a.AuthenticateHeader(context.Background(), h, "q1", "localhost"); err != nil {
			t.Errorf("%.10s…: %v", h, err)
		}
	}
	sas := auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, "sb://localhost/q1", t0.Add(time.Hour))
	if _, err := a.AuthenticateHeader(context.Background(), sas, "q1", "localhost"); err != nil {
		t.Errorf("SAS header: %v", err)
	}
	const secret = "c2VjcmV0LXNlY3JldC1zZWNyZXQ"
	_, err := a.AuthenticateHeader(context.Background(), "Basic"+secret, "q1", "localhost")
	if !errors.Is(err, auth.ErrMalformed) || strings.Contains(err.Error(), secret[:10]) {
		t.Errorf("unknown scheme: %v (must not repeat the header)", err)
	}
}

func rsaKey(t *testing.T) (*rsa.PrivateKey, error) {
	t.Helper()
	is := authtest.NewIssuer(t) // a key pair no one publishes for the first issuer
	return is.RSA, nil
}
