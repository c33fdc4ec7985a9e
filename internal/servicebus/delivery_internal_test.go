package servicebus

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// BenchmarkEncodeDelivery encodes a peek-locked delivery of a 1 KB
// message, as the receive path does.
func BenchmarkEncodeDelivery(b *testing.B) {
	m := &message.Message{Priority: 4, MessageID: "0123456789abcdef0123456789abcdef",
		ApplicationProperties: map[string]any{"i": int64(1)}, Body: frames.AppendDataSection(nil, make([]byte, 1024))}
	d := &broker.Delivery{Message: m, SequenceNumber: 42, EnqueuedTime: time.Now(), LockToken: uuid.New(),
		LockedUntil: time.Now().Add(time.Minute), DeliveryCount: 1}
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := encodeDelivery(d, deliveryOpts{locked: true, lockTokenAnnotation: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

func TestNewMessageID(t *testing.T) {
	seen := map[string]bool{}
	for range 5000 { // several refills of the random block
		id := newMessageID()
		u, err := uuid.Parse(id)
		if err != nil || len(id) != 32 || u.Version() != 4 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("id %q: %v (version %v variant %v)", id, err, u.Version(), u.Variant())
		}
		if seen[id] {
			t.Fatalf("id %q twice", id)
		}
		seen[id] = true
	}
}
