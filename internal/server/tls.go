package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Dev certificate file names inside the data directory.
const (
	devCertFile = "dev-tls/cert.pem"
	devKeyFile  = "dev-tls/key.pem"
)

// tlsConfig returns the TLS configuration for the amqps and https
// listeners, or nil when neither is asked for. With DevTLS it creates (once)
// a self-signed certificate for localhost in the data directory and
// reports its path.
func tlsConfig(o Options) (cfg *tls.Config, devCertPath string, err error) {
	if o.AMQPSAddr == "" && o.HTTPSAddr == "" {
		return nil, "", nil
	}
	certFile, keyFile := o.TLSCert, o.TLSKey
	switch {
	case o.DevTLS:
		dir := o.DataDir
		if o.Memory || dir == "" {
			dir = filepath.Join(os.TempDir(), "busbar-dev-tls")
		}
		certFile, keyFile = filepath.Join(dir, devCertFile), filepath.Join(dir, devKeyFile)
		if err := ensureDevCert(certFile, keyFile); err != nil {
			return nil, "", fmt.Errorf("dev certificate: %w", err)
		}
		devCertPath = certFile
	case certFile == "" || keyFile == "":
		return nil, "", errors.New("--amqps and --https need --tls-cert and --tls-key, or --dev-tls")
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, "", fmt.Errorf("load TLS certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, devCertPath, nil
}

// ensureDevCert writes a self-signed ECDSA certificate for localhost,
// 127.0.0.1 and ::1, valid for a year, unless a readable one that is not
// about to expire exists already.
func ensureDevCert(certFile, keyFile string) error {
	if pair, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil {
		if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil && time.Until(leaf.NotAfter) > 7*24*time.Hour {
			return nil
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "localhost", Organization: []string{"Busbar development"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(certFile), 0o700); err != nil {
		return err
	}
	if err := writeAtomic(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeAtomic(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
