package broker

import (
	"bytes"
	"testing"
)

// FuzzDecodeMeta: Meta decoding never panics, and whatever decodes
// re-encodes to bytes that decode the same, session id (also the empty
// one, opt bit 2) and hop count included.
func FuzzDecodeMeta(f *testing.F) {
	for _, o := range []metaOpt{{}, {sessionID: "a", session: true}, {session: true}} {
		r := rec{dc: 2, enq: 1700000000000000000, ttl: 5e9, state: StateDeferred, hops: 3}
		f.Add(appendMetaOpt(nil, SubQueueMain, &r, o))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r rec
		var o metaOpt
		sub, err := decodeMetaOpt(b, &r, &o)
		if err != nil {
			return
		}
		if o.sessionID != "" && !o.session {
			t.Fatalf("session id %q without the session flag", o.sessionID)
		}
		again := appendMetaOpt(nil, sub, &r, o)
		var r2 rec
		var o2 metaOpt
		sub2, err := decodeMetaOpt(again, &r2, &o2)
		if err != nil || sub2 != sub || r2 != r || o2 != o {
			t.Fatalf("re-encoded %x (from %x) decodes as %v %+v %+v, %v", again, b, sub2, r2, o2, err)
		}
		if again2 := appendMetaOpt(nil, sub2, &r2, o2); !bytes.Equal(again2, again) {
			t.Fatalf("unstable encoding %x, %x", again, again2)
		}
	})
}
