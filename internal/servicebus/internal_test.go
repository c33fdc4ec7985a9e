package servicebus

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/amqp"
	"github.com/busbarmq/busbar/internal/amqp/encoding"
	"github.com/busbarmq/busbar/internal/amqp/frames"
	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/message"
)

func TestParseAddress(t *testing.T) {
	for in, want := range map[string]address{
		"q":                                      {kind: nodeEntity, entity: "q"},
		"MyQueue":                                {kind: nodeEntity, entity: "MyQueue"},
		"amqps://ns.servicebus.windows.net/q":    {kind: nodeEntity, entity: "q"},
		"amqp://127.0.0.1:5672/q/":               {kind: nodeEntity, entity: "q"},
		"q/$DeadLetterQueue":                     {kind: nodeEntity, entity: "q", sub: subDeadLetter},
		"q/$deadletterqueue":                     {kind: nodeEntity, entity: "q", sub: subDeadLetter},
		"q/$Transfer/$DeadLetterQueue":           {kind: nodeEntity, entity: "q", sub: subTransferDeadLetter},
		"q/$management":                          {kind: nodeManagement, entity: "q"},
		"q/$DeadLetterQueue/$Management":         {kind: nodeManagement, entity: "q", sub: subDeadLetter},
		"t/Subscriptions/s/$DeadLetterQueue":     {kind: nodeEntity, entity: "t/Subscriptions/s", sub: subDeadLetter},
		"$cbs":                                   {kind: nodeCBS},
		"$CBS":                                   {kind: nodeCBS},
		"sb://localhost/q/$management?x=1":       {kind: nodeManagement, entity: "q"},
		"amqps://h/q/$Transfer/$DeadLetterQueue": {kind: nodeEntity, entity: "q", sub: subTransferDeadLetter},
	} {
		got, err := parseAddress(in)
		if err != nil || got != want {
			t.Errorf("parseAddress(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "/", "sb://host/", "$management", "/$DeadLetterQueue"} {
		if a, err := parseAddress(bad); err == nil {
			t.Errorf("parseAddress(%q) = %+v; want error", bad, a)
		}
	}
	a, _ := parseAddress("q/$deadletterqueue/$management")
	if a.String() != "q/$DeadLetterQueue/$management" || a.path() != "q/$DeadLetterQueue" {
		t.Errorf("String %q path %q", a.String(), a.path())
	}
}

// TestLockTokenByteOrder is the example of docs/wire/amqp.md §4.3.
func TestLockTokenByteOrder(t *testing.T) {
	u := message.UUID(uuid.MustParse("01234567-89ab-cdef-0123-456789abcdef"))
	var b [16]byte
	putDotNetGUID(&b, u)
	tag := b[:]
	if got := hex.EncodeToString(tag); got != "67452301ab89efcd0123456789abcdef" {
		t.Fatalf("delivery tag %s", got)
	}
	back, ok := uuidFromDotNetBytes(tag)
	if !ok || back != u {
		t.Fatalf("round trip %x", back)
	}
	if _, ok := uuidFromDotNetBytes(tag[:15]); ok {
		t.Fatal("15-byte tag accepted")
	}
}

func TestClassify(t *testing.T) {
	ae := &auth.Error{Kind: auth.ErrExpired, Msg: "expired"}
	for _, tc := range []struct {
		err    error
		cond   frames.Symbol
		status int32
	}{
		{ae, "amqp:unauthorized-access", 401},
		{unauthorized("no"), "amqp:unauthorized-access", 401},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), "com.microsoft:timeout", 408},
		{notFound("sb://h/q"), "amqp:not-found", 404},
		{broker.ErrNotFound, "amqp:not-found", 404},
		{broker.ErrMessageNotFound, "com.microsoft:message-not-found", 404},
		{broker.ErrAlreadyExists, "com.microsoft:entity-already-exists", 409},
		{broker.ErrLockLost, "com.microsoft:message-lock-lost", 410},
		{broker.ErrMessageTooLarge, "amqp:link:message-size-exceeded", 413},
		{amqp.Errorf(amqp.CondMessageSizeExceeded, "message of 2 bytes exceeds the client's max-message-size 1"), "amqp:link:message-size-exceeded", 413},
		{broker.ErrQuotaExceeded, "amqp:resource-limit-exceeded", 403},
		{broker.ErrEntityDisabled, "com.microsoft:entity-disabled", 400},
		{badRequest("x"), "amqp:not-allowed", 400},
		{broker.ErrNotAllowed, "amqp:not-allowed", 403},
		{broker.ErrClosed, "amqp:connection:forced", 503},
		{broker.ErrNoSpace, "amqp:resource-limit-exceeded", 503},
		{broker.ErrStoreFailed, "amqp:resource-limit-exceeded", 503},
		{broker.ErrStoreUnavailable, "com.microsoft:server-busy", 503},
		{broker.ErrMoved, "com.microsoft:server-busy", 503},
		{broker.ErrInternal, "amqp:internal-error", 500},
		{errors.New("anything else"), "amqp:internal-error", 500},
	} {
		cond, status := classify(tc.err)
		if cond != tc.cond || status != tc.status {
			t.Errorf("classify(%v) = %s %d; want %s %d", tc.err, cond, status, tc.cond, tc.status)
		}
	}
}

