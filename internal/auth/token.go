package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// tokenPrefix starts every SAS token and SAS Authorization header.
const tokenPrefix = "SharedAccessSignature"

// Token is a parsed SAS token.
type Token struct {
	// Resource is the decoded sr, e.g. "amqp://localhost:5672/myqueue".
	Resource string
	// KeyName is the decoded skn.
	KeyName string
	// ExpiresAt is se as a time; zero if se was absent or unparsable
	// (which only lenient parsing allows).
	ExpiresAt time.Time

	rawResource string // sr exactly as written: the signed text
	rawExpiry   string // se exactly as written
	sig         []byte // decoded signature; nil if absent or unparsable
}

// ParseToken parses "SharedAccessSignature sr=…&sig=…&se=…&skn=…" (fields
// in any order; the prefix is optional) without checking the signature.
// All four fields are required; failures wrap ErrMalformed.
func ParseToken(s string) (Token, error) { return parseToken(s, false) }

// parseToken parses a token. With lenient set only sr is required: a
// missing or bad sig, se or skn leaves the field empty instead of failing.
// Long on purpose: its branches are one check per field, each strict or
// lenient.
func parseToken(s string, lenient bool) (Token, error) {
	var t Token
	body := strings.TrimSpace(s)
	if len(body) >= len(tokenPrefix) && strings.EqualFold(body[:len(tokenPrefix)], tokenPrefix) {
		body = strings.TrimSpace(body[len(tokenPrefix):])
	}
	if body == "" {
		return t, newError(ErrMalformed, "MalformedToken: The token is empty.")
	}
	var sig, sr, se, skn string
	var haveSig, haveSR, haveSE, haveSKN bool
	for _, field := range strings.Split(body, "&") {
		if field == "" {
			continue
		}
		k, v, ok := strings.Cut(field, "=")
		if !ok {
			return t, newError(ErrMalformed, "MalformedToken: The token field %q has no value.", short(field, 8))
		}
		var dup bool
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "sr":
			dup, haveSR, sr = haveSR, true, v
		case "sig":
			dup, haveSig, sig = haveSig, true, v
		case "se":
			dup, haveSE, se = haveSE, true, v
		case "skn":
			dup, haveSKN, skn = haveSKN, true, v
		default:
			// Unknown fields are ignored, as Service Bus does.
		}
		if dup {
			return t, newError(ErrMalformed, "MalformedToken: The token field %q appears twice.", short(k, 8))
		}
	}

	if !haveSR || sr == "" {
		return t, newError(ErrMalformed, "MalformedToken: The token has no resource (sr).")
	}
	res, err := url.QueryUnescape(sr)
	if err != nil {
		return t, newError(ErrMalformed, "MalformedToken: The token's resource (sr) is not URL-encoded correctly.")
	}
	t.Resource, t.rawResource = res, sr

	if haveSKN && skn != "" {
		if name, err := url.QueryUnescape(skn); err == nil {
			t.KeyName = name
		} else if !lenient {
			return t, newError(ErrMalformed, "MalformedToken: The token's key name (skn) is not URL-encoded correctly.")
		}
	} else if !lenient {
		return t, newError(ErrMalformed, "MalformedToken: The token has no key name (skn).")
	}

	if haveSE && se != "" {
		if n, err := strconv.ParseInt(strings.TrimSpace(se), 10, 64); err == nil && n >= 0 {
			t.ExpiresAt, t.rawExpiry = time.Unix(n, 0).UTC(), se
		} else if !lenient {
			return t, newError(ErrMalformed, "MalformedToken: The token's expiry (se) %q is not a number of seconds since 1970.", short(se, 12))
		}
	} else if !lenient {
		return t, newError(ErrMalformed, "MalformedToken: The token has no expiry (se).")
	}

	if haveSig && sig != "" {
		if b, ok := decodeSignature(sig); ok {
			t.sig = b
		} else if !lenient {
			return t, newError(ErrMalformed, "MalformedToken: The token's signature (sig) is not URL-encoded base64.")
		}
	} else if !lenient {
		return t, newError(ErrMalformed, "MalformedToken: The token has no signature (sig).")
	}
	return t, nil
}

// decodeSignature URL-decodes sig (keeping '+', which base64 uses and no
// encoder turns spaces into here) and base64-decodes it, with or without
// padding.
func decodeSignature(sig string) ([]byte, bool) {
	s, err := url.PathUnescape(sig)
	if err != nil {
		return nil, false
	}
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) > 0 {
		return b, true
	}
	if b, err := base64.RawStdEncoding.DecodeString(s); err == nil && len(b) > 0 {
		return b, true
	}
	return nil, false
}

// signedWith reports, in constant time, whether t's signature was made
// with key over its raw sr and se.
func (t Token) signedWith(key string) bool {
	if t.sig == nil {
		return false
	}
	return hmac.Equal(t.sig, mac(key, t.rawResource, t.rawExpiry))
}

