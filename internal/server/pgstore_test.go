package server

// The broker on the PostgreSQL store (--store postgres://…), driven by the
// official Go SDK: queues, a topic with filtered subscriptions, sessions,
// scheduled messages, and a restart that keeps everything.

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/busbarmq/busbar/internal/store/pgstore/pgtest"
)

// sdkClients connects the Go messaging and admin clients to s.
func sdkClients(t *testing.T, s *Server) (*azservicebus.Client, *admin.Client) {
	t.Helper()
	cs, adm := sasAdmin(t, s)
	client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	return client, adm
}

func bodies(ms []*azservicebus.ReceivedMessage) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Body))
	}
	slices.Sort(out)
	return out
}

// receiveN receives and completes n messages from r.
func receiveN(ctx context.Context, t *testing.T, r *azservicebus.Receiver, n int) []string {
	t.Helper()
	var got []*azservicebus.ReceivedMessage
	for len(got) < n {
		ms, err := r.ReceiveMessages(ctx, n-len(got), nil)
		if err != nil {
			t.Fatalf("receive: %v (after %d of %d)", err, len(got), n)
		}
		for _, m := range ms {
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatalf("complete: %v", err)
			}
		}
		got = append(got, ms...)
	}
	return bodies(got)
}

func TestPostgresStoreWithSDK(t *testing.T) {
	_, url := pgtest.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var o Options
	// With a password in the URL (the test server trusts every local
	// user, so it is not checked): it must not show in errors.
	o.Store = strings.Replace(url, "postgres://busbar@", "postgres://busbar:SECRET@", 1)
	s := start(t, o)
	client, adm := sdkClients(t, s)

	// A second process on the same database refuses to start (after
	// waiting for the first one's session to expire, which it does not),
	// saying why and without the password.
	o2 := o
	o2.AMQPAddr, o2.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	if s2, err := Start(sctx, o2); err == nil {
		stop(t, s2)
		t.Fatal("a second server started on the same database")
	} else if !strings.Contains(err.Error(), "another Busbar process") || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("second server: %v", err)
	}
	scancel()

	if _, err := adm.CreateQueue(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateQueue(ctx, "sessions", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{RequiresSession: to.Ptr(true)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, "events", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateSubscription(ctx, "events", "all", nil); err != nil {
		t.Fatal(err)
	}
	red := admin.SubscriptionProperties{DefaultRule: &admin.RuleProperties{Name: "red", Filter: &admin.SQLFilter{Expression: "color = 'red'"}}}
	if _, err := adm.CreateSubscription(ctx, "events", "red", &admin.CreateSubscriptionOptions{Properties: &red}); err != nil {
		t.Fatal(err)
	}

	// Queue: send, receive, complete; a large body goes to chunks.
	snd, _ := client.NewSender("orders", nil)
	big := make([]byte, 200<<10)
	for _, m := range []*azservicebus.Message{{Body: []byte("one")}, {Body: []byte("two")}, {Body: big}} {
		if err := snd.SendMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	rcv, _ := client.NewReceiverForQueue("orders", nil)
	if got := receiveN(ctx, t, rcv, 3); len(got) != 3 || got[1] != "one" || got[2] != "two" || len(got[0]) != len(big) {
		t.Fatalf("queue: got %d messages", len(got))
	}

	// Topic: the filter picks.
	tsnd, _ := client.NewSender("events", nil)
	for _, c := range []string{"red", "blue"} {
		if err := tsnd.SendMessage(ctx, &azservicebus.Message{Body: []byte(c), ApplicationProperties: map[string]any{"color": c}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	all, _ := client.NewReceiverForSubscription("events", "all", nil)
	if got := receiveN(ctx, t, all, 2); !slices.Equal(got, []string{"blue", "red"}) {
		t.Fatalf("subscription all: %v", got)
	}
	reds, _ := client.NewReceiverForSubscription("events", "red", nil)
	if got := receiveN(ctx, t, reds, 1); !slices.Equal(got, []string{"red"}) {
		t.Fatalf("subscription red: %v", got)
	}

	// Sessions, with session state.
	ssnd, _ := client.NewSender("sessions", nil)
	for _, b := range []string{"a", "b"} {
		if err := ssnd.SendMessage(ctx, &azservicebus.Message{Body: []byte(b), SessionID: to.Ptr("s1")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	sr, err := client.AcceptNextSessionForQueue(ctx, "sessions", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sr.SetSessionState(ctx, []byte("state-1"), nil); err != nil {
		t.Fatal(err)
	}
	var sgot []*azservicebus.ReceivedMessage
	for len(sgot) < 2 {
		ms, err := sr.ReceiveMessages(ctx, 2-len(sgot), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if err := sr.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
		sgot = append(sgot, ms...)
	}
	if got := bodies(sgot); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("session: %v", got)
	}
	sr.Close(ctx)

	// Left for after the restart: two messages, one scheduled an hour
	// ahead, one session message and the session state.
	for _, b := range []string{"kept-1", "kept-2"} {
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(b)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := snd.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("later")}}, time.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	if err := ssnd.SendMessage(ctx, &azservicebus.Message{Body: []byte("c"), SessionID: to.Ptr("s1")}, nil); err != nil {
		t.Fatal(err)
	}
	client.Close(ctx)
	stop(t, s)
	// Everything is in PostgreSQL: 5 entities and the namespace's own.
	if n, err := pgtest.QueryInt(url, `SELECT count(*) FROM bb_entity`); err != nil || n != 6 {
		t.Fatalf("%d entities in bb_entity, want 6: %v", n, err)
	}
	// One unit per queue and topic (and the namespace's entity): the
	// subscriptions are in their topic's.
	if n, err := pgtest.QueryInt(url, `SELECT count(*) FROM bb_unit`); err != nil || n != 4 {
		t.Fatalf("%d units, want 4: %v", n, err)
	}
	if n, err := pgtest.QueryInt(url, `SELECT count(*) FROM bb_msg`); err != nil || n != 4 {
		t.Fatalf("%d messages in bb_msg, want 4: %v", n, err)
	}

	s = start(t, o)
	t.Cleanup(func() { stop(t, s) })
	client, _ = sdkClients(t, s)
	defer client.Close(ctx)
	rcv, _ = client.NewReceiverForQueue("orders", nil)
	if got := receiveN(ctx, t, rcv, 2); !slices.Equal(got, []string{"kept-1", "kept-2"}) {
		t.Fatalf("after restart: %v", got)
	}
	peek, err := rcv.PeekMessages(ctx, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(peek) != 1 || string(peek[0].Body) != "later" || peek[0].State != azservicebus.MessageStateScheduled {
		t.Fatalf("after restart, peek: %d messages, want the scheduled one", len(peek))
	}
	sr, err = client.AcceptSessionForQueue(ctx, "sessions", "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close(ctx)
	if st, err := sr.GetSessionState(ctx, nil); err != nil || string(st) != "state-1" {
		t.Fatalf("session state after restart: %q, %v", st, err)
	}
	ms, err := sr.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "c" {
		t.Fatalf("session message after restart: %v, %v", ms, err)
	}
}
