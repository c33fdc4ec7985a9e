package servicebus

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// TestDeliveryCountOnWire: the header of a first delivery carries
// delivery-count 0 explicitly. rhea (the JS SDK's AMQP stack) does not
// apply field defaults, so an absent delivery-count reached JS
// applications as deliveryCount undefined instead of 0.
func TestDeliveryCountOnWire(t *testing.T) {
	for _, tc := range []struct {
		count uint32 // broker.Delivery.DeliveryCount: attempts including this one
		wire  uint32
	}{{1, 0}, {3, 2}} {
		d := &broker.Delivery{Message: &message.Message{Priority: 4, Body: frames.AppendDataSection(nil, []byte("x"))},
			SequenceNumber: 1, EnqueuedTime: time.Now(), LockToken: uuid.New(), DeliveryCount: tc.count}
		out, err := encodeDelivery(d, deliveryOpts{})
		if err != nil {
			t.Fatal(err)
		}
		v, err := encoding.NewReader(out).ReadAny() // the header section comes first
		if err != nil {
			t.Fatal(err)
		}
		h, ok := v.(encoding.Described)
		fields, isList := h.Value.([]any)
		if !ok || h.Descriptor != uint64(0x70) || !isList || len(fields) != 5 || fields[4] != tc.wire {
			t.Fatalf("delivery %d: header %#v; want delivery-count %d written as the fifth field", tc.count, v, tc.wire)
		}
	}
}