// mac is HMAC-SHA256 keyed with the key string's UTF-8 bytes over
// rawResource + "\n" + rawExpiry.
func mac(key, rawResource, rawExpiry string) []byte {
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(rawResource))
	h.Write([]byte{'\n'})
	h.Write([]byte(rawExpiry))
	return h.Sum(nil)
}

// NewToken returns a SAS token for audience signed with keyName/key that
// expires at expiry (truncated to whole seconds), encoded as the Go SDK
// does: sr = lower(url.QueryEscape(audience)), sig URL-encoded, skn as is.
func NewToken(keyName, key, audience string, expiry time.Time) string {
	sr := strings.ToLower(url.QueryEscape(audience))
	se := strconv.FormatInt(expiry.Unix(), 10)
	sig := url.QueryEscape(base64.StdEncoding.EncodeToString(mac(key, sr, se)))
	return tokenPrefix + " sr=" + sr + "&sig=" + sig + "&se=" + se + "&skn=" + keyName
}

// audienceSchemes are the URI schemes NormalizeAudience strips.
var audienceSchemes = []string{"sb", "amqp", "amqps", "http", "https", "ws", "wss"}

// NormalizeAudience reduces an audience or resource to an entity path:
// it strips a scheme (sb, amqp, amqps, http, https, ws, wss) with its
// host[:port], or a bare leading "host:port" segment, a query or fragment,
// and leading and trailing slashes, and URL-decodes what remains.
// Case is kept; compare the results case-insensitively.
//
//	amqp://localhost:5672/myqueue   → myqueue
//	sb://localhost/myqueue/         → myqueue
//	https://h:443/q1?api-version=x  → q1
//	myqueue/$management             → myqueue/$management
//	sb://localhost, localhost:5300  → "" (the whole namespace)
func NormalizeAudience(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	if scheme, rest, ok := strings.Cut(s, "://"); ok && isAudienceScheme(scheme) {
		if _, path, ok := strings.Cut(rest, "/"); ok {
			s = path
		} else {
			s = ""
		}
	} else {
		first, rest, _ := strings.Cut(strings.TrimLeft(s, "/"), "/")
		if strings.Contains(first, ":") {
			// "host:port" as JS signs supplementary tokens; entity names
			// cannot contain ':'.
			s = rest
		}
	}
	s = strings.Trim(s, "/")
	if strings.Contains(s, "%") {
		if u, err := url.PathUnescape(s); err == nil {
			s = u
		}
	}
	return s
}

func isAudienceScheme(s string) bool {
	for _, c := range audienceSchemes {
		if strings.EqualFold(s, c) {
			return true
		}
	}
	return false
}

// pathCovers reports whether entity path res equals path or is an
// ancestor of it (case-insensitively, at a '/' boundary). The empty
// resource is the namespace and covers everything.
func pathCovers(res, path string) bool {
	if res == "" {
		return true
	}
	if len(path) < len(res) || !strings.EqualFold(path[:len(res)], res) {
		return false
	}
	return len(path) == len(res) || path[len(res)] == '/'
}

// splitResource splits a token's resource (or a JWT audience) into the
// host it names, if any, and its entity path. A scheme://host prefix names
// a host; without a scheme so does a first segment that carries a port,
// equals connected (the host the client connected to), is "localhost" or
// ends in a Service Bus domain — "myns.servicebus.windows.net" is how the
// Go SDK signs a namespace-wide token. Otherwise the whole text is an
// entity path, as before.
func splitResource(s, connected string) (host, path string) {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	if scheme, rest, ok := strings.Cut(s, "://"); ok && isAudienceScheme(scheme) {
		h, p, _ := strings.Cut(rest, "/")
		return h, NormalizeAudience(p)
	}
	first, rest, _ := strings.Cut(strings.TrimLeft(s, "/"), "/")
	if strings.Contains(first, ":") || (connected != "" && sameHost(first, connected)) ||
		strings.EqualFold(first, "localhost") || hasServiceBusSuffix(first) {
		return first, NormalizeAudience(rest)
	}
	return "", NormalizeAudience(s)
}

// serviceBusDomains are the DNS suffixes of Service Bus namespaces in
// Azure's clouds.
var serviceBusDomains = []string{".servicebus.windows.net", ".servicebus.chinacloudapi.cn", ".servicebus.usgovcloudapi.net", ".servicebus.cloudapi.de"}

func hasServiceBusSuffix(h string) bool {
	h = strings.ToLower(hostPart(h))
	for _, d := range serviceBusDomains {
		if strings.HasSuffix(h, d) {
			return true
		}
	}
	return false
}

// hostPart strips a port (and IPv6 brackets) from host[:port].
func hostPart(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return strings.Trim(h, "[]")
}

// sameHost reports whether two host[:port] values name the same host,
// ports ignored, case-insensitively; every loopback name (localhost,
// 127.0.0.0/8, ::1) is the same host.
func sameHost(a, b string) bool {
	a, b = hostPart(a), hostPart(b)
	if strings.EqualFold(a, b) {
		return true
	}
	return isLoopback(a) && isLoopback(b)
}

func isLoopback(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
