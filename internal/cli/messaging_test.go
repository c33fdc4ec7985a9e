package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// sdkClient is an SDK client of b for checking what the commands did.
func (b *testBroker) sdkClient() *azservicebus.Client {
	b.t.Helper()
	c, err := azservicebus.NewClientFromConnectionString(b.cs, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// sdkPeek peeks up to 100 messages of queue (or its sub-queue) with the SDK.
func (b *testBroker) sdkPeek(queue string, sub azservicebus.SubQueue) []*azservicebus.ReceivedMessage {
	b.t.Helper()
	r, err := b.sdkClient().NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{SubQueue: sub})
	if err != nil {
		b.t.Fatal(err)
	}
	defer r.Close(context.Background())
	msgs, err := r.PeekMessages(context.Background(), 100, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return msgs
}

func (b *testBroker) counts(queue string) queueRuntime {
	b.t.Helper()
	v := decode[queueView](b.t, b.run("queue", "show", queue, "--json").ok(b.t))
	return *v.Runtime
}

func bodyText(m jsonMessage) string {
	var s string
	if err := json.Unmarshal(m.Body, &s); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return s
}

func TestSendFromEverySource(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q").ok(t)
	dir := t.TempDir()

	// Argument, with properties and system fields.
	out := b.run("send", "q", "from arg", "-p", "n=5", "-p", "ok=true", "-p", "s=text", "-p", "small:int32=7",
		"-p", "f:double=1.5", "-p", "zip=007x", "--message-id", "m1", "--correlation-id", "c1", "--subject", "greet",
		"--content-type", "text/plain", "--session-id", "s1", "--ttl", "1h").ok(t)
	if out != "sent 1 message to q\n" {
		t.Errorf("send output %q", out)
	}
	// File: binary, byte for byte.
	bin := []byte{0, 1, 2, 0xff, 0xfe, '\n'}
	file := filepath.Join(dir, "body.bin")
	if err := os.WriteFile(file, bin, 0o600); err != nil {
		t.Fatal(err)
	}
	b.run("send", "q", "--file", file).ok(t)
	// Standard input.
	b.runIn("from stdin\n", "send", "q").ok(t)
	// JSON Lines, with flags as defaults.
	jsonl := filepath.Join(dir, "m.jsonl")
	lines := `{"body": "line one", "properties": {"k": 1, "x": 2.5, "t": "v"}, "messageId": "j1", "subject": "own"}

{"body": {"order": 7}, "contentType": "application/json"}
{"bodyBase64": "AAEC", "timeToLive": "30m"}
`
	if err := os.WriteFile(jsonl, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	res := decode[sendResult](t, b.run("send", "q", "--jsonl", jsonl, "--subject", "dflt", "-p", "k=0", "-p", "common=1", "--json").ok(t))
	if res.Sent != 3 || res.Entity != "q" {
		t.Errorf("jsonl result %+v", res)
	}

	msgs := decode[[]jsonMessage](t, b.run("peek", "q", "--json", "--count", "100").ok(t))
	if len(msgs) != 6 {
		t.Fatalf("peeked %d messages, want 6", len(msgs))
	}
	m := msgs[0]
	if bodyText(m) != "from arg" || *m.MessageID != "m1" || *m.CorrelationID != "c1" || *m.Subject != "greet" ||
		*m.ContentType != "text/plain" || *m.SessionID != "s1" || *m.TimeToLive != "1h" || *m.SequenceNumber != 1 {
		t.Errorf("message 1: %+v", m)
	}
	if fmt.Sprint(m.Properties) != "map[f:1.5 n:5 ok:true s:text small:7 zip:007x]" {
		t.Errorf("message 1 properties: %v", m.Properties)
	}
	if string(msgs[1].BodyBase64) != string(bin) || msgs[1].Body != nil {
		t.Errorf("file body: %+v", msgs[1])
	}
	if bodyText(msgs[2]) != "from stdin\n" {
		t.Errorf("stdin body: %q", bodyText(msgs[2]))
	}
	j1, j2, j3 := msgs[3], msgs[4], msgs[5]
	if bodyText(j1) != "line one" || *j1.MessageID != "j1" || *j1.Subject != "own" || fmt.Sprint(j1.Properties) != "map[common:1 k:1 t:v x:2.5]" {
		t.Errorf("jsonl 1: %+v %v", j1, j1.Properties)
	}
	if bodyText(j2) != `{"order":7}` || *j2.ContentType != "application/json" || *j2.Subject != "dflt" || fmt.Sprint(j2.Properties) != "map[common:1 k:0]" {
		t.Errorf("jsonl 2: %+v", j2)
	}
	if string(j3.BodyBase64) != "\x00\x01\x02" || *j3.TimeToLive != "30m" {
		t.Errorf("jsonl 3: %+v", j3)
	}

	// The property types on the wire: integers stay integers.
	raw := b.sdkPeek("q", 0)
	want := map[string]any{"n": int64(5), "ok": true, "s": "text", "small": int32(7), "f": 1.5, "zip": "007x"}
	for k, v := range want {
		if got := raw[0].ApplicationProperties[k]; got != v {
			t.Errorf("property %s = %#v (%T), want %#v (%T)", k, got, got, v, v)
		}
	}
	if got := raw[3].ApplicationProperties["k"]; got != int64(1) {
		t.Errorf("jsonl property k = %#v (%T), want int64", got, got)
	}

	// The table form.
	text := b.run("peek", "q").ok(t)
	for _, s := range []string{"SEQ", "from arg", "n=5", `from stdin\n`, "(6 bytes of binary)"} {
		if !strings.Contains(text, s) {
			t.Errorf("peek table lacks %q:\n%s", s, text)
		}
	}
	// --from and --count.
	msgs = decode[[]jsonMessage](t, b.run("peek", "q", "--json", "--from", "3", "--count", "2").ok(t))
	if len(msgs) != 2 || *msgs[0].SequenceNumber != 3 || *msgs[1].SequenceNumber != 4 {
		t.Errorf("peek --from 3 --count 2: %+v", msgs)
	}
	// Output of peek is input of send --jsonl.
	var sb strings.Builder
	for _, m := range decode[[]jsonMessage](t, b.run("peek", "q", "--json", "--count", "100").ok(t)) {
		line, _ := json.Marshal(m)
		sb.Write(line)
		sb.WriteByte('\n')
	}
	b.run("queue", "create", "copy").ok(t)
	b.runIn(sb.String(), "send", "copy", "--jsonl", "-").ok(t)
	orig, cp := b.sdkPeek("q", 0), b.sdkPeek("copy", 0)
	if len(cp) != len(orig) {
		t.Fatalf("copied %d messages, want %d", len(cp), len(orig))
	}
	for i := range orig {
		// (The SDK gives a batched message without a MessageId a random one.)
		if string(orig[i].Body) != string(cp[i].Body) || (orig[i].MessageID != "" && orig[i].MessageID != cp[i].MessageID) ||
			fmt.Sprint(orig[i].ApplicationProperties) != fmt.Sprint(cp[i].ApplicationProperties) {
			t.Errorf("copy %d differs:\n%+v\n%+v", i, orig[i], cp[i])
		}
	}
}

func TestSendSchedule(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q").ok(t)
	res := decode[sendResult](t, b.run("send", "q", "later", "--schedule", "1h", "--json").ok(t))
	if len(res.SequenceNumbers) != 1 || res.Sent != 1 {
		t.Fatalf("schedule result %+v", res)
	}
	at := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	out := b.run("send", "q", "even later", "--schedule", at).ok(t)
	if !strings.HasPrefix(out, "scheduled 1 message to q (sequence number ") {
		t.Errorf("schedule output %q", out)
	}
	msgs := decode[[]jsonMessage](t, b.run("peek", "q", "--json").ok(t))
	if len(msgs) != 2 || msgs[0].State != "Scheduled" || msgs[0].ScheduledEnqueueTime == nil ||
		msgs[0].ScheduledEnqueueTime.Before(time.Now().Add(59*time.Minute)) {
		t.Errorf("scheduled messages: %+v", msgs)
	}
	if c := b.counts("q"); c.ScheduledMessageCount != 2 || c.ActiveMessageCount != 0 {
		t.Errorf("counts %+v", c)
	}
}

func TestSendManyInBatches(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q").ok(t)
	const n = 1500
	var sb strings.Builder
	body := strings.Repeat("x", 1000)
	for i := range n {
		fmt.Fprintf(&sb, `{"body": "%d %s", "properties": {"i": %d}}`+"\n", i, body, i)
	}
	out := b.runIn(sb.String(), "send", "q", "--jsonl", "-").ok(t)
	if out != fmt.Sprintf("sent %d messages to q\n", n) {
		t.Errorf("output %q", out)
	}
	if c := b.counts("q"); c.ActiveMessageCount != n {
		t.Errorf("active = %d, want %d", c.ActiveMessageCount, n)
	}
	msgs := decode[[]jsonMessage](t, b.run("peek", "q", "--json", "--from", "1000", "--count", "1").ok(t))
	if len(msgs) != 1 || !strings.HasPrefix(bodyText(msgs[0]), "999 ") {
		t.Errorf("message 1000: %+v", msgs)
	}
}

func TestSendErrors(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q").ok(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"body\": \"ok\"}\n{\"bdy\": \"typo\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.run("send", "q", "--jsonl", bad).fails(t, ExitUsage, "line 2", "bdy")
	b.runIn(`{"bodyValue": 5}`, "send", "q", "--jsonl", "-").fails(t, ExitUsage, "line 1", "bodyValue")
	b.run("send", "q", "body", "--file", "x").fails(t, ExitUsage, "give the body once")
	b.run("send", "q", "body", "-p", "novalue").fails(t, ExitUsage, "key=value")
	b.run("send", "q", "body", "-p", "n:int=x").fails(t, ExitUsage, "not a valid int")
	b.run("send", "q", "body", "--ttl", "soon").fails(t, ExitUsage, "--ttl")
	b.run("send", "q", "body", "--schedule", "tomorrowish").fails(t, ExitUsage, "--schedule")
	b.run("send", "q", "--file", filepath.Join(dir, "missing")).fails(t, ExitUsage, "--file")
	b.run("send").fails(t, ExitUsage, "queue or topic name")
	b.run("send", "nope", "x").fails(t, ExitNotFound, `queue or topic "nope" not found`)
	b.run("send", "t/Subscriptions/s", "x").fails(t, ExitUsage, "cannot send to subscription", `send to its topic "t"`)
	if c := b.counts("q"); c.ActiveMessageCount != 0 {
		t.Errorf("a failed send sent %d messages", c.ActiveMessageCount)
	}
	b.run("queue", "update", "q", "--status", "SendDisabled").ok(t)
	b.run("send", "q", "x").fails(t, ExitFailure, "q")
}

func TestReceiveSettlements(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q", "--max-delivery-count", "5").ok(t)
	for i := 1; i <= 6; i++ {
		b.run("send", "q", fmt.Sprintf("m%d", i)).ok(t)
	}

	// complete: gone.
	got := decode[[]jsonMessage](t, b.run("receive", "q", "--json").ok(t))
	if len(got) != 1 || bodyText(got[0]) != "m1" || got[0].Settled != "completed" {
		t.Fatalf("complete: %+v", got)
	}
	// abandon: back, delivery count up; asking for more than there are
	// must not receive the abandoned ones again.
	got = decode[[]jsonMessage](t, b.run("receive", "q", "--settle", "abandon", "--count", "50", "--wait", "300ms", "--json").ok(t))
	if len(got) != 5 || got[0].Settled != "abandoned" {
		t.Fatalf("abandon: %d messages %+v", len(got), got)
	}
	peek := decode[[]jsonMessage](t, b.run("peek", "q", "--json").ok(t))
	if len(peek) != 5 || *peek[0].DeliveryCount != *got[0].DeliveryCount+1 {
		t.Errorf("after abandon: %+v", peek)
	}
	// deadletter, with reason and description.
	b.run("receive", "q", "--settle", "deadletter", "--reason", "Poison", "--description", "bad schema").ok(t)
	dlq := decode[[]jsonMessage](t, b.run("peek", "q", "--dlq", "--json").ok(t))
	if len(dlq) != 1 || bodyText(dlq[0]) != "m2" || *dlq[0].DeadLetterReason != "Poison" || *dlq[0].DeadLetterErrorDescription != "bad schema" {
		t.Errorf("dead-lettered: %+v", dlq)
	}
	text := b.run("peek", "q", "--dlq").ok(t)
	if !strings.Contains(text, "REASON") || !strings.Contains(text, "Poison") {
		t.Errorf("dlq table:\n%s", text)
	}
	// defer, then receive by sequence number.
	got = decode[[]jsonMessage](t, b.run("receive", "q", "--settle", "defer", "--json").ok(t))
	if len(got) != 1 || got[0].Settled != "deferred" {
		t.Fatalf("defer: %+v", got)
	}
	seq := fmt.Sprint(*got[0].SequenceNumber)
	peek = decode[[]jsonMessage](t, b.run("peek", "q", "--json", "--from", seq, "--count", "1").ok(t))
	if peek[0].State != "Deferred" {
		t.Errorf("state after defer: %+v", peek[0])
	}
	got = decode[[]jsonMessage](t, b.run("receive", "q", "--deferred", seq, "--json").ok(t))
	if len(got) != 1 || bodyText(got[0]) != "m3" || got[0].Settled != "completed" {
		t.Errorf("receive --deferred: %+v", got)
	}
	b.run("receive", "q", "--deferred", seq).fails(t, ExitNotFound, "no deferred message with sequence number "+seq)
	// receiveanddelete.
	got = decode[[]jsonMessage](t, b.run("receive", "q", "--mode", "receiveanddelete", "--count", "2", "--json").ok(t))
	if len(got) != 2 || bodyText(got[0]) != "m4" || got[0].Settled != "deleted" {
		t.Errorf("receiveanddelete: %+v", got)
	}
	// From the dead-letter queue.
	got = decode[[]jsonMessage](t, b.run("receive", "q", "--dlq", "--json").ok(t))
	if len(got) != 1 || bodyText(got[0]) != "m2" {
		t.Errorf("receive --dlq: %+v", got)
	}
	if c := b.counts("q"); c.ActiveMessageCount != 1 || c.DeadLetterMessageCount != 0 {
		t.Errorf("counts at the end: %+v", c)
	}
	// Nothing there: exit 0, empty list.
	b.run("queue", "create", "empty").ok(t)
	r := b.run("receive", "empty", "--wait", "200ms", "--json")
	if r.ok(t) != "[]\n" {
		t.Errorf("empty receive printed %q", r.stdout)
	}
	if r := b.run("receive", "empty", "--wait", "200ms"); r.ok(t) != "" || !strings.Contains(r.stderr, "no messages") {
		t.Errorf("empty receive: %+v", r)
	}
}

func TestReceiveUsageErrors(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q").ok(t)
	for _, args := range [][]string{
		{"receive", "q", "--settle", "explode"},
		{"receive", "q", "--mode", "sometimes"},
		{"receive", "q", "--mode", "receiveanddelete", "--settle", "abandon"},
		{"receive", "q", "--reason", "x"},
		{"receive", "q", "--count", "0"},
		{"receive", "q", "--wait", "-1s"},
		{"receive", "q", "--dlq", "--transfer-dlq"},
		{"receive", "q", "--wait", "soon"},
		{"peek", "q", "--count", "0"},
		{"peek", "q", "--from", "x"},
		{"peek"},
		{"purge", "q", "extra"},
	} {
		if r := b.run(args...); r.code != ExitUsage {
			t.Errorf("%v: exit %d, want 2\n%s", args, r.code, r.stderr)
		}
	}
	b.run("peek", "nope").fails(t, ExitNotFound, `queue "nope" not found`)
	b.run("receive", "nope").fails(t, ExitNotFound, `queue "nope" not found`)
}

func TestPurge(t *testing.T) {
	b := startBroker(t, nil)
	b.run("queue", "create", "q").ok(t)
	var sb strings.Builder
	for i := range 250 {
		fmt.Fprintf(&sb, `{"body": "%d"}`+"\n", i)
	}
	b.runIn(sb.String(), "send", "q", "--jsonl", "-").ok(t)
	b.run("receive", "q", "--count", "3", "--settle", "deadletter").ok(t)
	b.run("send", "q", "scheduled", "--schedule", "1h").ok(t)

	if out := b.run("purge", "q").ok(t); out != "purged 247 messages from q\n" {
		t.Errorf("purge: %q", out)
	}
	res := decode[map[string]any](t, b.run("purge", "q", "--dlq", "--json").ok(t))
	if res["purged"] != 3.0 || res["entity"] != "q/$DeadLetterQueue" {
		t.Errorf("purge --dlq: %v", res)
	}
	if out := b.run("purge", "q").ok(t); out != "purged 0 messages from q\n" {
		t.Errorf("second purge: %q", out)
	}
	// Scheduled messages are not available, so not purged.
	if c := b.counts("q"); c.ActiveMessageCount != 0 || c.DeadLetterMessageCount != 0 || c.ScheduledMessageCount != 1 {
		t.Errorf("counts after purge: %+v", c)
	}
	b.run("purge", "nope").fails(t, ExitNotFound, `queue "nope" not found`)
}
