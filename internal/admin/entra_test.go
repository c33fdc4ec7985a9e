package admin

// Entra ID tokens on the admin API, with the Go admin client and a
// credential that mints JWTs (development mode checks no signature; the
// OIDC mode checks them against an issuer on loopback).

import (
	"context"
	"crypto"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/auth/authtest"
)

// jwtCredential is an azcore.TokenCredential minting JWTs for the scope
// asked (aud = the scope without "/.default", as Entra ID does) with the
// given extra claims, signed with key (nil: unsigned).
type jwtCredential struct {
	claims map[string]any
	kid    string
	key    crypto.PrivateKey
}

func (c jwtCredential) GetToken(_ context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	exp := time.Now().Add(time.Hour)
	cl := map[string]any{"exp": exp.Unix(), "nbf": time.Now().Add(-time.Minute).Unix(), "oid": "test-principal", "tid": "tenant-1"}
	if len(o.Scopes) > 0 {
		cl["aud"] = strings.TrimRight(strings.TrimSuffix(o.Scopes[0], ".default"), "/")
	}
	for k, v := range c.claims {
		if v == nil {
			delete(cl, k)
		} else {
			cl[k] = v
		}
	}
	return azcore.AccessToken{Token: authtest.Sign(cl, c.kid, c.key), ExpiresOn: exp}, nil
}

func (e *env) jwtClient(cred azcore.TokenCredential) *sbadmin.Client {
	e.t.Helper()
	c, err := sbadmin.NewClient(e.host, cred, &sbadmin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: e.srv.Client(),
		Retry:     policy.RetryOptions{MaxRetries: -1},
	}})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// TestEntraDevAdmin: with the emulator key, development mode: the admin
// client's bare JWT works without a roles claim (DefaultAzureCredential)
// and with Data Owner; Data Sender lacks Manage; a wrong audience or an
// expired token is refused.
func TestEntraDevAdmin(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for name, cred := range map[string]jwtCredential{
		"no roles claim": {},
		"data owner":     {claims: map[string]any{"roles": []string{"Azure Service Bus Data Owner"}}},
		"owner role id":  {claims: map[string]any{"roles": []string{auth.RoleIDDataOwner}}},
	} {
		q := strings.ReplaceAll(name, " ", "-")
		if _, err := e.jwtClient(cred).CreateQueue(ctx, q, nil); err != nil {
			t.Fatalf("%s: CreateQueue: %v", name, err)
		}
	}
	for name, cred := range map[string]jwtCredential{
		"data sender":    {claims: map[string]any{"roles": []string{"Azure Service Bus Data Sender"}}},
		"wrong audience": {claims: map[string]any{"aud": "https://management.azure.com"}},
		"expired":        {claims: map[string]any{"exp": time.Now().Add(-time.Minute).Unix()}},
	} {
		_, err := e.jwtClient(cred).GetQueue(ctx, "no-roles-claim", nil)
		if statusOf(err) != http.StatusUnauthorized {
			t.Errorf("%s: %v, want 401", name, err)
		}
	}
}

// TestEntraOIDCAdmin: with issuers configured, signatures are checked.
func TestEntraOIDCAdmin(t *testing.T) {
	is := authtest.NewIssuer(t)
	e := newEnvWith(t, auth.Config{Entra: auth.EntraConfig{Issuers: []string{is.URL}}})
	ctx := context.Background()
	owner := map[string]any{"iss": is.URL, "roles": []string{"Azure Service Bus Data Owner"}}
	if _, err := e.jwtClient(jwtCredential{claims: owner, kid: authtest.KidEC, key: is.EC}).CreateQueue(ctx, "q", nil); err != nil {
		t.Fatalf("CreateQueue with a signed token: %v", err)
	}
	other := authtest.NewIssuer(t)
	for name, cred := range map[string]jwtCredential{
		"bad signature":  {claims: owner, kid: authtest.KidRSA, key: other.RSA},
		"unsigned":       {claims: owner},
		"no roles claim": {claims: map[string]any{"iss": is.URL}, kid: authtest.KidRSA, key: is.RSA},
	} {
		if _, err := e.jwtClient(cred).GetQueue(ctx, "q", nil); statusOf(err) != http.StatusUnauthorized {
			t.Errorf("%s: %v, want 401", name, err)
		}
	}
}

// TestAuthorizationNotEchoed: a bad Authorization header is refused
// without repeating it in the error body.
func TestAuthorizationNotEchoed(t *testing.T) {
	e := newEnv(t)
	const secret = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBhcnQtb2YtdGhlLXRva2Vu.c2lnbmF0dXJlLXBhcnQ"
	for _, h := range []string{secret, "Bearer " + secret, "Weird" + secret, "SharedAccessSignature sr=x&sig=" + secret + "&se=1&skn"} {
		status, _, body := e.do(http.MethodGet, "/q?api-version=2021-05", "", "Authorization", h)
		if status != http.StatusUnauthorized {
			t.Errorf("%.12s…: status %d", h, status)
		}
		if strings.Contains(body, "c2VjcmV0LXBhcnQ") || strings.Contains(body, "c2lnbmF0dXJl") {
			t.Errorf("%.12s…: the body repeats the token: %s", h, body)
		}
	}
}
