package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
)

// Signing keys of OpenID Connect issuers. For each configured issuer URL
// the discovery document
//
//	GET <issuer>/.well-known/openid-configuration → {"issuer": "…", "jwks_uri": "…"}
//	GET <jwks_uri> → {"keys": [{"kty":"RSA","kid":"…","n":"…","e":"…"},
//	                           {"kty":"EC","kid":"…","crv":"P-256","x":"…","y":"…"}]}
//
// is fetched on first use, with a time-out and a size cap, and the keys are
// kept. A token signed with a key id the cache does not hold triggers a
// new fetch, at most once per MinRefresh per issuer, so a flood of tokens
// with made-up key ids costs one fetch a minute, not one per token.

// Bounds on what an issuer (or whoever answers for it) can make the server
// read and keep.
const (
	maxOIDCDocBytes = 1 << 20 // a discovery document or JWKS
	maxJWKSKeys     = 100
	minRSABits      = 2048
	maxRSABits      = 8192
)

// issuer is one configured OpenID Connect issuer and its cached keys.
type issuer struct {
	url string // as configured, without trailing '/'

	mu        sync.Mutex
	docIssuer string                      // the discovery document's "issuer"
	keys      map[string]crypto.PublicKey // by kid
	fetched   time.Time                   // last fetch attempt; zero: never
	lastErr   error                       // of the last fetch
}

// oidcKeys is the key cache of all configured issuers.
type oidcKeys struct {
	issuers    []*issuer
	client     *http.Client
	clock      clock.Clock
	timeout    time.Duration
	minRefresh time.Duration
}

func newOIDCKeys(urls []string, client *http.Client, clk clock.Clock, timeout, minRefresh time.Duration) (*oidcKeys, error) {
	o := &oidcKeys{client: client, clock: clk, timeout: timeout, minRefresh: minRefresh}
	for _, u := range urls {
		u = strings.TrimRight(strings.TrimSpace(u), "/")
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
			return nil, fmt.Errorf("auth: OpenID Connect issuer %q is not an http(s) URL", u)
		}
		o.issuers = append(o.issuers, &issuer{url: u})
	}
	return o, nil
}

// match finds the configured issuer a token's iss claim names: the
// configured URL or the issuer its discovery document declares, trailing
// slashes ignored.
func (o *oidcKeys) match(ctx context.Context, iss string) (*issuer, error) {
	iss = strings.TrimRight(iss, "/")
	for _, is := range o.issuers {
		if iss == is.url {
			return is, nil
		}
	}
	for _, is := range o.issuers {
		is.mu.Lock()
		if is.docIssuer == "" && (is.fetched.IsZero() || o.clock.Now().Sub(is.fetched) >= o.minRefresh) {
			is.refreshLocked(ctx, o) // discover the issuer it declares
		}
		ok := is.docIssuer != "" && iss == strings.TrimRight(is.docIssuer, "/")
		is.mu.Unlock()
		if ok {
			return is, nil
		}
	}
	return nil, newError(ErrBadSignature, "InvalidIssuer: The token's issuer %q is not a configured OpenID Connect issuer.", short(iss, 100))
}

// key returns the key with id kid (any key usable for alg when kid is
// empty), fetching the issuer's keys when it does not know it and the last
// fetch is at least minRefresh old.
func (o *oidcKeys) key(ctx context.Context, is *issuer, kid, alg string) (crypto.PublicKey, error) {
	is.mu.Lock()
	defer is.mu.Unlock()
	if k := is.findLocked(kid, alg); k != nil {
		return k, nil
	}
	if is.fetched.IsZero() || o.clock.Now().Sub(is.fetched) >= o.minRefresh {
		is.refreshLocked(ctx, o)
		if k := is.findLocked(kid, alg); k != nil {
			return k, nil
		}
	}
	if is.lastErr != nil {
		return nil, newError(ErrKeysUnavailable, "InvalidSignature: The signing keys of issuer %q could not be fetched: %v", is.url, is.lastErr)
	}
	return nil, newError(ErrBadSignature, "InvalidSignature: The token was signed with key %q, which issuer %q does not publish.", short(kid, 64), is.url)
}

func (is *issuer) findLocked(kid, alg string) crypto.PublicKey {
	if kid != "" {
		return is.keys[kid]
	}
	for _, k := range is.keys { // no kid: the first key of the right type
		switch k.(type) {
		case *rsa.PublicKey:
			if alg == "RS256" {
				return k
			}
		case *ecdsa.PublicKey:
			if alg == "ES256" {
				return k
			}
		}
	}
	return nil
}

// refreshLocked fetches the discovery document and the JWKS. On failure
// the keys held so far are kept.
func (is *issuer) refreshLocked(ctx context.Context, o *oidcKeys) {
	is.fetched = o.clock.Now()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := o.getJSON(ctx, is.url+"/.well-known/openid-configuration", &doc); err != nil {
		is.lastErr = err
		return
	}
	if u, err := url.Parse(doc.JWKSURI); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		is.lastErr = fmt.Errorf("the discovery document's jwks_uri %q is not an http(s) URL", short(doc.JWKSURI, 200))
		return
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := o.getJSON(ctx, doc.JWKSURI, &set); err != nil {
		is.lastErr = err
		return
	}
	if len(set.Keys) > maxJWKSKeys {
		is.lastErr = fmt.Errorf("the JWKS holds %d keys; at most %d are accepted", len(set.Keys), maxJWKSKeys)
		return
	}
	keys := make(map[string]crypto.PublicKey, len(set.Keys))
	for _, raw := range set.Keys {
		kid, k, err := parseJWK(raw)
		if err != nil || k == nil {
			continue // a key we cannot use is skipped, as relying parties do
		}
		keys[kid] = k
	}
	is.docIssuer, is.keys, is.lastErr = doc.Issuer, keys, nil
}

// getJSON GETs u and decodes its JSON body, reading at most
// maxOIDCDocBytes.
func (o *oidcKeys) getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := o.client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxOIDCDocBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	if len(b) > maxOIDCDocBytes {
		return fmt.Errorf("GET %s: the document is larger than %d bytes", u, maxOIDCDocBytes)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: not the expected JSON: %v", u, err)
	}
	return nil
}

// jwk is a JSON Web Key (RFC 7517) of the two kinds accepted.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWK decodes one key: an RSA key of 2048–8192 bits, or a P-256 EC
// key on the curve. A key for encryption (use "enc") or of another type
// gives a nil key and no error.
func parseJWK(raw []byte) (string, crypto.PublicKey, error) {
	var k jwk
	if err := json.Unmarshal(raw, &k); err != nil {
		return "", nil, err
	}
	if k.Use != "" && k.Use != "sig" {
		return k.Kid, nil, nil
	}
	switch k.Kty {
	case "RSA":
		n, err1 := b64url(k.N)
		e, err2 := b64url(k.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
			return "", nil, errors.New("bad RSA key encoding")
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if bits := pub.N.BitLen(); bits < minRSABits || bits > maxRSABits || pub.E < 3 || pub.E%2 == 0 {
			return "", nil, errors.New("unacceptable RSA key")
		}
		return k.Kid, pub, nil
	case "EC":
		if k.Crv != "P-256" {
			return k.Kid, nil, nil
		}
		x, err1 := b64url(k.X)
		y, err2 := b64url(k.Y)
		if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
			return "", nil, errors.New("bad EC key encoding")
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return "", nil, err
		}
		return k.Kid, pub, nil
	}
	return k.Kid, nil, nil
}
