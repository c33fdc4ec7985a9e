package frames

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
)

// These tests check our message codec against go-amqp's, through its
// public Message.MarshalBinary and UnmarshalBinary, in both directions.

func goAMQPMessage() *amqp.Message {
	str := func(s string) *string { return &s }
	tm := func(t time.Time) *time.Time { return &t }
	seq := uint32(3)
	return &amqp.Message{
		Header: &amqp.MessageHeader{Durable: true, Priority: 7, TTL: 90 * time.Second, FirstAcquirer: true, DeliveryCount: 4},
		DeliveryAnnotations: amqp.Annotations{
			amqp.Symbol("x-opt-lock-token"): amqp.UUID{1, 2},
		},
		Annotations: amqp.Annotations{
			amqp.Symbol("x-opt-sequence-number"):        int64(42),
			amqp.Symbol("x-opt-scheduled-enqueue-time"): t0,
			amqp.Symbol("x-opt-partition-key"):          "pk",
		},
		Properties: &amqp.MessageProperties{
			MessageID: "mid", UserID: []byte("u"), To: str("queue"), Subject: str("label"), ReplyTo: str("r"),
			CorrelationID: uint64(99), ContentType: str("text/plain"), ContentEncoding: str("utf8"),
			AbsoluteExpiryTime: tm(t1), CreationTime: tm(t0), GroupID: str("session"), GroupSequence: &seq,
			ReplyToGroupID: str("rg"),
		},
		ApplicationProperties: map[string]any{"s": "v", "i": int32(1), "l": int64(-5), "b": false, "d": 2.5, "t": t0},
		Data:                  [][]byte{[]byte("hello"), make([]byte, 300)},
		Footer:                amqp.Annotations{amqp.Symbol("f"): "x"},
	}
}

// TestInteropGoAMQPToOurs decodes go-amqp's encoding with our codec.
func TestInteropGoAMQPToOurs(t *testing.T) {
	gm := goAMQPMessage()
	p, err := gm.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var m Message
	if err := m.UnmarshalBinary(p); err != nil {
		t.Fatalf("our decode of go-amqp bytes: %v", err)
	}
	wantHeader := &Header{Durable: true, Priority: 7, TTL: 90000, FirstAcquirer: true, DeliveryCount: 4}
	if !reflect.DeepEqual(m.Header, wantHeader) {
		t.Errorf("header %+v", m.Header)
	}
	if m.DeliveryAnnotations["x-opt-lock-token"] != (UUID{1, 2}) {
		t.Errorf("delivery annotations %v", m.DeliveryAnnotations)
	}
	wantMA := map[Symbol]any{"x-opt-sequence-number": int64(42), "x-opt-scheduled-enqueue-time": t0, "x-opt-partition-key": "pk"}
	if !reflect.DeepEqual(m.MessageAnnotations, wantMA) {
		t.Errorf("message annotations %v", m.MessageAnnotations)
	}
	wantProps := &Properties{
		MessageID: "mid", UserID: []byte("u"), To: "queue", Subject: "label", ReplyTo: "r", CorrelationID: uint64(99),
		ContentType: "text/plain", ContentEncoding: "utf8", AbsoluteExpiryTime: t1, CreationTime: t0,
		GroupID: "session", GroupSequence: 3, ReplyToGroupID: "rg",
	}
	if !reflect.DeepEqual(m.Properties, wantProps) {
		t.Errorf("properties\n got %+v\nwant %+v", m.Properties, wantProps)
	}
	if !reflect.DeepEqual(m.ApplicationProperties, gm.ApplicationProperties) {
		t.Errorf("application properties %v", m.ApplicationProperties)
	}
	if !reflect.DeepEqual(m.Footer, map[Symbol]any{"f": "x"}) {
		t.Errorf("footer %v", m.Footer)
	}
	data, err := DataSections(m.RawBody)
	if err != nil || !reflect.DeepEqual(data, gm.Data) {
		t.Errorf("data %q %v", data, err)
	}
	// RawBody is a verbatim slice of go-amqp's bytes, and re-encoding our
	// message gives go-amqp the same message back.
	if !bytes.Contains(p, m.RawBody) {
		t.Error("RawBody is not verbatim")
	}
	out, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var back amqp.Message
	if err := back.UnmarshalBinary(out); err != nil {
		t.Fatal(err)
	}
	compareGoAMQP(t, &back, gm)
}

