package amqp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
)

// TestTLS serves on a TLS listener, as the caller may: the endpoint
// itself is unaware of it.
func TestTLS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}

	srv, err := NewServer(newTestBroker(), Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})) }()
	defer func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Error(err)
		}
	}()

	ctx := testCtx(t)
	conn, err := goamqp.Dial(ctx, "amqps://"+ln.Addr().String(), &goamqp.ConnOptions{
		SASLType:  goamqp.SASLTypeAnonymous(),
		TLSConfig: &tls.Config{InsecureSkipVerify: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	snd, err := openSession(t, conn).NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("over tls")), nil); err != nil {
		t.Fatal(err)
	}
}
