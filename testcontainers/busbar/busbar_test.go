package busbar

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/testcontainers/testcontainers-go"
)

// customize applies opts to a fresh request as Run does.
func customize(t *testing.T, opts ...testcontainers.ContainerCustomizer) (testcontainers.GenericContainerRequest, error) {
	t.Helper()
	req := testcontainers.GenericContainerRequest{ContainerRequest: testcontainers.ContainerRequest{Env: map[string]string{"BUSBAR_MEMORY": "true"}}}
	for _, o := range opts {
		if err := o.Customize(&req); err != nil {
			return req, err
		}
	}
	return req, nil
}

func TestOptions(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "Config.json")
	if err := os.WriteFile(cfg, []byte(`{"UserConfig":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	req, err := customize(t,
		WithConfigFile(cfg),
		WithPolicy("app", "k1", "Send", "Listen"),
		WithPolicy("ops", "k2"),
		WithPersistence())
	if err != nil {
		t.Fatal(err)
	}
	if got := req.Env["BUSBAR_POLICIES"]; got != "app=k1:Send,Listen;ops=k2" {
		t.Errorf("BUSBAR_POLICIES = %q", got)
	}
	if req.Env["BUSBAR_MEMORY"] != "false" {
		t.Errorf("WithPersistence left BUSBAR_MEMORY=%q", req.Env["BUSBAR_MEMORY"])
	}
	if len(req.Files) != 1 || req.Files[0].ContainerFilePath != "/config/Config.json" || req.Files[0].HostFilePath != cfg {
		t.Errorf("files = %+v", req.Files)
	}
	name, key, err := firstPolicy(req.Env["BUSBAR_POLICIES"])
	if err != nil || name != "app" || key != "k1" {
		t.Errorf("firstPolicy = %q %q %v", name, key, err)
	}

	req, err = customize(t, WithConfig(strings.NewReader(`{}`)))
	if err != nil || len(req.Files) != 1 || req.Files[0].Reader == nil || req.Files[0].ContainerFilePath != "/config/Config.json" {
		t.Errorf("WithConfig: %+v %v", req.Files, err)
	}
}

func TestOptionErrors(t *testing.T) {
	for _, o := range []testcontainers.CustomizeRequestOption{
		WithPolicy("", "k"),
		WithPolicy("a", ""),
		WithPolicy("a;b", "k"),
		WithPolicy("a", "k=1"),
		WithPolicy("a", "k", "Write"),
	} {
		if _, err := customize(t, o); err == nil {
			t.Errorf("option accepted a bad policy")
		}
	}
	if _, _, err := firstPolicy("nokey"); err == nil {
		t.Error("firstPolicy accepted an entry without a key")
	}
	if n, k, err := firstPolicy(""); err != nil || n != DefaultKeyName || k != DefaultKey {
		t.Errorf("firstPolicy(\"\") = %q %q %v", n, k, err)
	}
}

func TestConnectionStringFormat(t *testing.T) {
	got := connectionString("localhost:32768", "RootManageSharedAccessKey", "SAS_KEY_VALUE")
	want := "Endpoint=sb://localhost:32768;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	// The SDK takes it as an emulator connection string.
	if _, err := azservicebus.NewClientFromConnectionString(got, nil); err != nil {
		t.Fatal(err)
	}
}

func TestTLSConfig(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := tlsConfig(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	if err != nil || cfg.RootCAs == nil {
		t.Fatalf("tlsConfig: %v", err)
	}
	if _, err := tlsConfig([]byte("not a certificate")); err == nil {
		t.Fatal("tlsConfig accepted garbage")
	}
}

// TestRun starts the image and uses it with the SDK's messaging and admin
// clients. It needs a container runtime and the image (docker build -t
// busbar . in the repository): without either it is skipped, and says so.
func TestRun(t *testing.T) {
	testcontainers.SkipIfProviderIsNotHealthy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Run(ctx, DefaultImage, WithConfig(strings.NewReader(
		`{"UserConfig":{"Namespaces":[{"Name":"sbemulatorns","Queues":[{"Name":"orders","Properties":{}}]}],"Logging":{"Type":"File"}}}`)))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := c.ConnectionString(ctx)
	if err != nil {
		t.Fatal(err)
	}
	client, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("hello")}, nil); err != nil {
		t.Fatal(err)
	}
	receiver, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "hello" {
		t.Fatalf("receive: %v %v", msgs, err)
	}
	if err := receiver.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}

	acs, err := c.AdminConnectionString(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := c.TLSConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := admin.NewClientFromConnectionString(acs, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateQueue(ctx, "created-by-admin", nil); err != nil {
		t.Fatal(err)
	}
}
