package broker

import (
	"bytes"
	"testing"
)

// FuzzTransferHeader: the transfer header decoder (transfer.go) never
// panics, and whatever it accepts encodes back to the same bytes.
func FuzzTransferHeader(f *testing.F) {
	for _, h := range []transferHeader{
		{},
		{hops: 1, srcEntity: 7, srcSeq: 42, enq: 1_700_000_000_000_000_000, ttl: 60e9, dc: 2, source: "orders", target: "billing"},
		{hops: 3, sub: SubQueueDeadLetter, srcEntity: 9, srcSeq: 1, enq: -5, source: "t/Subscriptions/s", target: "q",
			reason: ReasonForwardEntityDisabled, desc: "The message could not be forwarded."},
	} {
		f.Add(h.append(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeTransferHeader(b)
		if err != nil {
			return
		}
		if got := h.append(nil); !bytes.Equal(got, b) {
			// Varints have one shortest form; a longer one decodes too.
			h2, err := decodeTransferHeader(got)
			if err != nil || h2 != h {
				t.Fatalf("re-encoding %x gives %x (%+v, %v)", b, got, h2, err)
			}
		}
	})
}

// TestTransferHeaderRoundTrip: every field survives, and truncations and
// trailing bytes are refused.
func TestTransferHeaderRoundTrip(t *testing.T) {
	h := transferHeader{hops: 2, sub: SubQueueDeadLetter, srcEntity: 1 << 40, srcSeq: 1 << 50, enq: -1, ttl: 1 << 62, dc: 1<<32 - 1,
		source: "a/Subscriptions/b", target: "c", reason: "r", desc: "d"}
	b := h.append(nil)
	got, err := decodeTransferHeader(b)
	if err != nil || got != h {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for i := range b {
		if _, err := decodeTransferHeader(b[:i]); err == nil {
			t.Fatalf("a header cut at %d of %d bytes decoded", i, len(b))
		}
	}
	if _, err := decodeTransferHeader(append(b, 0)); err == nil {
		t.Fatal("a trailing byte was accepted")
	}
}
