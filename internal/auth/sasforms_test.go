package auth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
)

func sasCheck(a *auth.Authenticator, tok, audience, host string) (auth.Grant, error) {
	return a.Authenticate(context.Background(), auth.Presented{Token: tok, Type: auth.TypeSAS, Audience: audience, Host: host})
}

// TestSASAudienceForms: every resource form a client signs grants what
// Azure grants; a resource naming another host than the one connected to
// is refused.
func TestSASAudienceForms(t *testing.T) {
	a, _ := newA(t, auth.Config{})
	exp := t0.Add(time.Hour)
	sign := func(sr string) string { return auth.NewToken(auth.DefaultKeyName, auth.DefaultKey, sr, exp) }
	for _, tc := range []struct {
		sr, host string
		res      string
	}{
		{"localhost", "localhost", ""},      // the Go SDK's SAS connection string, no port
		{"localhost:5672", "localhost", ""}, // … with one
		{"myns.servicebus.windows.net", "myns.servicebus.windows.net", ""},
		{"MyNs.ServiceBus.Windows.Net", "myns.servicebus.windows.net:5671", ""},
		{"sb://myns.servicebus.windows.net/", "myns.servicebus.windows.net", ""},
		{"https://myns.servicebus.windows.net/q1", "myns.servicebus.windows.net", "q1"},
		{"amqp://127.0.0.1:5672/q1", "localhost", "q1"}, // loopback names are one host
		{"devbox/q1", "devbox:5672", "q1"},              // the connected host, bare
		{"q1", "localhost", "q1"},                       // a bare entity path
		{"sb://localhost/q1", "", "q1"},                 // host unknown: not checked
	} {
		g, err := sasCheck(a, sign(tc.sr), "q1/$management", tc.host)
		if err != nil || g.Resource != tc.res {
			t.Errorf("sr %q on %q: %+v, %v; want resource %q", tc.sr, tc.host, g, err, tc.res)
		}
	}
	for _, tc := range []struct{ sr, host string }{
		{"otherns.servicebus.windows.net", "localhost"},
		{"sb://otherns.servicebus.windows.net/q1", "myns.servicebus.windows.net"},
		{"amqp://otherhost:5672/q1", "localhost"},
		{"myns.servicebus.windows.net", "localhost:5672"},
	} {
		if _, err := sasCheck(a, sign(tc.sr), "q1", tc.host); !errors.Is(err, auth.ErrWrongAudience) {
			t.Errorf("sr %q on %q: %v, want wrong audience", tc.sr, tc.host, err)
		}
	}
}

// TestEntityRules: a rule defined on an entity signs tokens for that
// entity and what lies beneath it, with the rule's rights, and nothing
// else.
func TestEntityRules(t *testing.T) {
	rules := map[string][]auth.Policy{
		"q1": {{Name: "q1-send", PrimaryKey: "k-send", Rights: auth.Send}, {Name: "q1-all", PrimaryKey: "k-all", SecondaryKey: "k-all-2", Rights: auth.Manage}},
		"t1": {{Name: "t1-listen", PrimaryKey: "k-listen", Rights: auth.Listen}},
	}
	a, _ := newA(t, auth.Config{
		Policies:    []auth.Policy{{Name: "root", PrimaryKey: "root-key", Rights: auth.Manage}},
		EntityRules: func(e string) []auth.Policy { return rules[e] },
	})
	exp := t0.Add(time.Hour)
	ok := []struct {
		name, key, sr, audience string
		rights                  auth.Rights
	}{
		{"q1-send", "k-send", "sb://localhost/q1", "amqp://localhost/q1", auth.Send},
		{"q1-all", "k-all-2", "sb://localhost/Q1", "q1/$management", auth.Manage},
		{"q1-all", "k-all", "sb://localhost/q1/$DeadLetterQueue", "q1/$deadletterqueue", auth.Manage},
		{"t1-listen", "k-listen", "sb://localhost/t1/Subscriptions/s1", "t1/Subscriptions/s1", auth.Listen},
		{"root", "root-key", "sb://localhost", "q1", auth.Manage},
	}
	for _, tc := range ok {
		g, err := sasCheck(a, auth.NewToken(tc.name, tc.key, tc.sr, exp), tc.audience, "localhost")
		if err != nil || g.Rights != tc.rights {
			t.Errorf("%s on %s: %+v %v", tc.name, tc.audience, g, err)
		}
	}
	refused := []struct {
		name, key, sr, audience string
		kind                    error
	}{
		{"q1-send", "k-send", "sb://localhost/q2", "q2", auth.ErrUnknownKey},     // another queue's name
		{"q1-send", "k-send", "sb://localhost", "q1", auth.ErrUnknownKey},        // the namespace
		{"q1-send", "k-send", "sb://localhost/q1", "q2", auth.ErrWrongAudience},  // token for q1, used on q2
		{"q1-send", "wrong", "sb://localhost/q1", "q1", auth.ErrBadSignature},    // wrong key
		{"t1-listen", "k-listen", "sb://localhost/q1", "q1", auth.ErrUnknownKey}, // rule of t1 on q1
	}
	for _, tc := range refused {
		if _, err := sasCheck(a, auth.NewToken(tc.name, tc.key, tc.sr, exp), tc.audience, "localhost"); !errors.Is(err, tc.kind) {
			t.Errorf("%s for %s on %s: %v, want %v", tc.name, tc.sr, tc.audience, err, tc.kind)
		}
	}
}
