package message

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
)

// simple is a message whose values are all ones the AMQP form accepts.
func simple() *Message {
	ts := time.UnixMilli(1700000000123).UTC()
	return &Message{
		Durable: true, Priority: 7, TTL: 90 * time.Second,
		Annotations:         map[string]any{"x-opt-partition-key": "pk", "x-opt-scheduled-enqueue-time": ts, "sym": Symbol("s")},
		DeliveryAnnotations: map[string]any{"x-da": int64(3)},
		MessageID:           UUID{1, 2}, UserID: []byte("u"), To: "to", Subject: "sub", ReplyTo: "rt",
		CorrelationID: uint64(5), ContentType: "ct", ContentEncoding: "ce", CreationTime: ts,
		SessionID: "g", GroupSequence: 3, ReplyToSessionID: "rtg",
		ApplicationProperties: map[string]any{"s": "v", "u": UUID{9}, "c": Char('x'), "n": nil, "i8": int8(-1),
			"b": []byte{1}, "t": ts, "f": 1.5},
		Footer: []byte{0x00, 0x53, 0x78, 0xc1, 0x05, 0x02, 0xa3, 0x01, 'k', 0x40},
		Body:   frames.AppendDataSection(nil, []byte("payload")),
	}
}

// TestAMQPRoundTrip: what AppendAMQP writes, DecodeAMQP reads back as
// the same message plus the broker's annotations; the header's ttl and
// absolute-expiry-time come from the delivery.
func TestAMQPRoundTrip(t *testing.T) {
	m := simple()
	at := time.UnixMilli(1700000001000).UTC()
	d := &Delivery{SequenceNumber: 42, EnqueuedTime: at, DeliveryCount: 2, TimeToLive: m.TTL, ExpiresAt: at.Add(m.TTL),
		State: 1, LockedUntil: at.Add(time.Minute), WithLockToken: true, LockToken: UUID{7}}
	b, err := AppendAMQP(nil, m, d)
	if err != nil {
		t.Fatal(err)
	}
	var got Message
	if err := DecodeAMQP(&got, b); err != nil {
		t.Fatal(err)
	}
	want := *simple()
	want.AbsoluteExpiryTime = m.CreationTime.Add(m.TTL)
	want.Annotations = map[string]any{"x-opt-partition-key": "pk", "x-opt-scheduled-enqueue-time": m.CreationTime, "sym": Symbol("s"),
		"x-opt-sequence-number": int64(42), "x-opt-enqueued-time": at, "x-opt-message-state": int32(1), "x-opt-locked-until": at.Add(time.Minute)}
	want.DeliveryAnnotations = map[string]any{"x-da": int64(3), "x-opt-lock-token": UUID{7}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%#v\nwant\n%#v", got, want)
	}
	// The body aliases the input; nothing else does.
	if &got.Body[0] != &b[len(b)-len(m.Body)-len(m.Footer)] {
		t.Fatal("body is a copy")
	}
	clear(b[:len(b)-len(m.Body)-len(m.Footer)])
	clear(b[len(b)-len(m.Footer):])
	if !reflect.DeepEqual(got.UserID, []byte("u")) || !reflect.DeepEqual(got.ApplicationProperties["b"], []byte{1}) ||
		!reflect.DeepEqual(got.Footer, m.Footer) {
		t.Fatal("a decoded value aliases the input")
	}
}

