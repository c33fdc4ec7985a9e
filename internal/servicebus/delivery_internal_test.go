package servicebus

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

// encodeDeliveryReference is encodeDelivery as it was written first,
// through a frames.Message and its maps: the direct encoder must produce
// the same bytes.
func encodeDeliveryReference(d *broker.Delivery, opts deliveryOpts) ([]byte, error) {
	m := toAMQP(d.Message)
	if d.DeliveryCount > 0 {
		m.Header.DeliveryCount = d.DeliveryCount - 1
	}
	m.Header.TTL = 0
	m.Properties.AbsoluteExpiryTime = d.ExpiresAt
	if d.TimeToLive > 0 && !d.ExpiresAt.IsZero() {
		m.Header.TTL = ttlMillis(d.TimeToLive)
		if ct := m.Properties.CreationTime; !ct.IsZero() {
			m.Properties.AbsoluteExpiryTime = ct.Add(d.TimeToLive)
		}
	}
	ma := m.MessageAnnotations
	for _, k := range []frames.Symbol{annLockedUntil, annMessageState, annDeadLetterSource, annSequenceNumber, annEnqueuedTime} {
		delete(ma, k)
	}
	if _, isLong := ma[annEnqueueSequenceNumber].(int64); !isLong {
		delete(ma, annEnqueueSequenceNumber)
	}
	ma[annSequenceNumber] = d.SequenceNumber
	ma[annEnqueuedTime] = d.EnqueuedTime
	if d.State != broker.StateActive {
		ma[annMessageState] = int32(d.State)
	}
	if !d.ScheduledEnqueueTime.IsZero() {
		ma[annScheduledEnqueueTime] = d.ScheduledEnqueueTime
	} else if v, ok := ma[annScheduledEnqueueTime]; ok {
		if _, isTime := v.(time.Time); !isTime {
			delete(ma, annScheduledEnqueueTime)
		}
	}
	if d.DeadLetterSource != "" {
		ma[annDeadLetterSource] = d.DeadLetterSource
	}
	if opts.locked && !d.LockedUntil.IsZero() {
		ma[annLockedUntil] = d.LockedUntil
	}
	if len(d.Message.DeliveryAnnotations) > 0 || opts.lockTokenAnnotation {
		m.DeliveryAnnotations = map[frames.Symbol]any{}
		for k, v := range d.Message.DeliveryAnnotations {
			m.DeliveryAnnotations[frames.Symbol(k)] = toAMQPValue(v)
		}
		delete(m.DeliveryAnnotations, annLockToken)
		if opts.lockTokenAnnotation {
			m.DeliveryAnnotations[annLockToken] = encoding.UUID(d.LockToken)
		}
	}
	if d.Message.Footer != nil {
		var f frames.Message
		if err := f.UnmarshalBinary(d.Message.Footer); err != nil {
			return nil, err
		}
		m.Footer = f.Footer
	}
	return m.AppendBinary(make([]byte, 0, 256+len(d.Message.Body)))
}

func TestEncodeDeliveryMatchesReference(t *testing.T) {
	at := time.UnixMilli(1700000001000).UTC()
	body := frames.AppendDataSection(nil, []byte("payload"))
	many := map[string]any{}
	for i := range 20 {
		many[fmt.Sprintf("k%02d", 19-i)] = int64(i)
	}
	manyAnn := map[string]any{}
	for i := range 18 {
		manyAnn[fmt.Sprintf("x-user-%02d", 17-i)] = fmt.Sprint(i)
	}
	footer, err := frames.AppendAnnotationsSection(nil, frames.DescriptorFooter, map[frames.Symbol]any{"x-opt-footer-test": "footer-value"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []*message.Message{
		{Priority: 4, Body: body},
		{Priority: 4},
		{
			Durable: true, Priority: 7, TTL: time.Hour, MessageID: "mid", CorrelationID: message.UUID(uuid.New()),
			UserID: []byte("u"), To: "to", Subject: "s", ReplyTo: "r", ContentType: "text/plain", ContentEncoding: "gzip",
			CreationTime: at.Add(-time.Second), SessionID: "sess", GroupSequence: 3, ReplyToSessionID: "rts",
			Annotations: map[string]any{
				"x-opt-partition-key": "pk", "x-opt-sequence-number": int64(99), "x-opt-locked-until": at,
				"x-opt-scheduled-enqueue-time": "not a time", "x-opt-message-state": int32(1), "sym": message.Symbol("v"),
			},
			ApplicationProperties: map[string]any{"a": "b", "n": int32(-3), "u": message.UUID(uuid.New()), "c": message.Char('x'), "bin": []byte{1}, "t": at},
			Body:                  body,
		},
		{Priority: 4, Annotations: map[string]any{"x-opt-scheduled-enqueue-time": at.Add(time.Minute)}, ApplicationProperties: map[string]any{}, Body: body},
		{Priority: 4, Annotations: manyAnn, ApplicationProperties: many, MessageID: uint64(7), Body: body},
		{Priority: 4, DeliveryAnnotations: map[string]any{"x-opt-lock-token": "sender's", "x-da": "v"},
			Footer: footer, Body: body},
		{Priority: 4, Annotations: map[string]any{"x-opt-enqueue-sequence-number": int64(7)}, Body: body},
		{Priority: 4, Annotations: map[string]any{"x-opt-enqueue-sequence-number": "not a long"}, Body: body},
	}
	ds := []broker.Delivery{
		{SequenceNumber: 1, EnqueuedTime: at, DeliveryCount: 1},
		{SequenceNumber: 42, EnqueuedTime: at, TimeToLive: 1500 * time.Millisecond, ExpiresAt: at.Add(1500 * time.Millisecond),
			LockToken: uuid.New(), LockedUntil: at.Add(time.Minute), DeliveryCount: 3, State: broker.StateDeferred},
		{SequenceNumber: 7, EnqueuedTime: at, ScheduledEnqueueTime: at.Add(time.Hour), DeadLetterSource: "q/Subscriptions/s",
			LockToken: uuid.New(), DeliveryCount: 2, State: broker.StateScheduled, TimeToLive: 70 * 24 * time.Hour, ExpiresAt: at.Add(70 * 24 * time.Hour)},
	}
	for i, m := range msgs {
		for j := range ds {
			for _, opts := range []deliveryOpts{{}, {locked: true}, {locked: true, lockTokenAnnotation: true}, {lockTokenAnnotation: true}} {
				d := ds[j]
				d.Message = m
				want, err := encodeDeliveryReference(&d, opts)
				if err != nil {
					t.Fatal(err)
				}
				got, err := encodeDelivery(&d, opts)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("message %d, delivery %d, %+v:\n got %x\nwant %x", i, j, opts, got, want)
				}
			}
		}
	}
}

// BenchmarkEncodeDelivery encodes a peek-locked delivery of a 1 KB
// message, as the receive path does.
func BenchmarkEncodeDelivery(b *testing.B) {
	m := &message.Message{Priority: 4, MessageID: "0123456789abcdef0123456789abcdef",
		ApplicationProperties: map[string]any{"i": int64(1)}, Body: frames.AppendDataSection(nil, make([]byte, 1024))}
	d := &broker.Delivery{Message: m, SequenceNumber: 42, EnqueuedTime: time.Now(), LockToken: uuid.New(),
		LockedUntil: time.Now().Add(time.Minute), DeliveryCount: 1}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeDelivery(d, deliveryOpts{locked: true, lockTokenAnnotation: true}); err != nil {
			b.Fatal(err)
		}
	}
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
