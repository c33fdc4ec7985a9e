package cli

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/busbarmq/busbar/internal/message"
)

// storedMessages are the messages the broker holds for path, as stored.
func (b *testBroker) storedMessages(path string) []*message.Message {
	b.t.Helper()
	ds, err := b.srv.Broker().Peek(context.Background(), path, 0, 100)
	if err != nil {
		b.t.Fatalf("Peek %s: %v", path, err)
	}
	var out []*message.Message
	for _, d := range ds {
		out = append(out, d.Message)
	}
	return out
}

// sendRaw sends AMQP messages with the SDK.
func (b *testBroker) sendRaw(queue string, msgs ...*azservicebus.AMQPAnnotatedMessage) {
	b.t.Helper()
	s, err := b.sdkClient().NewSender(queue, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	defer s.Close(context.Background())
	for _, m := range msgs {
		if err := s.SendAMQPAnnotatedMessage(context.Background(), m, nil); err != nil {
			b.t.Fatal(err)
		}
	}
}

// richMessage has every section and property a sender can set, with
// application properties of many AMQP types and a binary body in two
// data sections.
func richMessage(i int) *azservicebus.AMQPAnnotatedMessage {
	created := time.UnixMilli(1_700_000_000_123).UTC()
	return &azservicebus.AMQPAnnotatedMessage{
		Header: &azservicebus.AMQPAnnotatedMessageHeader{Durable: true, Priority: 7, TTL: time.Hour},
		Properties: &azservicebus.AMQPAnnotatedMessageProperties{
			MessageID:       fmt.Sprintf("rich-%d", i),
			CorrelationID:   amqp.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
			UserID:          []byte("user"),
			To:              to.Ptr("somewhere"),
			Subject:         to.Ptr("subject"),
			ReplyTo:         to.Ptr("replies"),
			ContentType:     to.Ptr("application/octet-stream"),
			ContentEncoding: to.Ptr("identity"),
			CreationTime:    &created,
			ReplyToGroupID:  to.Ptr("reply-session"),
		},
		MessageAnnotations: map[any]any{"x-opt-partition-key": "pk", "x-custom": int64(42)},
		ApplicationProperties: map[string]any{
			"i":      int64(i),
			"int32":  int32(-5),
			"int16":  int16(3),
			"uint8":  uint8(200),
			"uint64": uint64(1 << 63),
			"bool":   true,
			"double": 2.5,
			"float":  float32(0.25),
			"string": "héllo",
			"empty":  "",
			"time":   created,
			"binary": []byte{0, 0xff},
			"uuid":   amqp.UUID{0xaa},
			"null":   nil,
		},
		Body: azservicebus.AMQPAnnotatedMessageBody{Data: [][]byte{{0, 1, 2, 0xff}, []byte("second section")}},
	}
}

func TestDLQResubmitPreservesMessages(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q").ok(t)
	b.sendRaw("q", richMessage(1), richMessage(2))
	before := b.storedMessages("q")
	if len(before) != 2 {
		t.Fatalf("stored %d messages", len(before))
	}

	b.run("receive", "q", "--count", "2", "--settle", "deadletter", "--reason", "Poison", "--description", "bad").ok(t)
	if c := b.counts("q"); c.DeadLetterMessageCount != 2 || c.ActiveMessageCount != 0 {
		t.Fatalf("counts after dead-lettering: %+v", c)
	}
	res := decode[resubmitResult](t, b.run("dlq", "resubmit", "q", "--json").ok(t))
	if res.Resubmitted != 2 || res.Skipped != 0 || res.From != "q/$DeadLetterQueue" || res.To != "q" {
		t.Errorf("result %+v", res)
	}
	if c := b.counts("q"); c.DeadLetterMessageCount != 0 || c.ActiveMessageCount != 2 {
		t.Fatalf("counts after resubmit: %+v", c)
	}

	// What the broker stores for each copy is what the sender sent: the
	// body sections byte for byte, every property with its type, the
	// header and the sender's annotations.
	after := b.storedMessages("q")
	if len(after) != 2 {
		t.Fatalf("stored %d messages after resubmit", len(after))
	}
	for i := range before {
		if !reflect.DeepEqual(before[i], after[i]) {
			t.Errorf("message %d changed:\nbefore %#v\nafter  %#v", i+1, before[i], after[i])
		}
	}
	// And a receiver sees no dead-letter properties.
	for _, m := range b.sdkPeek("q", 0) {
		if m.DeadLetterReason != nil || m.DeadLetterErrorDescription != nil || m.DeliveryCount != 1 {
			t.Errorf("resubmitted message still looks dead-lettered: %+v", m)
		}
	}
}

func TestDLQResubmitSelection(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q", "--max-delivery-count", "1").ok(t)
	b.run("queue", "create", "retry").ok(t)
	for i := 1; i <= 6; i++ {
		b.run("send", "q", fmt.Sprintf("m%d", i), "-p", fmt.Sprintf("n=%d", i), "-p", "region="+map[bool]string{true: "eu", false: "us"}[i%2 == 0]).ok(t)
	}
	// m1, m2: MaxDeliveryCountExceeded (abandoned once); m3..m6: Poison.
	b.run("receive", "q", "--count", "2", "--settle", "abandon").ok(t)
	b.run("receive", "q", "--count", "4", "--settle", "deadletter", "--reason", "Poison").ok(t)
	if c := b.counts("q"); c.DeadLetterMessageCount != 6 {
		t.Fatalf("dead-lettered %d, want 6", c.DeadLetterMessageCount)
	}

	out := b.run("dlq", "resubmit", "q", "--reason", "MaxDeliveryCountExceeded").ok(t)
	if out != "resubmitted 2 messages from q/$DeadLetterQueue to q\nleft 4 messages in the dead-letter queue: not selected by --reason/--filter\n" {
		t.Errorf("output %q", out)
	}
	// The messages left behind are unlocked at once: the next run sees them.
	res := decode[resubmitResult](t, b.run("dlq", "resubmit", "q", "--filter", "region = 'eu' AND n > 2", "--to", "retry", "--json").ok(t))
	if res.Resubmitted != 2 || res.Skipped != 2 || res.To != "retry" {
		t.Errorf("filter result %+v", res)
	}
	got := decode[[]jsonMessage](t, b.run("peek", "retry", "--json").ok(t))
	if len(got) != 2 || bodyText(got[0]) != "m4" || bodyText(got[1]) != "m6" {
		t.Errorf("retry queue: %+v", got)
	}
	res = decode[resubmitResult](t, b.run("dlq", "resubmit", "q", "--count", "1", "--json").ok(t))
	if res.Resubmitted != 1 {
		t.Errorf("--count 1: %+v", res)
	}
	if c := b.counts("q"); c.DeadLetterMessageCount != 1 || c.ActiveMessageCount != 3 {
		t.Errorf("counts at the end: %+v", c)
	}
	b.run("dlq", "resubmit", "q", "--filter", "n = = 1").fails(t, ExitUsage, "--filter")
	b.run("dlq", "resubmit", "nope").fails(t, ExitNotFound, `queue "nope" not found`)
	b.run("dlq").fails(t, ExitUsage, "subcommand")
}

func TestDLQResubmitDuplicateDetection(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q", "--duplicate-detection", "--duplicate-window", "1h").ok(t)
	b.run("queue", "create", "plain").ok(t)
	b.run("send", "q", "with id", "--message-id", "m1").ok(t)
	// The broker gives a message sent without a MessageId one, as Service
	// Bus does, and detects duplicates of it too.
	b.run("send", "q", "without id").ok(t)
	b.run("receive", "q", "--count", "2", "--settle", "deadletter").ok(t)

	// The copies would be dropped as duplicates of the originals: they stay.
	res := decode[resubmitResult](t, b.run("dlq", "resubmit", "q", "--json").ok(t))
	if res.Resubmitted != 0 || res.HeldBack != 2 {
		t.Errorf("result %+v", res)
	}
	if c := b.counts("q"); c.DeadLetterMessageCount != 2 || c.ActiveMessageCount != 0 {
		t.Errorf("counts %+v", c)
	}
	dlq := decode[[]jsonMessage](t, b.run("peek", "q", "--dlq", "--json").ok(t))
	if len(dlq) != 2 || *dlq[0].MessageID != "m1" || dlq[1].MessageID == nil {
		t.Errorf("left in the DLQ: %+v", dlq)
	}
	// A target without duplicate detection takes them.
	res = decode[resubmitResult](t, b.run("dlq", "resubmit", "q", "--to", "plain", "--json").ok(t))
	if res.Resubmitted != 2 || res.HeldBack != 0 {
		t.Errorf("--to plain: %+v", res)
	}
	if c := b.counts("plain"); c.ActiveMessageCount != 2 {
		t.Errorf("plain counts %+v", c)
	}
}

func TestPeekShowsNonStringIDs(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q").ok(t)
	b.sendRaw("q", richMessage(1))
	msgs := decode[[]jsonMessage](t, b.run("peek", "q", "--json").ok(t))
	if len(msgs) != 1 || *msgs[0].MessageID != "rich-1" || *msgs[0].CorrelationID != "01020304-0506-0708-090a-0b0c0d0e0f10" {
		t.Errorf("ids: %+v", msgs)
	}
	if got := msgs[0].Properties["uuid"]; got != "aa000000-0000-0000-0000-000000000000" {
		t.Errorf("uuid property shown as %v", got)
	}
	if string(msgs[0].BodyBase64) != "\x00\x01\x02\xffsecond section" {
		t.Errorf("two data sections shown as %q / %s", msgs[0].BodyBase64, msgs[0].Body)
	}
}
