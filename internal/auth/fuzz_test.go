package auth

import (
	"context"
	"testing"
)

// FuzzParseJWT: any text either parses as a JWT or fails with an *Error,
// and a full Entra ID check of it (development mode) never panics.
func FuzzParseJWT(f *testing.F) {
	f.Add("eyJhbGciOiJub25lIn0.eyJhdWQiOiJodHRwczovL3NlcnZpY2VidXMuYXp1cmUubmV0IiwiZXhwIjoxNzAwMDAwMDAwfQ.")
	f.Add("eyJhbGciOiJSUzI1NiIsImtpZCI6ImsifQ.eyJhdWQiOlsiYSIsImIiXSwiZXhwIjoxLjUsInJvbGVzIjpudWxsfQ.c2ln")
	f.Add("a.b.c")
	a, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if _, err := parseJWT(s); err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T is not an *Error", err)
			}
		}
		_, _ = a.Authenticate(context.Background(), Presented{Token: s, Type: TypeJWT, Audience: "q", Host: "localhost"})
	})
}

// FuzzParseJWK: a key either parses into a usable key, is skipped, or
// fails; never a panic.
func FuzzParseJWK(f *testing.F) {
	f.Add([]byte(`{"kty":"RSA","kid":"k","n":"AQAB","e":"AQAB"}`))
	f.Add([]byte(`{"kty":"EC","crv":"P-256","x":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","y":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`))
	f.Add([]byte(`{"kty":"oct","use":"enc"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = parseJWK(b)
	})
}

// FuzzSAS: any token text, audience and host either authenticate or fail
// with an *Error; nothing panics.
func FuzzSAS(f *testing.F) {
	f.Add("SharedAccessSignature sr=localhost&sig=abc%3D&se=99999999999&skn=RootManageSharedAccessKey", "amqp://localhost/q", "localhost:5672")
	f.Add("sr=sb%3a%2f%2fmyns.servicebus.windows.net%2fq&sig=&se=1&skn=k", "q/$management", "myns.servicebus.windows.net")
	f.Add("SharedAccessSignature sr=%zz", "", "")
	a, err := New(Config{EntityRules: func(string) []Policy { return []Policy{{Name: "r", PrimaryKey: "k", Rights: Send}} }})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, tok, audience, host string) {
		if _, err := a.Authenticate(context.Background(), Presented{Token: tok, Audience: audience, Host: host}); err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T is not an *Error", err)
			}
		}
	})
}