// TestInteropOursToGoAMQP decodes our encoding with go-amqp.
func TestInteropOursToGoAMQP(t *testing.T) {
	m := fullMessage(t)
	p, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var gm amqp.Message
	if err := gm.UnmarshalBinary(p); err != nil {
		t.Fatalf("go-amqp decode of our bytes: %v", err)
	}
	h := gm.Header
	if h == nil || !h.Durable || h.Priority != 7 || h.TTL != time.Minute || !h.FirstAcquirer || h.DeliveryCount != 2 {
		t.Errorf("header %+v", h)
	}
	// go-amqp decodes symbol keys as strings.
	if gm.DeliveryAnnotations["x-opt-lock-token"] != (amqp.UUID{1, 2, 3}) {
		t.Errorf("delivery annotations %v", gm.DeliveryAnnotations)
	}
	if gm.Annotations["x-opt-sequence-number"] != int64(42) ||
		!gm.Annotations["x-opt-enqueued-time"].(time.Time).Equal(t0) ||
		gm.Annotations["x-opt-message-state"] != int32(1) {
		t.Errorf("annotations %v", gm.Annotations)
	}
	pr := gm.Properties
	if pr == nil || pr.MessageID != "id-1" || pr.CorrelationID != (amqp.UUID{9}) || *pr.To != "queue" || *pr.Subject != "label" ||
		*pr.ReplyTo != "reply" || *pr.ContentType != "application/json" || *pr.ContentEncoding != "gzip" ||
		!pr.AbsoluteExpiryTime.Equal(t1) || !pr.CreationTime.Equal(t0) || *pr.GroupID != "session-1" ||
		*pr.GroupSequence != 3 || *pr.ReplyToGroupID != "rsession" || string(pr.UserID) != "user" {
		t.Errorf("properties %+v", pr)
	}
	ap := gm.ApplicationProperties
	if ap["s"] != "v" || ap["i"] != int32(-1) || ap["l"] != int64(1<<40) || ap["b"] != true || ap["d"] != 1.5 ||
		!ap["t"].(time.Time).Equal(t0) || ap["u"] != (amqp.UUID{7}) || ap["sym"] != "x" /* go-amqp reads symbols as strings */ || ap["ub"] != uint8(1) {
		t.Errorf("application properties %v", ap)
	}
	if !reflect.DeepEqual(gm.Data, [][]byte{[]byte("first"), []byte("second")}) {
		t.Errorf("data %q", gm.Data)
	}
	if !reflect.DeepEqual(gm.Footer, amqp.Annotations{"hash": []byte{0xff}}) {
		t.Errorf("footer %v", gm.Footer)
	}
}

// TestInteropBodies covers amqp-value and amqp-sequence bodies both ways.
func TestInteropBodies(t *testing.T) {
	for _, gm := range []*amqp.Message{
		{Value: map[string]any{"operation": "x", "n": int64(1)}},
		{Value: "token"},
		{Sequence: [][]any{{"a", int32(1)}, {true}}},
	} {
		p, err := gm.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var m Message
		if err := m.UnmarshalBinary(p); err != nil {
			t.Fatal(err)
		}
		if gm.Value != nil {
			v, err := BodyValue(m.RawBody)
			if err != nil {
				t.Fatal(err)
			}
			if s, ok := gm.Value.(string); ok && v != s {
				t.Errorf("value %v", v)
			}
			if mm, ok := gm.Value.(map[string]any); ok {
				got := v.(Map)
				if len(got) != len(mm) {
					t.Errorf("value %v", v)
				}
				for k, want := range mm {
					if g, _ := got.Get(k); g != want {
						t.Errorf("value[%s] = %v", k, g)
					}
				}
			}
		} else {
			seqs, err := BodySequences(m.RawBody)
			if err != nil || !reflect.DeepEqual(seqs, gm.Sequence) {
				t.Errorf("sequences %v %v", seqs, err)
			}
		}
		out, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back amqp.Message
		if err := back.UnmarshalBinary(out); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Value, gm.Value) || !reflect.DeepEqual(back.Sequence, gm.Sequence) {
			t.Errorf("go-amqp read back %v / %v", back.Value, back.Sequence)
		}
	}
	// Our amqp-value map encoding, read by go-amqp.
	body, _ := AppendValueSection(nil, map[string]any{"statusCode": int32(200), "statusDescription": "OK"})
	out, _ := (&Message{RawBody: body}).MarshalBinary()
	var gm amqp.Message
	if err := gm.UnmarshalBinary(out); err != nil {
		t.Fatal(err)
	}
	if v, ok := gm.Value.(map[string]any); !ok || v["statusCode"] != int32(200) {
		t.Errorf("go-amqp value %#v", gm.Value)
	}
}

func compareGoAMQP(t *testing.T, got, want *amqp.Message) {
	t.Helper()
	if !reflect.DeepEqual(got.Header, want.Header) {
		t.Errorf("header %+v", got.Header)
	}
	if !reflect.DeepEqual(got.Data, want.Data) {
		t.Errorf("data differs")
	}
	// go-amqp writes amqp.Symbol keys as symbols and reads symbol keys
	// back as strings.
	if got.DeliveryAnnotations["x-opt-lock-token"] != want.DeliveryAnnotations[amqp.Symbol("x-opt-lock-token")] {
		t.Errorf("delivery annotations %v", got.DeliveryAnnotations)
	}
	for k, v := range want.Annotations {
		g := got.Annotations[string(k.(amqp.Symbol))]
		if tv, ok := v.(time.Time); ok {
			if gt, ok := g.(time.Time); !ok || !gt.Equal(tv) {
				t.Errorf("annotation %v = %v", k, g)
			}
		} else if g != v {
			t.Errorf("annotation %v = %v", k, g)
		}
	}
	if got.Properties.MessageID != want.Properties.MessageID || got.Properties.CorrelationID != want.Properties.CorrelationID ||
		*got.Properties.GroupID != *want.Properties.GroupID || !got.Properties.CreationTime.Equal(*want.Properties.CreationTime) {
		t.Errorf("properties %+v", got.Properties)
	}
	if len(got.ApplicationProperties) != len(want.ApplicationProperties) {
		t.Errorf("application properties %v", got.ApplicationProperties)
	}
}
