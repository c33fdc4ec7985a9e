package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef-test")

func sessionsOf(m map[string]int64) Sessions {
	return func(node string) (int64, bool) { s, ok := m[node]; return s, ok }
}

func TestProofRoundTrip(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	v := NewVerifier(testSecret, "b", clk, sessionsOf(map[string]int64{"a": 7}))
	nonce := [16]byte{1, 2, 3}
	user, pass := MakeProof(testSecret, "a", "b", 7, clk.Now(), nonce)
	p, err := v.Check(user, pass)
	if err != nil {
		t.Fatal(err)
	}
	if p.Node != "a" || p.Nonce != nonce {
		t.Fatalf("proof %+v", p)
	}
	if _, err := v.Check(user, pass); !errors.Is(err, ErrBadProof) || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("replayed proof: %v", err)
	}
}

func TestProofRefused(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	sessions := sessionsOf(map[string]int64{"a": 7})
	cases := []struct {
		name       string
		secret     []byte
		node, to   string
		session    int64
		at         time.Time
		wantReason string
	}{
		{"other secret", []byte("another secret of at least 32 bytes!!"), "a", "b", 7, now, "mac"},
		{"other owner", testSecret, "a", "c", 7, now, "mac"},
		{"old session", testSecret, "a", "b", 6, now, "mac"},
		{"no live session", testSecret, "z", "b", 7, now, "no live session"},
		{"too old", testSecret, "a", "b", 7, now.Add(-ProofWindow - time.Second), "off this node's clock"},
		{"from the future", testSecret, "a", "b", 7, now.Add(ProofWindow + time.Second), "off this node's clock"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := NewVerifier(testSecret, "b", clock.NewFake(now), sessions)
			user, pass := MakeProof(c.secret, c.node, c.to, c.session, c.at, [16]byte{byte(i)})
			_, err := v.Check(user, pass)
			if !errors.Is(err, ErrBadProof) || !strings.Contains(err.Error(), c.wantReason) {
				t.Fatalf("got %v, want a refusal for %q", err, c.wantReason)
			}
		})
	}
}

func TestProofMalformed(t *testing.T) {
	good := strings.Repeat("ab", 16)
	mac := strings.Repeat("cd", 32)
	for _, c := range []struct{ user, pass string }{
		{"", "1." + good + "." + mac},
		{strings.Repeat("n", MaxNodeID+1), "1." + good + "." + mac},
		{"a b", "1." + good + "." + mac},
		{"a|b", "1." + good + "." + mac},
		{"a", "password"},
		{"a", "1." + good},
		{"a", "-1." + good + "." + mac},
		{"a", "99999999999999999999." + good + "." + mac},
		{"a", "1." + strings.ToUpper(good) + "." + mac},
		{"a", "1." + good + "." + mac + "00"},
		{"a", "1." + good[2:] + "." + mac},
	} {
		if _, err := ParseProof(c.user, c.pass); !errors.Is(err, ErrBadProof) {
			t.Errorf("ParseProof(%q, %q) = %v, want ErrBadProof", c.user, c.pass, err)
		}
	}
	if _, err := ParseProof("a", "1."+good+"."+mac); err != nil {
		t.Fatal(err)
	}
}

// The set of remembered nonces is bounded: full of unexpired nonces it
// refuses, and forgets nonces once their proofs could no longer pass.
func TestProofNonceBound(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	v := NewVerifier(testSecret, "b", clk, sessionsOf(map[string]int64{"a": 7}))
	for i := range MaxNonces {
		user, pass := MakeProof(testSecret, "a", "b", 7, clk.Now(), [16]byte{byte(i), byte(i >> 8), 0xee})
		if _, err := v.Check(user, pass); err != nil {
			t.Fatal(i, err)
		}
	}
	user, pass := MakeProof(testSecret, "a", "b", 7, clk.Now(), [16]byte{0xff, 0xff, 0xff})
	if _, err := v.Check(user, pass); err == nil || !strings.Contains(err.Error(), "too many") {
		t.Fatalf("past the bound: %v", err)
	}
	clk.Advance(ProofWindow + time.Second)
	user, pass = MakeProof(testSecret, "a", "b", 7, clk.Now(), [16]byte{0xff, 0xff, 0xff})
	if _, err := v.Check(user, pass); err != nil {
		t.Fatalf("after the window: %v", err)
	}
	if n := len(v.seen); n != 1 {
		t.Fatalf("%d nonces remembered, want 1", n)
	}
}

// FuzzParseProof: ParseProof never panics, and what it accepts has the
// documented form (it re-encodes to the same password).
func FuzzParseProof(f *testing.F) {
	_, pass := MakeProof(testSecret, "node-a", "node-b", 3, time.Unix(1_800_000_000, 0), [16]byte{9})
	f.Add("node-a", pass)
	f.Add("a", "1.2.3")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, user, pass string) {
		p, err := ParseProof(user, pass)
		if err != nil {
			if !errors.Is(err, ErrBadProof) {
				t.Fatalf("error %v is not ErrBadProof", err)
			}
			return
		}
		if p.Node != user || p.Time < 0 {
			t.Fatalf("parsed %+v from %q", p, user)
		}
		if q, err := ParseProof(p.Node, formatPassword(p)); err != nil || q != p {
			t.Fatalf("re-encoded %+v parses as %+v, %v", p, q, err)
		}
	})
}
