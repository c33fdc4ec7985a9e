// Package authtest makes Entra ID style tokens for tests: an OpenID
// Connect issuer on loopback (an httptest server answering
// /.well-known/openid-configuration and its JWKS) holding an RSA and a
// P-256 key made at start, and the signing of JWTs with those keys or
// with none (development mode does not check signatures).
//
// Nothing here is used outside tests.
package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// Issuer is an OpenID Connect issuer on loopback.
type Issuer struct {
	// URL is the issuer URL (the server's root); tokens carry it as iss.
	URL string
	RSA *rsa.PrivateKey
	EC  *ecdsa.PrivateKey
	// Fetches counts JWKS requests.
	Fetches atomic.Int64

	srv *httptest.Server

	mu    sync.Mutex
	kids  map[string]crypto.PrivateKey // published keys by kid
	extra []byte                       // when set, served as the JWKS instead
}

// Key ids of the two keys NewIssuer publishes.
const (
	KidRSA = "rsa-1"
	KidEC  = "ec-1"
)

// NewIssuer starts an issuer publishing a fresh RSA-2048 key (KidRSA) and
// a P-256 key (KidEC). It stops with the test.
func NewIssuer(t testing.TB) *Issuer {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is := &Issuer{RSA: rk, EC: ek, kids: map[string]crypto.PrivateKey{KidRSA: rk, KidEC: ek}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": is.URL, "jwks_uri": is.URL + "/keys"})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, r *http.Request) {
		is.Fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(is.jwks())
	})
	is.srv = httptest.NewServer(mux)
	is.URL = is.srv.URL
	t.Cleanup(is.srv.Close)
	return is
}

// AddKey publishes another key under kid (a key rotation).
func (is *Issuer) AddKey(kid string, k crypto.PrivateKey) {
	is.mu.Lock()
	is.kids[kid] = k
	is.mu.Unlock()
}

// ServeJWKS makes the issuer answer JWKS requests with body as it is.
func (is *Issuer) ServeJWKS(body []byte) {
	is.mu.Lock()
	is.extra = body
	is.mu.Unlock()
}

func (is *Issuer) jwks() []byte {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.extra != nil {
		return is.extra
	}
	var keys []map[string]string
	for kid, k := range is.kids {
		switch k := k.(type) {
		case *rsa.PrivateKey:
			keys = append(keys, map[string]string{"kty": "RSA", "use": "sig", "kid": kid,
				"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())})
		case *ecdsa.PrivateKey:
			pub, _ := k.PublicKey.Bytes() // 0x04 ‖ x ‖ y
			keys = append(keys, map[string]string{"kty": "EC", "use": "sig", "kid": kid, "crv": "P-256",
				"x": b64(pub[1:33]), "y": b64(pub[33:])})
		}
	}
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// Sign makes a compact JWT of claims signed with key under kid: an
// *rsa.PrivateKey signs RS256, an *ecdsa.PrivateKey ES256, nil makes an
// unsigned token (alg "none", empty signature) for development mode.
func Sign(claims map[string]any, kid string, key crypto.PrivateKey) string {
	alg := "none"
	switch key.(type) {
	case *rsa.PrivateKey:
		alg = "RS256"
	case *ecdsa.PrivateKey:
		alg = "ES256"
	}
	h := map[string]string{"alg": alg, "typ": "JWT"}
	if kid != "" {
		h["kid"] = kid
	}
	hb, _ := json.Marshal(h)
	cb, _ := json.Marshal(claims)
	signed := b64(hb) + "." + b64(cb)
	sum := sha256.Sum256([]byte(signed))
	var sig []byte
	switch k := key.(type) {
	case *rsa.PrivateKey:
		sig, _ = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:])
	case *ecdsa.PrivateKey:
		r, s, _ := ecdsa.Sign(rand.Reader, k, sum[:])
		sig = make([]byte, 64)
		r.FillBytes(sig[:32])
		s.FillBytes(sig[32:])
	}
	return signed + "." + b64(sig)
}

// Sign signs claims with the issuer's RSA key, iss set to the issuer
// unless claims has one.
func (is *Issuer) Sign(claims map[string]any) string {
	if _, ok := claims["iss"]; !ok {
		c := make(map[string]any, len(claims)+1)
		for k, v := range claims {
			c[k] = v
		}
		c["iss"] = is.URL
		claims = c
	}
	return Sign(claims, KidRSA, is.RSA)
}
