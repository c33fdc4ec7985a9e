package frames

import (
	"testing"

	"github.com/google/uuid"
)

// benchMessage is a typical Service Bus delivery: header, the broker's
// annotations, properties, a few application properties and a 1 KB data
// body.
func benchMessage(b *testing.B) []byte {
	b.Helper()
	id := uuid.New()
	m := &Message{
		Header: &Header{Durable: true, Priority: 4, DeliveryCount: 1},
		MessageAnnotations: map[Symbol]any{
			"x-opt-sequence-number": int64(123456),
			"x-opt-enqueued-time":   t0,
			"x-opt-locked-until":    t0,
		},
		Properties: &Properties{
			MessageID: id.String(), To: "queue", Subject: "order", ContentType: "application/json",
			CorrelationID: "corr", GroupID: "session-1",
		},
		ApplicationProperties: map[string]any{"tenant": "contoso", "priority": int32(3), "retry": false},
		RawBody:               AppendDataSection(nil, make([]byte, 1024)),
	}
	p, err := m.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkMarshalTransfer writes a transfer frame with a 1 KB payload
// into a reused buffer.
func BenchmarkMarshalTransfer(b *testing.B) {
	payload := make([]byte, 1024)
	tag := make([]byte, 16)
	buf := make([]byte, 0, 4096)
	id := uint32(0)
	format := MessageFormatAMQP
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		id++
		t := Transfer{Handle: 1, DeliveryID: &id, DeliveryTag: tag, MessageFormat: &format, Payload: payload}
		var err error
		buf, err = AppendFrame(buf[:0], 3, &t)
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseTransfer reads a transfer frame with a 1 KB payload.
func BenchmarkParseTransfer(b *testing.B) {
	frame, _ := AppendFrame(nil, 3, &Transfer{Handle: 1, DeliveryID: Ptr[uint32](7), DeliveryTag: make([]byte, 16),
		MessageFormat: Ptr[uint32](0), Payload: make([]byte, 1024)})
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, _, err := ParseFrame(frame, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnmarshalMessage decodes a whole typical message (1 KB body).
func BenchmarkUnmarshalMessage(b *testing.B) {
	p := benchMessage(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		var m Message
		if err := m.UnmarshalBinary(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarshalMessage encodes the same message into a reused buffer.
func BenchmarkMarshalMessage(b *testing.B) {
	var m Message
	if err := m.UnmarshalBinary(benchMessage(b)); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = m.AppendBinary(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRewriteMessage is the delivery fast path: split a stored
// message and re-encode it with a new header and annotations.
func BenchmarkRewriteMessage(b *testing.B) {
	p := benchMessage(b)
	h := &Header{Durable: true, Priority: 4, DeliveryCount: 2}
	ma := map[Symbol]any{"x-opt-sequence-number": int64(123456), "x-opt-enqueued-time": t0, "x-opt-locked-until": t0}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		s, err := SplitMessage(p)
		if err != nil {
			b.Fatal(err)
		}
		if buf, err = s.AppendWith(buf[:0], h, nil, ma); err != nil {
			b.Fatal(err)
		}
	}
}