func TestDescribe(t *testing.T) {
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	now := time.Date(2025, 1, 20, 16, 53, 32, 0, time.UTC)
	f := describe(log, now, "busbar", "send", "q", false, broker.ErrLockLost)
	want := "broker: lock lost. TrackingId:" + f.trackingID + ", SystemTracker:busbar:Queue:q, Timestamp:2025-01-20T16:53:32"
	if f.desc != want {
		t.Fatalf("description\n %q\nwant\n %q", f.desc, want)
	}
	if !strings.Contains(logBuf.String(), "trackingId="+f.trackingID) {
		t.Fatalf("log does not carry the tracking id: %s", logBuf.String())
	}
	// Internal errors keep their cause out of the description.
	f = describe(slog.New(slog.NewTextHandler(io.Discard, nil)), now, "busbar", "send", "", false, &broker.Error{Kind: broker.KindInternal, Msg: "disk /var/x failed"})
	if strings.Contains(f.desc, "/var/x") || !strings.HasPrefix(f.desc, "An internal error occurred. TrackingId:") {
		t.Fatalf("internal description %q", f.desc)
	}
}

// TestDecodeMessageAllocations: a sent message with a header and a
// message-id costs decodeMessage three allocations — the message with its
// AMQP decoding, the id's string and its interface box — and one without
// an id the same (the id it is given). The header and properties once cost
// one each.
func TestDecodeMessageAllocations(t *testing.T) {
	for _, m := range []*frames.Message{
		{Header: &frames.Header{Durable: true}, RawBody: frames.AppendDataSection(nil, make([]byte, 1024))},
		{Header: &frames.Header{Durable: true}, Properties: &frames.Properties{MessageID: "id-1"}, RawBody: frames.AppendDataSection(nil, make([]byte, 1024))},
	} {
		data, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = decodeMessage(data) }); n > 3 {
			t.Errorf("decodeMessage(%v): %v allocations, want 3", m.Properties, n)
		}
	}
}

