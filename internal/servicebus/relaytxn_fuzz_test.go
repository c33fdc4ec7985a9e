package servicebus

import (
	"bytes"
	"testing"

	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// FuzzRelayedTxnState feeds the transactional states a gateway puts in a
// relayed modified outcome (relaytxn.go) to decodeRelayedTxnState: it
// never panics, and what it accepts is a transactional-state with a
// txn-id (the outcome may be missing: txnSettle refuses it) that encodes
// back to the same state. The corpus
// (testdata/fuzz/FuzzRelayedTxnState) holds each outcome, replayed by
// every test run.
func FuzzRelayedTxnState(f *testing.F) {
	for _, s := range []*frames.TransactionalState{
		{TxnID: []byte{1, 2, 3, 4}, Outcome: &frames.Accepted{}},
		{TxnID: []byte{1}, Outcome: &frames.Modified{DeliveryFailed: true, MessageAnnotations: map[frames.Symbol]any{"k": "v"}}},
		{TxnID: []byte("0123456789abcdef"), Outcome: &frames.Rejected{Error: &frames.Error{Condition: condDeadLetter,
			Info: map[frames.Symbol]any{"DeadLetterReason": "r"}}}},
		{TxnID: []byte{9}},
	} {
		b, err := s.AppendAMQP(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ts := decodeRelayedTxnState(raw)
		if ts == nil {
			return
		}
		if len(ts.TxnID) == 0 {
			t.Fatalf("accepted %x: %v", raw, ts)
		}
		again, err := ts.AppendAMQP(nil)
		if err != nil {
			t.Fatalf("accepted %x (%v), which does not encode: %v", raw, ts, err)
		}
		if ts2 := decodeRelayedTxnState(again); ts2 == nil || !bytes.Equal(ts2.TxnID, ts.TxnID) {
			t.Fatalf("%v encodes to %x, which decodes to %v", ts, again, ts2)
		}
	})
}
