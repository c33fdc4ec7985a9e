package auth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"time"
)

// Entra ID (Azure AD) access tokens are JSON Web Tokens (RFC 7519) in the
// compact JWS form (RFC 7515):
//
//	base64url(header) "." base64url(claims) "." base64url(signature)
//
//	header: {"alg":"RS256"|"ES256", "kid":"<key id>", "typ":"JWT"}
//	claims: {"aud":"https://servicebus.azure.net" | [..], "iss":"…",
//	         "tid":"<tenant>", "exp":<unix>, "nbf":<unix>,
//	         "roles":["Azure Service Bus Data Sender", …], "oid"/"sub"/"appid"}
//
// The signature covers the first two parts as written (ASCII). RS256 is
// RSASSA-PKCS1-v1_5 with SHA-256; ES256 is ECDSA P-256 with SHA-256, the
// signature being r‖s, 32 bytes each.

// MaxTokenBytes bounds a token (SAS or JWT) the server looks at. Entra
// access tokens are 1–3 KB; SAS tokens a few hundred bytes.
const MaxTokenBytes = 16 << 10

// jwt is a parsed, unverified JSON Web Token.
type jwt struct {
	header jwtHeader
	claims jwtClaims
	signed []byte // header "." claims, as written: the signed text
	sig    []byte // decoded signature
}

type jwtHeader struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ"`
}

type jwtClaims struct {
	Aud   audiences `json:"aud"`
	Iss   string    `json:"iss"`
	Tid   string    `json:"tid"`
	Exp   *numDate  `json:"exp"`
	Nbf   *numDate  `json:"nbf"`
	Roles *[]string `json:"roles"` // nil: no roles claim at all
	Oid   string    `json:"oid"`
	Sub   string    `json:"sub"`
	AppID string    `json:"appid"`
	Azp   string    `json:"azp"`
}

// subject names the token's principal for messages and logs: the object
// id, else the application id, else the subject.
func (c *jwtClaims) subject() string {
	for _, s := range []string{c.Oid, c.AppID, c.Azp, c.Sub} {
		if s != "" {
			return short(s, 40)
		}
	}
	return "unknown principal"
}

// audiences is the aud claim: a string or an array of strings.
type audiences []string

func (a *audiences) UnmarshalJSON(b []byte) error {
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")) {
		var l []string
		if err := json.Unmarshal(b, &l); err != nil {
			return err
		}
		*a = l
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*a = audiences{s}
	return nil
}

// numDate is a NumericDate: seconds since 1970, possibly fractional.
type numDate struct{ t time.Time }

func (d *numDate) UnmarshalJSON(b []byte) error {
	var f json.Number
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	v, err := f.Float64()
	if err != nil || v < 0 || v > 1e11 {
		return errBadDate
	}
	sec := int64(v)
	d.t = time.Unix(sec, int64((v-float64(sec))*1e9)).UTC()
	return nil
}

var errBadDate = errors.New("not a number of seconds since 1970")

// looksLikeJWT reports whether s has the compact JWS shape (three
// dot-separated parts, the first a base64url JSON object).
func looksLikeJWT(s string) bool {
	return strings.Count(s, ".") == 2 && strings.HasPrefix(s, "eyJ")
}

// parseJWT splits and decodes a compact JWT without checking its
// signature or claims. Failures are ErrMalformed and never quote the
// token.
func parseJWT(s string) (*jwt, error) {
	s = strings.TrimSpace(s)
	if len(s) > MaxTokenBytes {
		return nil, newError(ErrMalformed, "MalformedToken: The JWT is %d bytes long; at most %d are accepted.", len(s), MaxTokenBytes)
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return nil, newError(ErrMalformed, "MalformedToken: The token is not a JWT: it has %d dot-separated parts, not 3.", len(parts))
	}
	var t jwt
	hb, err := b64url(parts[0])
	if err != nil {
		return nil, newError(ErrMalformed, "MalformedToken: The JWT header is not base64url.")
	}
	if err := strictJSON(hb, &t.header); err != nil {
		return nil, newError(ErrMalformed, "MalformedToken: The JWT header is not a JSON object of the expected shape.")
	}
	cb, err := b64url(parts[1])
	if err != nil {
		return nil, newError(ErrMalformed, "MalformedToken: The JWT claims are not base64url.")
	}
	if err := strictJSON(cb, &t.claims); err != nil {
		return nil, newError(ErrMalformed, "MalformedToken: The JWT claims are not a JSON object of the expected shape.")
	}
	if t.sig, err = b64url(parts[2]); err != nil {
		return nil, newError(ErrMalformed, "MalformedToken: The JWT signature is not base64url.")
	}
	t.signed = []byte(s[:len(parts[0])+1+len(parts[1])])
	return &t, nil
}

// strictJSON decodes a JSON object into v; anything else (an array, a
// string, trailing data) fails.
func strictJSON(b []byte, v any) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return errNotObject
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errNotObject
	}
	return nil
}

var errNotObject = newError(ErrMalformed, "MalformedToken: not a JSON object.")

// b64url decodes base64url with or without padding.
func b64url(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

// verify checks t's signature with key (an *rsa.PublicKey or
// *ecdsa.PublicKey) under t's alg.
func (t *jwt) verify(key crypto.PublicKey) bool {
	sum := sha256.Sum256(t.signed)
	switch t.header.Alg {
	case "RS256":
		k, ok := key.(*rsa.PublicKey)
		return ok && rsa.VerifyPKCS1v15(k, crypto.SHA256, sum[:], t.sig) == nil
	case "ES256":
		k, ok := key.(*ecdsa.PublicKey)
		if !ok || len(t.sig) != 64 {
			return false
		}
		r, s := new(big.Int).SetBytes(t.sig[:32]), new(big.Int).SetBytes(t.sig[32:])
		return ecdsa.Verify(k, sum[:], r, s)
	}
	return false
}

// The Service Bus data-plane roles of Azure RBAC, with their role
// definition ids (the same in every tenant).
const (
	RoleDataOwner    = "Azure Service Bus Data Owner"
	RoleDataSender   = "Azure Service Bus Data Sender"
	RoleDataReceiver = "Azure Service Bus Data Receiver"

	RoleIDDataOwner    = "090c5cfd-751d-490a-894a-3ce6f1109419"
	RoleIDDataSender   = "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39"
	RoleIDDataReceiver = "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0"
)

// RoleRights returns the rights a Service Bus data role grants, the role
// named by its name ("Azure Service Bus Data Owner"), by its name without
// the "Azure Service Bus " prefix ("Data Owner"), by a short name ("owner",
// "sender", "receiver") or by its role definition id, all
// case-insensitively. ok is false for anything else.
func RoleRights(role string) (r Rights, ok bool) {
	s := strings.ToLower(strings.TrimSpace(role))
	s = strings.TrimPrefix(s, "azure service bus ")
	s = strings.TrimPrefix(s, "data ")
	switch s {
	case "owner", RoleIDDataOwner:
		return Manage | Send | Listen, true
	case "sender", RoleIDDataSender:
		return Send, true
	case "receiver", RoleIDDataReceiver:
		return Listen, true
	}
	return 0, false
}

// maxRoles bounds how many entries of a roles claim are looked at.
const maxRoles = 64

// rolesRights maps a roles claim to rights; unknown roles are ignored.
func rolesRights(roles []string) Rights {
	var r Rights
	for _, role := range roles[:min(len(roles), maxRoles)] {
		if rr, ok := RoleRights(role); ok {
			r |= rr
		}
	}
	return r
}

// short returns s, or its first n bytes and "…" if longer: enough to
// recognise a value in a message without repeating it.
func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
