package server

// Entra ID with the official Go SDK: azservicebus.NewClient and
// admin.NewClient with a TokenCredential that mints JWTs, over TLS (the
// SDK's token path speaks only amqps and https), in development mode (the
// emulator key) and in OIDC mode (an issuer on loopback, keys made here).

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/auth/authtest"
	"github.com/busbarmq/busbar/internal/config"
)

// jwtCredential mints a JWT per GetToken for the scope asked (aud = the
// scope without "/.default", as Entra ID does), with claims overriding
// the defaults (nil deletes one), signed with key (nil: unsigned).
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

// tlsServer starts a broker with amqps and https on loopback and a dev
// certificate, and returns the client TLS configuration that trusts it.
func tlsServer(t *testing.T, o Options) (*Server, *tls.Config) {
	t.Helper()
	o.DataDir, o.DevTLS, o.AMQPSAddr, o.HTTPSAddr = t.TempDir(), true, "127.0.0.1:0", "127.0.0.1:0"
	s := start(t, o)
	t.Cleanup(func() { stop(t, s) })
	pem, err := os.ReadFile(s.DevCertificate())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return s, &tls.Config{RootCAs: pool, ServerName: "localhost"}
}

type entraClients struct {
	msg *azservicebus.Client
	adm *admin.Client
}

func newEntraClients(t *testing.T, s *Server, tlsCfg *tls.Config, cred azcore.TokenCredential) entraClients {
	t.Helper()
	ns := "localhost:" + portOf(t, s.AMQPSAddr().String())
	msg, err := azservicebus.NewClient(ns, cred, &azservicebus.ClientOptions{TLSConfig: tlsCfg,
		RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = msg.Close(context.Background()) })
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 10 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	adm, err := admin.NewClient("localhost:"+portOf(t, s.HTTPSAddr().String()), cred, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: hc, Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	return entraClients{msg: msg, adm: adm}
}

// sendReceive sends one message to q and completes it.
func (c entraClients) sendReceive(ctx context.Context, q string) error {
	snd, err := c.msg.NewSender(q, nil)
	if err != nil {
		return err
	}
	defer snd.Close(ctx)
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("entra")}, nil); err != nil {
		return err
	}
	rcv, err := c.msg.NewReceiverForQueue(q, nil)
	if err != nil {
		return err
	}
	defer rcv.Close(ctx)
	ms, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		return err
	}
	if len(ms) != 1 || string(ms[0].Body) != "entra" {
		return errors.New("wrong message back")
	}
	return rcv.CompleteMessage(ctx, ms[0], nil)
}

func unauthorizedSB(err error) bool {
	var se *azservicebus.Error
	return errors.As(err, &se) && se.Code == azservicebus.CodeUnauthorizedAccess
}

func status401(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusUnauthorized
}

// TestEntraDevSDK: with the emulator key, DefaultAzureCredential-style
// code runs unchanged: a token without roles is Data Owner; roles narrow
// it; a wrong audience or an expired token is refused.
func TestEntraDevSDK(t *testing.T) {
	s, tlsCfg := tlsServer(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	owner := newEntraClients(t, s, tlsCfg, jwtCredential{})
	if _, err := owner.adm.CreateQueue(ctx, "orders", nil); err != nil {
		t.Fatalf("CreateQueue with a token without roles: %v", err)
	}
	if err := owner.sendReceive(ctx, "orders"); err != nil {
		t.Fatalf("send/receive with a token without roles: %v", err)
	}

	// Data Sender: sends, cannot receive nor manage.
	sender := newEntraClients(t, s, tlsCfg, jwtCredential{claims: map[string]any{"roles": []string{"Azure Service Bus Data Sender"}}})
	snd, err := sender.msg.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err != nil {
		t.Fatalf("Data Sender sends: %v", err)
	}
	rcv, err := sender.msg.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rcv.ReceiveMessages(ctx, 1, nil); !unauthorizedSB(err) {
		t.Fatalf("Data Sender receives: %v", err)
	}
	if _, err := sender.adm.GetQueue(ctx, "orders", nil); !status401(err) {
		t.Fatalf("Data Sender manages: %v", err)
	}

	for want, cred := range map[string]jwtCredential{
		"InvalidAudience":          {claims: map[string]any{"aud": "https://storage.azure.com"}},
		"ExpiredToken":             {claims: map[string]any{"exp": time.Now().Add(-time.Minute).Unix()}},
		"no Service Bus data role": {claims: map[string]any{"roles": []string{"Reader"}}},
	} {
		name := want
		c := newEntraClients(t, s, tlsCfg, cred)
		if err := c.sendReceive(ctx, "orders"); !unauthorizedSB(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: send = %v, want unauthorized", name, err)
		}
		if _, err := c.adm.GetQueue(ctx, "orders", nil); !status401(err) {
			t.Errorf("%s: admin = %v, want 401", name, err)
		}
	}
}

// TestEntraOIDCSDK: with an issuer configured (and keys of our own, so no
// development mode), signed tokens work and unsigned, badly signed and
// role-less ones are refused.
func TestEntraOIDCSDK(t *testing.T) {
	is := authtest.NewIssuer(t)
	s, tlsCfg := tlsServer(t, Options{Server: config.Server{
		Policies:    "root=not-the-emulator-key:Manage",
		OIDCIssuers: is.URL, OIDCTenants: "tenant-1",
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	owner := map[string]any{"iss": is.URL, "roles": []string{"Azure Service Bus Data Owner"}}
	good := newEntraClients(t, s, tlsCfg, jwtCredential{claims: owner, kid: authtest.KidRSA, key: is.RSA})
	if _, err := good.adm.CreateQueue(ctx, "q", nil); err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	if err := good.sendReceive(ctx, "q"); err != nil {
		t.Fatalf("send/receive: %v", err)
	}
	other := authtest.NewIssuer(t)
	for want, cred := range map[string]jwtCredential{
		"InvalidSignature":         {claims: owner, kid: authtest.KidRSA, key: other.RSA},
		"algorithm \"none\"":       {claims: owner},
		"no Service Bus data role": {claims: map[string]any{"iss": is.URL}, kid: authtest.KidEC, key: is.EC},
		"InvalidTenant":            {claims: map[string]any{"iss": is.URL, "tid": "tenant-2", "roles": []string{"Azure Service Bus Data Owner"}}, kid: authtest.KidRSA, key: is.RSA},
	} {
		name := want
		c := newEntraClients(t, s, tlsCfg, cred)
		if err := c.sendReceive(ctx, "q"); !unauthorizedSB(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: send = %v, want unauthorized", name, err)
		}
		if _, err := c.adm.GetQueue(ctx, "q", nil); !status401(err) {
			t.Errorf("%s: admin = %v, want 401", name, err)
		}
	}
}
