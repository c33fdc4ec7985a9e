package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/config"
)

// moveClock POSTs to /$time/{op} and returns the test time it answers.
func moveClock(t *testing.T, s *Server, op, body string) time.Time {
	t.Helper()
	code, resp := adminJSON(t, s, http.MethodPost, "/$time/"+op, body)
	if code != http.StatusOK {
		t.Fatalf("POST /$time/%s %s = %d %s", op, body, code, resp)
	}
	var st struct{ Now, Offset string }
	if err := json.Unmarshal([]byte(resp), &st); err != nil {
		t.Fatal(err)
	}
	now, err := time.Parse(time.RFC3339Nano, st.Now)
	if err != nil {
		t.Fatal(err)
	}
	return now
}

func advanceClock(t *testing.T, s *Server, by string) time.Time {
	t.Helper()
	return moveClock(t, s, "advance", `{"by":"`+by+`"}`)
}

// eventually polls f every 20 ms for up to 10 s: the broker's timer loop
// acts on a clock move in its own goroutine, just after the move.
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if f() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// messageSource is a Receiver or a SessionReceiver.
type messageSource interface {
	ReceiveMessages(context.Context, int, *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}

func near(a, b time.Time) bool { d := a.Sub(b); return d < 5*time.Second && d > -5*time.Second }

// TestTestClockGoSDK moves a --test-clock broker's time through the admin
// API and watches each timer-driven behaviour through the official Go
// SDK, without waiting for any of those durations.
func TestTestClockGoSDK(t *testing.T) {
	s := start(t, Options{Server: config.Server{Memory: true, TestClock: true}})
	t.Cleanup(func() { stop(t, s) })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	client, err := azservicebus.NewClientFromConnectionString(connectionString(s), fastRetries)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	queue := func(t *testing.T, name string, set func(*broker.QueueProperties)) {
		t.Helper()
		p := broker.DefaultQueueProperties()
		set(&p)
		if _, err := s.Broker().CreateQueue(name, p); err != nil {
			t.Fatal(err)
		}
	}
	send := func(t *testing.T, q string, m *azservicebus.Message) {
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
	receive := func(t *testing.T, r messageSource) *azservicebus.ReceivedMessage {
		t.Helper()
		ms, err := r.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(ms) != 1 {
			t.Fatalf("receive: %d messages, %v", len(ms), err)
		}
		return ms[0]
	}
	// none checks that r gets nothing within a short real wait.
	none := func(t *testing.T, r *azservicebus.Receiver) {
		t.Helper()
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		ms, err := r.ReceiveMessages(short, 1, nil)
		if len(ms) != 0 {
			t.Fatalf("received %q too early", ms[0].Body)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	}

	t.Run("ttl dead-letters after advance", func(t *testing.T) {
		queue(t, "ttl", func(p *broker.QueueProperties) { p.DeadLetteringOnMessageExpiration = true })
		ttl := time.Hour
		send(t, "ttl", &azservicebus.Message{Body: []byte("short-lived"), TimeToLive: &ttl})
		moved := advanceClock(t, s, "2h")
		dlq, err := client.NewReceiverForQueue("ttl", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
		if err != nil {
			t.Fatal(err)
		}
		defer dlq.Close(ctx)
		m := receive(t, dlq)
		if string(m.Body) != "short-lived" || m.DeadLetterReason == nil || *m.DeadLetterReason != "TTLExpiredException" {
			t.Fatalf("dead-lettered %q, reason %v", m.Body, m.DeadLetterReason)
		}
		// The enqueued time is the test clock's, two hours behind it now.
		if m.EnqueuedTime == nil || !near(m.EnqueuedTime.Add(2*time.Hour), moved) {
			t.Fatalf("enqueued at %v, test time after the move %v", m.EnqueuedTime, moved)
		}
		if err := dlq.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("timestamps follow the test clock", func(t *testing.T) {
		queue(t, "stamps", func(p *broker.QueueProperties) { p.LockDuration = 5 * time.Minute })
		now := advanceClock(t, s, "24h")
		send(t, "stamps", &azservicebus.Message{Body: []byte("x")})
		r, err := client.NewReceiverForQueue("stamps", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		m := receive(t, r)
		if m.EnqueuedTime == nil || !near(*m.EnqueuedTime, now) || near(*m.EnqueuedTime, time.Now()) {
			t.Fatalf("enqueued at %v, want the test time %v", m.EnqueuedTime, now)
		}
		if m.LockedUntil == nil || !near(*m.LockedUntil, now.Add(5*time.Minute)) {
			t.Fatalf("locked until %v, want the test time + 5m (%v)", m.LockedUntil, now.Add(5*time.Minute))
		}
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("lock expires after advance", func(t *testing.T) {
		queue(t, "locks", func(p *broker.QueueProperties) { p.LockDuration = 5 * time.Minute })
		send(t, "locks", &azservicebus.Message{Body: []byte("locked")})
		r, err := client.NewReceiverForQueue("locks", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		m := receive(t, r)
		advanceClock(t, s, "6m")
		err = r.CompleteMessage(ctx, m, nil)
		var sbErr *azservicebus.Error
		if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
			t.Fatalf("complete after the lock expired = %v, want lock lost", err)
		}
		again := receive(t, r)
		if string(again.Body) != "locked" || again.DeliveryCount != 2 {
			t.Fatalf("redelivered %q with delivery count %d, want 2", again.Body, again.DeliveryCount)
		}
		if err := r.CompleteMessage(ctx, again, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("scheduled message appears after advance", func(t *testing.T) {
		queue(t, "sched", func(*broker.QueueProperties) {})
		snd, err := client.NewSender("sched", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer snd.Close(ctx)
		at := s.testClk.Now().Add(time.Hour)
		if _, err := snd.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("later")}}, at, nil); err != nil {
			t.Fatal(err)
		}
		r, err := client.NewReceiverForQueue("sched", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		none(t, r)
		advanceClock(t, s, "61m")
		m := receive(t, r)
		if string(m.Body) != "later" || m.EnqueuedTime == nil || !near(*m.EnqueuedTime, at) {
			t.Fatalf("got %q enqueued at %v, want the scheduled time %v", m.Body, m.EnqueuedTime, at)
		}
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("deferred message expires after advance", func(t *testing.T) {
		queue(t, "deferred", func(p *broker.QueueProperties) { p.DeadLetteringOnMessageExpiration = true })
		ttl := time.Hour
		send(t, "deferred", &azservicebus.Message{Body: []byte("put off"), TimeToLive: &ttl})
		r, err := client.NewReceiverForQueue("deferred", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		m := receive(t, r)
		if err := r.DeferMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		advanceClock(t, s, "2h")
		got, err := r.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
		if err == nil && len(got) != 0 {
			t.Fatalf("retrieved the expired deferred message %q", got[0].Body)
		}
		dlq, err := client.NewReceiverForQueue("deferred", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
		if err != nil {
			t.Fatal(err)
		}
		defer dlq.Close(ctx)
		d := receive(t, dlq)
		if string(d.Body) != "put off" {
			t.Fatalf("dead-lettered %q", d.Body)
		}
		if err := dlq.CompleteMessage(ctx, d, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("session lock expires after advance", func(t *testing.T) {
		queue(t, "sessions", func(p *broker.QueueProperties) {
			p.RequiresSession = true
			p.LockDuration = 5 * time.Minute
		})
		sid := "s1"
		send(t, "sessions", &azservicebus.Message{Body: []byte("in session"), SessionID: &sid})
		sr, err := client.AcceptSessionForQueue(ctx, "sessions", sid, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sr.Close(ctx)
		if lu := sr.LockedUntil(); !near(lu, s.testClk.Now().Add(5*time.Minute)) {
			t.Fatalf("session locked until %v, want the test time + 5m", lu)
		}
		m := receive(t, sr)
		advanceClock(t, s, "6m")
		// The SDK retries a settlement whose session lock is lost with a
		// fixed policy of its own (about 40 s) before reporting lock lost;
		// a short context is enough to see that it does not succeed.
		short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
		err = sr.CompleteMessage(short, m, nil)
		cancelShort()
		if err == nil {
			t.Fatal("completed a message whose session lock had expired")
		}
		// The lost session's receiver is closed (the SDK may have taken
		// the session again for it in recovering its link); another one
		// accepts the session and gets the message a second time.
		if err := sr.Close(ctx); err == nil || !strings.Contains(err.Error(), "session-lock-lost") {
			t.Fatalf("closing the lost session's receiver = %v, want its link's session-lock-lost", err)
		}
		sr2, err := client.AcceptSessionForQueue(ctx, "sessions", sid, nil)
		if err != nil {
			t.Fatalf("accept the expired session again: %v", err)
		}
		defer sr2.Close(ctx)
		again := receive(t, sr2)
		if again.DeliveryCount != 2 {
			t.Fatalf("delivery count %d, want 2", again.DeliveryCount)
		}
		if err := sr2.CompleteMessage(ctx, again, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("duplicate detection window", func(t *testing.T) {
		queue(t, "dedup", func(p *broker.QueueProperties) {
			p.RequiresDuplicateDetection = true
			p.DuplicateDetectionHistoryTimeWindow = 10 * time.Minute
		})
		id := "order-1"
		send(t, "dedup", &azservicebus.Message{Body: []byte("first"), MessageID: &id})
		send(t, "dedup", &azservicebus.Message{Body: []byte("duplicate"), MessageID: &id})
		advanceClock(t, s, "11m")
		send(t, "dedup", &azservicebus.Message{Body: []byte("after the window"), MessageID: &id})
		r, err := client.NewReceiverForQueue("dedup", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		var bodies []string
		for len(bodies) < 2 {
			bodies = append(bodies, string(receive(t, r).Body))
		}
		none(t, r)
		if strings.Join(bodies, ",") != "first,after the window" {
			t.Fatalf("received %q", bodies)
		}
	})

	t.Run("auto-delete on idle", func(t *testing.T) {
		queue(t, "idle", func(p *broker.QueueProperties) { p.AutoDeleteOnIdle = 10 * time.Minute })
		advanceClock(t, s, "5m")
		if _, err := s.Broker().GetQueue("idle"); err != nil {
			t.Fatalf("deleted before it was idle long enough: %v", err)
		}
		advanceClock(t, s, "6m")
		eventually(t, "the idle queue's deletion", func() bool {
			_, err := s.Broker().GetQueue("idle")
			return broker.KindOf(err) == broker.KindNotFound
		})
	})
}

// TestTestClockAdminAndHealth: /$time answers, refuses moving back, and
// /health reports the test clock; without --test-clock /$time is 404
// and /health says nothing of it.
func TestTestClockAdminAndHealth(t *testing.T) {
	var logs logBuffer
	s := start(t, Options{Server: config.Server{Memory: true, TestClock: true}, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	t.Cleanup(func() { stop(t, s) })
	if ready := logs.lines(t, "busbar ready"); len(ready) != 1 || ready[0]["test_clock"] != true {
		t.Fatalf("ready line %v, want test_clock=true", ready)
	}
	if len(logs.lines(t, "the test clock is on (--test-clock): clients with Manage rights can move this broker's time forward, expiring messages and locks; never use it in production")) != 1 {
		t.Fatal("no start-up warning about the test clock")
	}

	code, body := adminJSON(t, s, http.MethodGet, "/$time", "")
	if code != http.StatusOK || !strings.Contains(body, `"offset":"0s"`) {
		t.Fatalf("GET /$time = %d %s", code, body)
	}
	now := advanceClock(t, s, "90m")
	to := now.Add(24 * time.Hour).Truncate(time.Second)
	if got := moveClock(t, s, "set", `{"to":"`+to.Format(time.RFC3339)+`"}`); !got.Equal(to) {
		t.Fatalf("set answered %v, want %v", got, to)
	}
	for _, c := range []struct{ op, body, want string }{
		{"advance", `{"by":"-1m"}`, "only moves forward"},
		{"set", `{"to":"2001-01-01T00:00:00Z"}`, "only moves forward"},
		{"advance", `{"by":"soon"}`, "not a duration"},
		{"advance", `{}`, "names no duration"},
		{"set", `{"to":"tomorrow"}`, "not an RFC 3339 time"},
		{"advance", `{"by":"1000000h"}`, "100 years"},
		{"advance", `{"by":"1m","extra":1}`, "not the JSON expected"},
	} {
		code, body := adminJSON(t, s, http.MethodPost, "/$time/"+c.op, c.body)
		if code != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("POST /$time/%s %s = %d %s, want 400 with %q", c.op, c.body, code, body, c.want)
		}
	}
	if moves := logs.lines(t, "test clock moved"); len(moves) != 2 || moves[1]["level"] != "WARN" {
		t.Fatalf("clock moves logged: %v", moves)
	}
	if got := s.testClk.Now(); got.Before(to) || got.After(to.Add(time.Minute)) {
		t.Fatalf("refused moves changed the clock: %v", got)
	}
	if code, body := adminJSON(t, s, http.MethodPost, "/$time", `{}`); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /$time = %d %s", code, body)
	}

	code, body = get(t, "http://"+s.HTTPAddr().String()+"/health")
	var h struct {
		TestClock bool   `json:"testClock"`
		TestTime  string `json:"testTime"`
	}
	if err := json.Unmarshal([]byte(body), &h); err != nil || code != http.StatusOK || !h.TestClock {
		t.Fatalf("GET /health = %d %s", code, body)
	}
	if tt, err := time.Parse(time.RFC3339Nano, h.TestTime); err != nil || tt.Before(to) {
		t.Fatalf("/health testTime %q, want at or after %v", h.TestTime, to)
	}

	off := start(t, Options{Server: config.Server{Memory: true}})
	t.Cleanup(func() { stop(t, off) })
	if code, body := adminJSON(t, off, http.MethodGet, "/$time", ""); code != http.StatusNotFound || !strings.Contains(body, "--test-clock") {
		t.Fatalf("GET /$time without --test-clock = %d %s", code, body)
	}
	if _, body := get(t, "http://"+off.HTTPAddr().String()+"/health"); strings.Contains(body, "testClock") {
		t.Fatalf("/health without --test-clock mentions it: %s", body)
	}
}

// TestTestClockSurvivesRestart: the test clock's offset is kept in the
// data directory, so a broker restarted on it resumes the test time: a
// message scheduled an hour ahead by the test clock comes due an hour of
// test time later, not at the wall clock's hour. A move the directory
// cannot take fails and leaves the clock where it was; a damaged file
// stops the start with its name; a broker started without --test-clock
// says it ignores the offset.
func TestTestClockSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Server: config.Server{DataDir: dir, TestClock: true}}
	s := start(t, opts)
	now := advanceClock(t, s, "2h")
	if _, err := s.Broker().CreateQueue("q", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, err := azservicebus.NewClientFromConnectionString(connectionString(s), fastRetries)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := client.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	due := now.Add(time.Hour)
	if _, err := snd.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("due in an hour")}}, due, nil); err != nil {
		t.Fatal(err)
	}
	client.Close(context.Background())
	stop(t, s)

	s = start(t, opts)
	code, body := adminJSON(t, s, http.MethodGet, "/$time", "")
	if code != http.StatusOK || !strings.Contains(body, `"offset":"2h0m0s"`) {
		t.Fatalf("GET /$time after the restart = %d %s, want the offset of 2h", code, body)
	}
	if after := advanceClock(t, s, "61m"); after.Before(due) {
		t.Fatalf("test time %v after the restart and 61m, before %v", after, due)
	}
	client, err = azservicebus.NewClientFromConnectionString(connectionString(s), fastRetries)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	rcv, err := client.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	ms, err := rcv.ReceiveMessages(rctx, 1, nil)
	rcancel()
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "due in an hour" {
		t.Fatalf("the scheduled message after the restart: %v, %v", ms, err)
	}

	// A move the data directory cannot take is refused (a directory in
	// the way of the temporary file makes the write fail).
	blocker := filepath.Join(dir, testClockFile+".tmp")
	if err := os.Mkdir(blocker, 0o700); err != nil {
		t.Fatal(err)
	}
	before := s.testClk.Offset()
	code, body = adminJSON(t, s, http.MethodPost, "/$time/advance", `{"by":"5m"}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "could not be saved") {
		t.Fatalf("advance with the file blocked = %d %s", code, body)
	}
	if s.testClk.Offset() != before {
		t.Fatalf("an unsaved move took effect: %v, was %v", s.testClk.Offset(), before)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	stop(t, s)

	var logs logBuffer
	s = start(t, Options{Server: config.Server{DataDir: dir}, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if ws := logs.lines(t, "the data directory holds a test clock offset from a run with --test-clock; without it the broker runs on the wall clock"); len(ws) != 1 || ws[0]["offset"] != "3h1m0s" {
		t.Fatalf("no warning about the ignored offset: %v", ws)
	}
	stop(t, s)

	if err := os.WriteFile(filepath.Join(dir, testClockFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := opts
	o.AMQPAddr, o.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	if s, err := Start(context.Background(), o); err == nil || !strings.Contains(err.Error(), testClockFile) {
		if err == nil {
			stop(t, s)
		}
		t.Fatalf("start with a damaged %s = %v", testClockFile, err)
	}
}
