package relay

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/busbarmq/busbar/internal/clock"
)

const (
	// ProofWindow is how far a proof's time may be from the verifier's
	// clock, either way; a nonce is remembered this long.
	ProofWindow = 30 * time.Second
	// MaxNonces bounds the nonces a Verifier remembers.
	MaxNonces = 4096
	// MaxNodeID is the longest node id, in bytes.
	MaxNodeID = 128

	nonceLen = 16
	macLen   = sha256.Size
	// maxPassword is the longest well-formed proof: 20 digits of time,
	// two dots, the nonce and the mac in hex.
	maxPassword = 20 + 2 + 2*nonceLen + 2*macLen
)

// Proof is a parsed node proof (see the package doc).
type Proof struct {
	Node  string
	Time  int64 // unix milliseconds
	Nonce [nonceLen]byte
	MAC   [macLen]byte
}

// ErrBadProof is the error of a proof that is malformed or does not
// verify; the reason is wrapped.
var ErrBadProof = errors.New("relay: node proof refused")

func badProof(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadProof, fmt.Sprintf(format, args...))
}

// MakeProof returns the PLAIN user and password with which node (whose
// live session is session) proves itself to owner at now, with nonce.
func MakeProof(secret []byte, node, owner string, session int64, now time.Time, nonce [nonceLen]byte) (user, pass string) {
	ms := now.UnixMilli()
	nh := hex.EncodeToString(nonce[:])
	mac := nodeMAC(secret, node, owner, session, ms, nh)
	p := Proof{Node: node, Time: ms, Nonce: nonce}
	copy(p.MAC[:], mac)
	return node, formatPassword(p)
}

// formatPassword is the password form of p.
func formatPassword(p Proof) string {
	return strconv.FormatInt(p.Time, 10) + "." + hex.EncodeToString(p.Nonce[:]) + "." + hex.EncodeToString(p.MAC[:])
}

func nodeMAC(secret []byte, node, owner string, session, ms int64, nonceHex string) []byte {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "busbar-node|%s|%s|%d|%d|%s", node, owner, session, ms, nonceHex)
	return m.Sum(nil)
}

// OwnerProof is the owner's answer to a proof with nonce: the first
// message of the $cluster link.
func OwnerProof(secret []byte, owner string, nonce [nonceLen]byte) []byte {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "busbar-owner|%s|%s", owner, hex.EncodeToString(nonce[:]))
	return m.Sum(nil)
}

// ParseProof parses a PLAIN user and password as a node proof, checking
// its form only.
func ParseProof(user, pass string) (Proof, error) {
	var p Proof
	if user == "" || len(user) > MaxNodeID {
		return p, badProof("node id of %d bytes (1 to %d)", len(user), MaxNodeID)
	}
	for i := 0; i < len(user); i++ {
		if c := user[i]; c <= ' ' || c == '|' || c >= 0x7f {
			return p, badProof("node id has a byte 0x%02x", c)
		}
	}
	if len(pass) > maxPassword {
		return p, badProof("proof of %d bytes", len(pass))
	}
	ts, rest, ok := strings.Cut(pass, ".")
	if !ok {
		return p, badProof("no time")
	}
	nh, mh, ok := strings.Cut(rest, ".")
	if !ok {
		return p, badProof("no nonce")
	}
	if ts == "" || len(ts) > 19 || strings.TrimLeft(ts, "0123456789") != "" {
		return p, badProof("time %q is not decimal milliseconds", ts)
	}
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return p, badProof("time %q: %v", ts, err)
	}
	if len(nh) != 2*nonceLen || !lowerHex(nh) {
		return p, badProof("nonce is not %d lower-case hex digits", 2*nonceLen)
	}
	if len(mh) != 2*macLen || !lowerHex(mh) {
		return p, badProof("mac is not %d lower-case hex digits", 2*macLen)
	}
	hex.Decode(p.Nonce[:], []byte(nh))
	hex.Decode(p.MAC[:], []byte(mh))
	p.Node, p.Time = user, ms
	return p, nil
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Sessions answers the live session of a node: ok false when the node
// has no live session.
type Sessions func(node string) (session int64, ok bool)

// Verifier checks node proofs made for one owner. Safe for concurrent
// use.
type Verifier struct {
	secret   []byte
	self     string
	clock    clock.Clock
	sessions Sessions

	mu   sync.Mutex
	seen map[[nonceLen]byte]time.Time // nonce → when it may be forgotten
}

// NewVerifier returns a Verifier for proofs addressed to node self.
func NewVerifier(secret []byte, self string, clk clock.Clock, sessions Sessions) *Verifier {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Verifier{secret: secret, self: self, clock: clk, sessions: sessions, seen: make(map[[nonceLen]byte]time.Time)}
}

// Check verifies a PLAIN login as a node proof and returns the proof.
func (v *Verifier) Check(user, pass string) (Proof, error) {
	p, err := ParseProof(user, pass)
	if err != nil {
		return p, err
	}
	now := v.clock.Now()
	if d := now.Sub(time.UnixMilli(p.Time)); d > ProofWindow || d < -ProofWindow {
		return p, badProof("time is %v off this node's clock (at most %v)", d.Round(time.Millisecond), ProofWindow)
	}
	session, ok := v.sessions(p.Node)
	if !ok {
		return p, badProof("node %q has no live session", p.Node)
	}
	want := nodeMAC(v.secret, p.Node, v.self, session, p.Time, hex.EncodeToString(p.Nonce[:]))
	if !hmac.Equal(want, p.MAC[:]) {
		return p, badProof("mac does not match (another secret, owner or session)")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, dup := v.seen[p.Nonce]; dup {
		return p, badProof("nonce already used")
	}
	if len(v.seen) >= MaxNonces {
		for n, until := range v.seen {
			if !now.Before(until) {
				delete(v.seen, n)
			}
		}
		if len(v.seen) >= MaxNonces {
			return p, badProof("too many proofs within %v", ProofWindow)
		}
	}
	// Remembered until its time can no longer pass the window check.
	v.seen[p.Nonce] = time.UnixMilli(p.Time).Add(ProofWindow + time.Millisecond)
	return p, nil
}