func TestDecodeAMQPDefaults(t *testing.T) {
	var m Message
	if err := DecodeAMQP(&m, frames.AppendDataSection(nil, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	if m.Priority != 4 || m.Annotations != nil || m.ApplicationProperties != nil || m.MessageID != nil {
		t.Fatalf("decoded %#v", m)
	}
	// A sender's x-opt-enqueue-sequence-number is dropped; present but
	// empty application properties stay present.
	in := frames.Message{MessageAnnotations: map[Symbol]any{"x-opt-enqueue-sequence-number": int64(1)}, ApplicationProperties: map[string]any{}}
	b, err := in.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := DecodeAMQP(&m, b); err != nil {
		t.Fatal(err)
	}
	if len(m.Annotations) != 0 || m.ApplicationProperties == nil {
		t.Fatalf("decoded %#v", m)
	}
}

func TestSimpleValue(t *testing.T) {
	for _, v := range []any{nil, true, uint8(1), uint64(1), int32(1), float32(1), "s", Symbol("s"), UUID{}, Char('c'), time.Time{}} {
		if got, err := SimpleValue(v); err != nil || got != v {
			t.Fatalf("SimpleValue(%#v) = %#v, %v", v, got, err)
		}
	}
	b := []byte{1}
	if got, err := SimpleValue(b); err != nil || &got.([]byte)[0] == &b[0] {
		t.Fatalf("SimpleValue of bytes: %v, or not a copy", err)
	}
	for _, v := range []any{[]any{}, map[string]any{}, encoding.Map{}, encoding.Described{}, encoding.Decimal32{}, []Symbol{}, 1} {
		if _, err := SimpleValue(v); err == nil || !strings.Contains(err.Error(), "only simple types") {
			t.Fatalf("SimpleValue(%T): %v", v, err)
		}
	}
}

func FuzzDecodeAMQP(f *testing.F) {
	at := time.UnixMilli(1700000001000).UTC()
	full, _ := AppendAMQP(nil, simple(), &Delivery{SequenceNumber: 1, EnqueuedTime: at, WithLockToken: true})
	f.Add(full)
	f.Add(frames.AppendDataSection(nil, []byte("x")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Message
		if err := DecodeAMQP(&m, data); err != nil {
			return
		}
		// Whatever decodes is delivered and decodes again to the same
		// message, apart from what the delivery sets.
		b, err := AppendAMQP(nil, &m, &Delivery{})
		if err != nil {
			t.Fatalf("encoding a decoded message: %v", err)
		}
		var m2 Message
		if err := DecodeAMQP(&m2, b); err != nil {
			t.Fatalf("decoding a delivered message: %v", err)
		}
		normalize(&m)
		normalize(&m2)
		if !reflect.DeepEqual(m, m2) && !hasNaN(&m) {
			t.Fatalf("unstable round trip:\n%#v\n%#v", m, m2)
		}
	})
}

// normalize removes from m what a delivery replaces: the broker's
// annotations and lock token, ttl and absolute-expiry-time.
func normalize(m *Message) {
	for _, k := range []Symbol{AnnLockedUntil, AnnMessageState, AnnDeadLetterSource, AnnSequenceNumber, AnnEnqueuedTime, AnnEnqueueSequenceNumber} {
		delete(m.Annotations, string(k))
	}
	if _, isTime := m.Annotations[string(AnnScheduledEnqueueTime)].(time.Time); !isTime {
		delete(m.Annotations, string(AnnScheduledEnqueueTime))
	}
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
	delete(m.DeliveryAnnotations, string(AnnLockToken))
	if len(m.DeliveryAnnotations) == 0 {
		m.DeliveryAnnotations = nil
	}
	m.TTL = 0
	m.AbsoluteExpiryTime = time.Time{}
}

// FuzzDecodeAMQPHead checks DecodeAMQPHead against DecodeAMQP on every
// message and every cut of it: what it decodes, the whole message decodes
// to the same fields with the body it points at; it never accepts a
// message DecodeAMQP refuses. The corpus is in
// testdata/fuzz/FuzzDecodeAMQPHead.
func FuzzDecodeAMQPHead(f *testing.F) {
	data := func(bodies ...[]byte) []byte {
		var b encoding.Buffer
		for _, d := range bodies {
			b.WriteDescriptor(frames.DescriptorData)
			b.WriteBinary(d)
		}
		return b.Bytes()
	}
	withProps, err := (&frames.Properties{MessageID: "id"}).AppendAMQP(nil)
	if err != nil {
		f.Fatal(err)
	}
	var ap encoding.Buffer
	ap.WriteDescriptor(frames.DescriptorApplicationProperties)
	if err := ap.WriteStringMap(map[string]any{"k": "v"}); err != nil {
		f.Fatal(err)
	}
	var value encoding.Buffer
	value.WriteDescriptor(frames.DescriptorAMQPValue)
	value.WriteString("an amqp-value body")
	for _, b := range [][]byte{
		data([]byte("hello")),
		append(append(withProps, ap.Bytes()...), data([]byte("a"), bytes.Repeat([]byte("b"), 300))...),
		append(withProps, value.Bytes()...),
	} {
		f.Add(b, uint16(len(b)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		k := min(int(cut), len(data))
		var head Message
		off, err := DecodeAMQPHead(&head, data[:k], int64(len(data)), bytes.NewReader(data))
		var whole Message
		werr := DecodeAMQP(&whole, bytes.Clone(data))
		if err != nil {
			return
		}
		if werr != nil {
			t.Fatalf("DecodeAMQPHead accepts what DecodeAMQP refuses: %v", werr)
		}
		if !bytes.Equal(data[off:], whole.Body) || whole.Footer != nil {
			t.Fatalf("the body DecodeAMQPHead points at (%d bytes at %d) is not the message's", len(data)-int(off), off)
		}
		whole.Body = nil
		if head.Body != nil || !reflect.DeepEqual(&head, &whole) {
			t.Fatalf("DecodeAMQPHead disagrees with DecodeAMQP:\n%+v\n%+v", head, whole)
		}
	})
}