func TestMessageConversionRoundTrip(t *testing.T) {
	body := frames.AppendDataSection(nil, []byte("payload"))
	in := &frames.Message{
		Header:             &frames.Header{Durable: true, Priority: 7, TTL: 1500},
		MessageAnnotations: map[frames.Symbol]any{"x-opt-partition-key": "pk", "x-opt-scheduled-enqueue-time": time.UnixMilli(1700000000000).UTC(), "sym": encoding.Symbol("s")},
		Properties: &frames.Properties{MessageID: encoding.UUID{1, 2}, UserID: []byte("u"), To: "to", Subject: "sub", ReplyTo: "rt",
			CorrelationID: uint64(5), ContentType: "ct", ContentEncoding: "ce", CreationTime: time.UnixMilli(1600000000000).UTC(),
			GroupID: "g", GroupSequence: 3, ReplyToGroupID: "rtg"},
		ApplicationProperties: map[string]any{"s": "v", "u": encoding.UUID{9}, "c": encoding.Char('x'), "n": nil, "i8": int8(-1)},
		RawBody:               body,
	}
	data, err := in.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeMessage(data)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Durable || m.Priority != 7 || m.TTL != 1500*time.Millisecond || m.MessageID != (message.UUID{1, 2}) || m.CorrelationID != uint64(5) ||
		m.SessionID != "g" || m.ReplyToSessionID != "rtg" || m.ContentType != "ct" || m.Subject != "sub" ||
		m.Annotations["sym"] != message.Symbol("s") || m.ApplicationProperties["u"] != (message.UUID{9}) ||
		m.ApplicationProperties["c"] != message.Char('x') || !bytes.Equal(m.Body, body) {
		t.Fatalf("decoded %+v", m)
	}
	// The body aliases the transfer payload (which the endpoint never
	// reuses: see decodeMessage); nothing else may.
	clear(data[:len(data)-len(body)])
	if string(m.UserID) != "u" || m.To != "to" || m.ApplicationProperties["s"] != "v" || m.Annotations["x-opt-partition-key"] != "pk" {
		t.Fatalf("decoded fields changed with the payload: %+v", m)
	}

	d := &broker.Delivery{Message: m, SequenceNumber: 42, EnqueuedTime: time.UnixMilli(1700000001000).UTC(), TimeToLive: 1500 * time.Millisecond,
		ExpiresAt: time.UnixMilli(1700000002500).UTC(), LockToken: uuid.New(), LockedUntil: time.UnixMilli(1700000060000).UTC(),
		DeliveryCount: 3, State: broker.StateDeferred}
	out, err := encodeDelivery(d, deliveryOpts{locked: true, lockTokenAnnotation: true})
	if err != nil {
		t.Fatal(err)
	}
	var got frames.Message
	if err := got.UnmarshalBinary(out); err != nil {
		t.Fatal(err)
	}
	ma := got.MessageAnnotations
	if got.Header.DeliveryCount != 2 || got.Header.TTL != 1500 || !got.Header.Durable || got.Header.Priority != 7 ||
		ma["x-opt-sequence-number"] != int64(42) || ma["x-opt-enqueue-sequence-number"] != nil ||
		ma["x-opt-enqueued-time"] != d.EnqueuedTime || ma["x-opt-locked-until"] != d.LockedUntil || ma["x-opt-message-state"] != int32(1) ||
		ma["x-opt-partition-key"] != "pk" || got.DeliveryAnnotations["x-opt-lock-token"] != encoding.UUID(d.LockToken) ||
		!got.Properties.AbsoluteExpiryTime.Equal(m.CreationTime.Add(d.TimeToLive)) || got.Properties.MessageID != (encoding.UUID{1, 2}) ||
		got.ApplicationProperties["u"] != (encoding.UUID{9}) || !bytes.Equal(got.RawBody, body) {
		t.Fatalf("delivered %+v %+v %+v %v", got.Header, got.Properties, ma, got.DeliveryAnnotations)
	}

	// Unlocked, active, never expiring: no lock, state or ttl fields;
	// the properties section is always there.
	d2 := &broker.Delivery{Message: &message.Message{Priority: 4, Body: body}, SequenceNumber: 1, EnqueuedTime: time.Now(), DeliveryCount: 1}
	out, _ = encodeDelivery(d2, deliveryOpts{})
	got = frames.Message{}
	if err := got.UnmarshalBinary(out); err != nil {
		t.Fatal(err)
	}
	if got.Properties == nil || got.Header == nil || got.Header.TTL != 0 || got.Header.DeliveryCount != 0 {
		t.Fatalf("minimal delivery: %+v %+v", got.Header, got.Properties)
	}
	for _, k := range []frames.Symbol{"x-opt-locked-until", "x-opt-message-state", "x-opt-scheduled-enqueue-time"} {
		if _, ok := got.MessageAnnotations[k]; ok {
			t.Errorf("minimal delivery carries %s", k)
		}
	}
}

