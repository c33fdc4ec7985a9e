package servicebus

import (
	"testing"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// FuzzTxnCommand feeds coordinator message payloads to decodeTxnCommand:
// it never panics, and what it accepts is a declare or a discharge with a
// txn-id. The corpus (testdata/fuzz/FuzzTxnCommand) holds a declare, a
// commit, a rollback and a global declare, replayed by every test run.
func FuzzTxnCommand(f *testing.F) {
	for _, cmd := range []encoding.Described{
		{Descriptor: frames.DescriptorDeclare, Value: []any{}},
		{Descriptor: frames.DescriptorDischarge, Value: []any{[]byte{1, 2, 3, 4}, false}},
		{Descriptor: encoding.Symbol("amqp:discharge:list"), Value: []any{[]byte{1, 2, 3, 4}, true}},
		{Descriptor: frames.DescriptorDeclare, Value: []any{[]byte("global")}},
	} {
		body, err := frames.AppendValueSection(nil, cmd)
		if err != nil {
			f.Fatal(err)
		}
		b, err := (&frames.Message{RawBody: body}).MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		cmd, err := decodeTxnCommand(payload)
		if err != nil {
			return
		}
		if !cmd.declare && cmd.txnID == nil {
			t.Fatalf("accepted %x as a discharge without a txn-id", payload)
		}
	})
}
