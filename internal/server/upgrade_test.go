package server

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/config"
)

// Upgrades never strand data: each directory under testdata/datadir-*
// was written by an earlier Busbar and must open in this one with
// everything in it. A change of the on-disk format adds a migration and a
// new fixture beside the old ones, which stay.
//
// -write-datadir DIR writes the data of fixtureV1 with this build into
// DIR (a new fixture: copy it under testdata/ with the date and commit in
// its test's comment).
var writeDatadir = flag.String("write-datadir", "", "write a data-directory fixture with this build into `DIR`")

// fixtureBody is the body of a large message of the fixture: n bytes of
// a pattern that shows a shifted or cut body.
func fixtureBody(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

// fixtureScheduled is when the fixture's scheduled message comes due.
var fixtureScheduled = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)

// writeFixtureV1 fills a broker on dir, through the Go SDK and its admin
// client, with a piece of each kind of state the file store keeps:
//
//   - queue "plain": a deferred message, then "one", "two", "three" (each
//     with its MessageID and an application property n), then a message
//     scheduled for 2099;
//   - queue "large" (messages of 4 KiB or more are blobs): a 20,000-byte
//     message dead-lettered with a reason (its head rewritten, the body
//     kept in its blob), then a 30,000-byte one;
//   - topic "t", subscription "red" whose rule is the SQL filter
//     color = 'red': "red-1" sent with color red, "blue-1" with blue;
//   - session queue "sq": "in-session" in session "a", whose state is
//     "state-a";
//   - the test clock an hour ahead (test-clock.json).
func writeFixtureV1(t *testing.T, dir string) {
	s := start(t, Options{Server: config.Server{DataDir: dir, TestClock: true, LargeMessageThreshold: 4 << 10}, SegmentSize: 64 << 10})
	defer stop(t, s)
	advanceClock(t, s, "1h")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, adm := sasAdmin(t, s)
	for _, q := range []struct {
		name    string
		session bool
	}{{"plain", false}, {"large", false}, {"sq", true}} {
		if _, err := adm.CreateQueue(ctx, q.name, &admin.CreateQueueOptions{Properties: &admin.QueueProperties{RequiresSession: &q.session}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := adm.CreateTopic(ctx, "t", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateSubscription(ctx, "t", "red", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
		DefaultRule: &admin.RuleProperties{Name: "red-only", Filter: &admin.SQLFilter{Expression: "color = 'red'"}}}}); err != nil {
		t.Fatal(err)
	}
	client, err := azservicebus.NewClientFromConnectionString(cs, fastRetries)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	send := func(to string, ms ...*azservicebus.Message) {
		t.Helper()
		snd, err := client.NewSender(to, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer snd.Close(ctx)
		for _, m := range ms {
			if err := snd.SendMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	receiveOne := func(queue string) (*azservicebus.Receiver, *azservicebus.ReceivedMessage) {
		t.Helper()
		rcv, err := client.NewReceiverForQueue(queue, nil)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := rcv.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(ms) != 1 {
			t.Fatalf("receive from %s: %v, %v", queue, ms, err)
		}
		return rcv, ms[0]
	}

	send("plain", &azservicebus.Message{Body: []byte("deferred"), MessageID: ptrTo("m-deferred")})
	rcv, m := receiveOne("plain")
	if err := rcv.DeferMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	rcv.Close(ctx)
	for i, body := range []string{"one", "two", "three"} {
		send("plain", &azservicebus.Message{Body: []byte(body), MessageID: ptrTo("m-" + body), ApplicationProperties: map[string]any{"n": int64(i + 1)}})
	}
	snd, err := client.NewSender("plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snd.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("scheduled")}}, fixtureScheduled, nil); err != nil {
		t.Fatal(err)
	}
	snd.Close(ctx)

	send("large", &azservicebus.Message{Body: fixtureBody('a', 20000)})
	rcv, m = receiveOne("large")
	if err := rcv.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: ptrTo("fixture"), ErrorDescription: ptrTo("dead-lettered by the fixture")}); err != nil {
		t.Fatal(err)
	}
	rcv.Close(ctx)
	send("large", &azservicebus.Message{Body: fixtureBody('b', 30000)})

	send("t", &azservicebus.Message{Body: []byte("red-1"), ApplicationProperties: map[string]any{"color": "red"}},
		&azservicebus.Message{Body: []byte("blue-1"), ApplicationProperties: map[string]any{"color": "blue"}})

	send("sq", &azservicebus.Message{Body: []byte("in-session"), SessionID: ptrTo("a")})
	sr, err := client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sr.SetSessionState(ctx, []byte("state-a"), nil); err != nil {
		t.Fatal(err)
	}
	sr.Close(ctx)
}

// checkFixtureV1 finds in the broker on dir what writeFixtureV1 left,
// takes it out, and leaves one new message and the scheduled one.
func checkFixtureV1(t *testing.T, dir string) {
	s := start(t, Options{Server: config.Server{DataDir: dir, TestClock: true}})
	defer stop(t, s)
	if code, body := adminJSON(t, s, http.MethodGet, "/$time", ""); code != http.StatusOK || !strings.Contains(body, `"offset":"1h0m0s"`) {
		t.Errorf("GET /$time = %d %s, want the saved offset of 1h", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, adm := sasAdmin(t, s)
	client, err := azservicebus.NewClientFromConnectionString(cs, fastRetries)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	receiver := func(queue string, o *azservicebus.ReceiverOptions) *azservicebus.Receiver {
		t.Helper()
		r, err := client.NewReceiverForQueue(queue, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(context.Background()) })
		return r
	}
	receive := func(r interface {
		ReceiveMessages(context.Context, int, *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	}, n int) []*azservicebus.ReceivedMessage {
		t.Helper()
		var got []*azservicebus.ReceivedMessage
		for len(got) < n {
			ms, err := r.ReceiveMessages(ctx, n-len(got), nil)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ms...)
		}
		return got
	}

	// plain: the peek shows every message in order, each in its state.
	plain := receiver("plain", nil)
	peeked, err := plain.PeekMessages(ctx, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, m := range peeked {
		seen = append(seen, fmt.Sprintf("%s:%d", m.Body, m.State))
	}
	if want := []string{
		fmt.Sprintf("deferred:%d", azservicebus.MessageStateDeferred),
		"one:0", "two:0", "three:0",
		fmt.Sprintf("scheduled:%d", azservicebus.MessageStateScheduled),
	}; !slices.Equal(seen, want) {
		t.Fatalf("plain peeks %v, want %v", seen, want)
	}
	deferred, err := plain.ReceiveDeferredMessages(ctx, []int64{*peeked[0].SequenceNumber}, nil)
	if err != nil || len(deferred) != 1 || string(deferred[0].Body) != "deferred" || deferred[0].MessageID != "m-deferred" {
		t.Fatalf("the deferred message: %v, %v", deferred, err)
	}
	if err := plain.CompleteMessage(ctx, deferred[0], nil); err != nil {
		t.Fatal(err)
	}
	for i, m := range receive(plain, 3) {
		want := []string{"one", "two", "three"}[i]
		if string(m.Body) != want || m.MessageID != "m-"+want || m.ApplicationProperties["n"] != int64(i+1) {
			t.Errorf("plain message %d: %q id %q properties %v", i, m.Body, m.MessageID, m.ApplicationProperties)
		}
		if err := plain.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}

	// large: the kept message whole, and the dead-lettered one with its
	// reason, both read from their blobs.
	large := receiver("large", nil)
	if m := receive(large, 1)[0]; !bytes.Equal(m.Body, fixtureBody('b', 30000)) {
		t.Errorf("the large message: %d bytes, not the body sent", len(m.Body))
	} else if err := large.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	dlq := receiver("large", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if m := receive(dlq, 1)[0]; !bytes.Equal(m.Body, fixtureBody('a', 20000)) || m.DeadLetterReason == nil || *m.DeadLetterReason != "fixture" ||
		m.DeadLetterErrorDescription == nil || *m.DeadLetterErrorDescription != "dead-lettered by the fixture" {
		t.Errorf("the dead-lettered large message: %d bytes, reason %v", len(m.Body), m.DeadLetterReason)
	} else if err := dlq.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}

	// t/red: its rule, and only the red message.
	rule, err := adm.GetRule(ctx, "t", "red", "red-only", nil)
	if err != nil || rule == nil {
		t.Fatalf("rule red-only: %v, %v", rule, err)
	}
	if f, ok := rule.Filter.(*admin.SQLFilter); !ok || f.Expression != "color = 'red'" {
		t.Errorf("rule red-only's filter %#v", rule.Filter)
	}
	sub, err := client.NewReceiverForSubscription("t", "red", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(context.Background())
	if ms, err := sub.PeekMessages(ctx, 10, nil); err != nil || len(ms) != 1 || string(ms[0].Body) != "red-1" {
		t.Errorf("subscription red peeks %v, %v; want red-1 only", ms, err)
	}

	// sq: the session's state and message.
	sr, err := client.AcceptSessionForQueue(ctx, "sq", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close(context.Background())
	if st, err := sr.GetSessionState(ctx, nil); err != nil || string(st) != "state-a" {
		t.Errorf("session a's state %q, %v", st, err)
	}
	if m := receive(sr, 1)[0]; string(m.Body) != "in-session" {
		t.Errorf("session a's message %q", m.Body)
	}

	// New data on top of the old.
	if err := sendTo(t, cs, fastRetries, "plain", "new"); err != nil {
		t.Fatal(err)
	}
}

// TestDataDirectoryFixtureV1: testdata/datadir-v1 was written by Busbar
// at 2026-11-27's main (commit d05dc07, file store format 1, with blobs,
// one of them dead-lettered, and the test clock's offset) by
// writeFixtureV1. It opens with everything in it; what the test adds is
// still there after a restart.
func TestDataDirectoryFixtureV1(t *testing.T) {
	if *writeDatadir != "" {
		writeFixtureV1(t, *writeDatadir)
		return
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "datadir-v1"))); err != nil {
		t.Fatal(err)
	}
	checkFixtureV1(t, dir)
	s := start(t, Options{Server: config.Server{DataDir: dir}})
	defer stop(t, s)
	wantBodies(t, "plain after a restart", peekAll(t, connectionString(s), fastRetries, "plain"), "scheduled", "new")
}