func TestDecodeRejectsComplexProperties(t *testing.T) {
	m := &frames.Message{ApplicationProperties: map[string]any{"l": []any{int64(1)}}, RawBody: frames.AppendDataSection(nil, nil)}
	data, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeMessage(data); err == nil {
		t.Fatal("a list property was accepted")
	}
}

func TestDeadLetterInfo(t *testing.T) {
	reason, desc, props, err := deadLetterInfo(&frames.Error{Condition: condDeadLetter, Info: map[frames.Symbol]any{
		"DeadLetterReason": "r", "DeadLetterErrorDescription": nil, "extra": int32(1),
	}})
	if err != nil || reason != "r" || desc != "" || len(props) != 1 || props["extra"] != int32(1) {
		t.Fatalf("deadLetterInfo = %q %q %v %v", reason, desc, props, err)
	}
	reason, desc, props, err = deadLetterInfo(&frames.Error{Condition: "amqp:internal-error", Description: "boom"})
	if err != nil || reason != "amqp:internal-error" || desc != "boom" || props != nil {
		t.Fatalf("deadLetterInfo(other) = %q %q %v %v", reason, desc, props, err)
	}
	if r, d, p, err := deadLetterInfo(nil); r != "" || d != "" || p != nil || err != nil {
		t.Fatal("deadLetterInfo(nil)")
	}
}

func TestBodyReaders(t *testing.T) {
	raw, err := frames.AppendValueSection(nil, encoding.Map{
		{Key: "lock-tokens", Value: []any{encoding.UUID{1}, "00000000-0000-0000-0000-000000000002"}},
		{Key: encoding.Symbol("sequence-numbers"), Value: []int32{1, 2}},
		{Key: "n", Value: uint32(7)},
		{Key: "s", Value: encoding.Symbol("sym")},
		{Key: "props", Value: map[string]any{"a": int64(1)}},
		{Key: "null", Value: nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := requestBody(&frames.Message{RawBody: raw})
	if err != nil {
		t.Fatal(err)
	}
	toks, err := b.uuids("lock-tokens")
	if err != nil || len(toks) != 2 || toks[0] != (uuid.UUID{1}) || toks[1][15] != 2 {
		t.Fatalf("uuids = %v, %v", toks, err)
	}
	seqs, err := b.int64s("sequence-numbers")
	if err != nil || len(seqs) != 2 || seqs[1] != 2 {
		t.Fatalf("int64s = %v, %v", seqs, err)
	}
	if n, ok, err := b.integer("n"); n != 7 || !ok || err != nil {
		t.Fatalf("integer = %v %v %v", n, ok, err)
	}
	if s, err := b.str("s"); s != "sym" || err != nil {
		t.Fatalf("str = %q %v", s, err)
	}
	if p, err := b.props("props"); err != nil || p["a"] != int64(1) {
		t.Fatalf("props = %v %v", p, err)
	}
	if _, ok, _ := b.integer("null"); ok {
		t.Fatal("a null field counts as given")
	}
	if _, err := b.int64s("missing"); err == nil {
		t.Fatal("missing field accepted")
	}
	if _, err := b.uuids("n"); err == nil {
		t.Fatal("an integer accepted as lock tokens")
	}
	if _, err := requestBody(&frames.Message{RawBody: frames.AppendDataSection(nil, []byte("x"))}); err == nil {
		t.Fatal("a data body accepted as a request")
	}
}

// A receive link detached because its entity moved or the database is
// out of reach is detach-forced, which every SDK recovers by attaching
// again; server-busy would make the Go SDK's message releaser loop on the
// dead link. Other conditions stay as classify made them.
func TestDetachedCondition(t *testing.T) {
	for _, tc := range []struct {
		err  error
		cond frames.Symbol
	}{
		{broker.ErrMoved, frames.ErrCondDetachForced},
		{broker.ErrStoreUnavailable, frames.ErrCondDetachForced},
		{broker.ErrNotFound, frames.ErrCondNotFound},
		{broker.ErrEntityDisabled, condEntityDisabled},
	} {
		cond, status := classify(tc.err)
		if f := detached(failure{cond: cond, status: status}); f.cond != tc.cond {
			t.Errorf("detached(%v) = %s, want %s", tc.err, f.cond, tc.cond)
		}
	}
}
