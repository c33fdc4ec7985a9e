package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"github.com/google/uuid"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
	"github.com/busbarmq/busbar/internal/history"
)

// historyOf GETs /$history/{entity}/messages?message-id=id.
func historyOf(t *testing.T, s *Server, entity, id string) (int, []history.Message) {
	t.Helper()
	code, body := adminJSON(t, s, http.MethodGet, "/$history/"+entity+"/messages?message-id="+url.QueryEscape(id), "")
	if code != http.StatusOK {
		return code, nil
	}
	var ans struct{ Messages []history.Message }
	if err := json.Unmarshal([]byte(body), &ans); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return code, ans.Messages
}

func eventKinds(m history.Message) string {
	var ks []string
	for _, ev := range m.Events {
		ks = append(ks, ev.Kind)
	}
	return strings.Join(ks, " ")
}

// TestHistoryGoSDK: a message's life through the official Go SDK — send,
// receive, abandon, receive, dead-letter; auto-forwarding; expiry on the
// test clock — read back through GET /$history.
func TestHistoryGoSDK(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true, TestClock: true, History: "on", HistoryWindow: 24 * time.Hour}})
	t.Cleanup(func() { stop(t, s) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	client, err := azservicebus.NewClientFromConnectionString(connectionString(s), fastRetries)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	queue := func(name string, set func(*broker.QueueProperties)) {
		t.Helper()
		p := broker.DefaultQueueProperties()
		set(&p)
		if _, err := s.Broker().CreateQueue(name, p); err != nil {
			t.Fatal(err)
		}
	}
	send := func(q string, m *azservicebus.Message) {
		t.Helper()
		snd, err := client.NewSender(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer snd.Close(ctx)
		if err := snd.SendMessage(ctx, m, nil); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	id := func(s string) *string { return &s }

	t.Run("abandon then dead-letter", func(t *testing.T) {
		queue("orders", func(p *broker.QueueProperties) {})
		send("orders", &azservicebus.Message{MessageID: id("order-1"), Body: []byte("x")})
		r, err := client.NewReceiverForQueue("orders", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		receive := func() *azservicebus.ReceivedMessage {
			ms, err := r.ReceiveMessages(ctx, 1, nil)
			if err != nil || len(ms) != 1 {
				t.Fatalf("receive: %d, %v", len(ms), err)
			}
			return ms[0]
		}
		m1 := receive()
		if err := r.AbandonMessage(ctx, m1, nil); err != nil {
			t.Fatal(err)
		}
		m2 := receive()
		if err := r.DeadLetterMessage(ctx, m2, &azservicebus.DeadLetterOptions{Reason: id("Unprocessable"), ErrorDescription: id("no such customer")}); err != nil {
			t.Fatal(err)
		}
		_, ms := historyOf(t, s, "orders", "order-1")
		if len(ms) != 1 {
			t.Fatalf("histories: %+v", ms)
		}
		h := ms[0]
		if got, want := eventKinds(h), "enqueued delivered abandoned delivered dead-lettered"; got != want {
			t.Fatalf("events %q, want %q", got, want)
		}
		ev := h.Events
		if h.SequenceNumber != *m1.SequenceNumber || h.MessageID != "order-1" {
			t.Errorf("message %d %q", h.SequenceNumber, h.MessageID)
		}
		sender, receiver := ev[0].Link, ev[1].Link
		if !strings.HasPrefix(sender, "link ") || !strings.Contains(sender, " on connection ") ||
			!strings.HasPrefix(receiver, "link ") || sender == receiver || ev[3].Link != receiver {
			t.Errorf("links: sender %q, receiver %q then %q", sender, receiver, ev[3].Link)
		}
		tok1, tok2 := uuid.UUID(m1.LockToken).String(), uuid.UUID(m2.LockToken).String()
		if ev[1].LockToken != tok1 || ev[2].LockToken != tok1 || ev[3].LockToken != tok2 || ev[4].LockToken != tok2 {
			t.Errorf("lock tokens %s %s %s %s, want %s then %s", ev[1].LockToken, ev[2].LockToken, ev[3].LockToken, ev[4].LockToken, tok1, tok2)
		}
		if ev[1].LockedUntil == nil || !ev[1].LockedUntil.Truncate(time.Millisecond).Equal(*m1.LockedUntil) || ev[3].DeliveryCount != 2 {
			t.Errorf("delivery: %+v (SDK locked until %v)", ev[1], m1.LockedUntil)
		}
		if ev[4].MovedTo != "$DeadLetterQueue" || ev[4].Reason != "Unprocessable" || ev[4].Description != "no such customer" {
			t.Errorf("dead-letter: %+v", ev[4])
		}
		// The same by sequence number.
		code, body := adminJSON(t, s, http.MethodGet, "/$history/orders/messages/"+strconv.FormatInt(*m1.SequenceNumber, 10), "")
		if code != http.StatusOK || !strings.Contains(body, `"dead-lettered"`) {
			t.Errorf("by sequence number: %d %s", code, body)
		}
	})

	t.Run("forwarding hop", func(t *testing.T) {
		queue("dst", func(p *broker.QueueProperties) {})
		queue("src", func(p *broker.QueueProperties) { p.ForwardTo = "dst" })
		send("src", &azservicebus.Message{MessageID: id("hop-1"), Body: []byte("x")})
		var ms []history.Message
		eventually(t, "the forward", func() bool {
			_, ms = historyOf(t, s, "src", "hop-1")
			return len(ms) == 2
		})
		if eventKinds(ms[0]) != "enqueued forwarded" || ms[0].Events[1].To != "dst" || ms[0].Events[1].PeerSeq != ms[1].SequenceNumber {
			t.Errorf("source: %+v", ms[0])
		}
		if ms[1].Entity != "dst" || eventKinds(ms[1]) != "enqueued" || ms[1].Events[0].From != "src" {
			t.Errorf("destination: %+v", ms[1])
		}
	})

	t.Run("expiry on the test clock", func(t *testing.T) {
		queue("ttl", func(p *broker.QueueProperties) { p.DeadLetteringOnMessageExpiration = true })
		ttl := time.Hour
		send("ttl", &azservicebus.Message{MessageID: id("ttl-1"), Body: []byte("x"), TimeToLive: &ttl})
		moved := advanceClock(t, s, "2h")
		var ms []history.Message
		eventually(t, "the expiry", func() bool {
			_, ms = historyOf(t, s, "ttl", "ttl-1")
			return len(ms) == 1 && len(ms[0].Events) == 2
		})
		ev := ms[0].Events[1]
		if ev.Kind != "expired" || ev.Reason != "TTLExpiredException" || ev.MovedTo != "$DeadLetterQueue" || !near(ev.Time, moved) {
			t.Errorf("expiry %+v (test time %v)", ev, moved)
		}
		if !ms[0].Events[0].Time.Add(2 * time.Hour).After(moved.Add(-5 * time.Second)) {
			t.Errorf("enqueued at %v", ms[0].Events[0].Time)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for path, want := range map[string]int{
			"/$history/orders/messages/999":          http.StatusNotFound,
			"/$history/orders/messages/abc":          http.StatusBadRequest,
			"/$history/orders/messages":              http.StatusBadRequest,
			"/$history/orders":                       http.StatusBadRequest,
			"/$history/orders/messages?message-id=x": http.StatusNotFound,
		} {
			if code, body := adminJSON(t, s, http.MethodGet, path, ""); code != want {
				t.Errorf("GET %s = %d %s, want %d", path, code, body, want)
			}
		}
	})
}

// TestHistoryOff: without --history, /$history answers 404.
func TestHistoryOff(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true}})
	t.Cleanup(func() { stop(t, s) })
	if code, body := adminJSON(t, s, http.MethodGet, "/$history/q/messages/1", ""); code != http.StatusNotFound || !strings.Contains(body, "--history") {
		t.Errorf("GET /$history with histories off = %d %s", code, body)
	}
}

// TestHistoryLinkNames: with go-amqp the test names its links and its
// container, and the history shows exactly those names, and the lock
// token of the delivery tag (.NET byte order on the wire).
func TestHistoryLinkNames(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true, AllowAnyKey: true, History: "on"}})
	t.Cleanup(func() { stop(t, s) })
	if _, err := s.Broker().CreateQueue("q", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := goamqp.Dial(ctx, "amqp://"+s.AMQPAddr().String(), &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous(), ContainerID: "app-42"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, "q", &goamqp.SenderOptions{Name: "orders-sender"})
	if err != nil {
		t.Fatal(err)
	}
	m := goamqp.NewMessage([]byte("x"))
	m.Properties = &goamqp.MessageProperties{MessageID: "named-1"}
	if err := snd.Send(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	second := goamqp.ReceiverSettleModeSecond
	rcv, err := sess.NewReceiver(ctx, "q", &goamqp.ReceiverOptions{Name: "orders-receiver", SettlementMode: &second, Credit: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.AcceptMessage(ctx, got); err != nil {
		t.Fatal(err)
	}
	tag := got.DeliveryTag
	if len(tag) != 16 {
		t.Fatalf("delivery tag %x", tag)
	}
	tok := uuid.UUID{tag[3], tag[2], tag[1], tag[0], tag[5], tag[4], tag[7], tag[6],
		tag[8], tag[9], tag[10], tag[11], tag[12], tag[13], tag[14], tag[15]}.String()
	var ms []history.Message
	eventually(t, "the completion", func() bool {
		_, ms = historyOf(t, s, "q", "named-1")
		return len(ms) == 1 && len(ms[0].Events) == 3
	})
	ev := ms[0].Events
	if eventKinds(ms[0]) != "enqueued delivered completed" ||
		ev[0].Link != "link orders-sender on connection app-42" ||
		ev[1].Link != "link orders-receiver on connection app-42" ||
		ev[1].LockToken != tok || ev[2].LockToken != tok {
		t.Fatalf("history %+v (lock token %s)", ev, tok)
	}
}
