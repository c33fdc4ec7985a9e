package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/config"
)

// TestDevTLS starts the TLS listeners with a generated certificate and
// talks to both with the official Go clients, which trust only that
// certificate: the admin client over https (it speaks nothing else) and the
// messaging client over amqps (no emulator flag in the connection string).
func TestDevTLS(t *testing.T) {
	dir := t.TempDir()
	s := start(t, Options{Server: config.Server{DataDir: dir, DevTLS: true, AMQPSAddr: "127.0.0.1:0", HTTPSAddr: "127.0.0.1:0"}})
	defer stop(t, s)
	if s.DevCertificate() == "" {
		t.Fatal("no dev certificate path reported")
	}
	pem, err := os.ReadFile(s.DevCertificate())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("dev certificate is not PEM")
	}
	tlsCfg := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	httpsPort := portOf(t, s.HTTPSAddr().String())
	adminCS := "Endpoint=sb://localhost:" + httpsPort + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE"
	transport := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 10 * time.Second}
	adm, err := admin.NewClientFromConnectionString(adminCS, &admin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: transport, Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateQueue(ctx, "tls-queue", nil); err != nil {
		t.Fatalf("CreateQueue over https: %v", err)
	}

	amqpsPort := portOf(t, s.AMQPSAddr().String())
	cs := "Endpoint=sb://localhost:" + amqpsPort + ";SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE"
	client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{TLSConfig: tlsCfg})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender("tls-queue", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("over tls")}, nil); err != nil {
		t.Fatalf("send over amqps: %v", err)
	}
	receiver, err := client.NewReceiverForQueue("tls-queue", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "over tls" {
		t.Fatalf("receive over amqps = %v, %v", msgs, err)
	}
	if err := receiver.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}

	// A second start reuses the certificate rather than making a new one.
	before, _ := os.ReadFile(s.DevCertificate())
	if err := ensureDevCert(s.DevCertificate(), dir+"/"+devKeyFile); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(s.DevCertificate())
	if string(before) != string(after) {
		t.Fatal("dev certificate was regenerated although still valid")
	}
}

func TestTLSNeedsCertificate(t *testing.T) {
	_, err := Start(context.Background(), Options{Server: config.Server{Memory: true, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", AMQPSAddr: "127.0.0.1:0"}})
	if err == nil {
		t.Fatal("Start accepted --amqps without a certificate")
	}
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[i+1:]
		}
	}
	t.Fatalf("no port in %q", addr)
	return ""
}
