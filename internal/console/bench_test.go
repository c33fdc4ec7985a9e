package console

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/busbarmq/busbar/internal/auth"
	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store/filestore"
)

// fileBroker is a broker on the file store (fsync on) in a temporary
// directory, with a fake clock, and a console on it signed in with Manage.
func fileBroker(b *testing.B) (*broker.Broker, *clock.Fake, *Console) {
	b.Helper()
	st, err := filestore.Open(filestore.Options{Dir: b.TempDir(), MinFreeBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	clk := clock.NewFake(t0)
	br, err := broker.Open(broker.Options{Store: st, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	a, err := auth.New(auth.Config{Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	c, err := New(Options{Broker: br, Auth: a, Clock: clk, AutoSignIn: &auth.Grant{KeyName: "k", Rights: auth.Manage},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(); br.Close(); st.Close() })
	return br, clk, c
}

// BenchmarkBulkResubmit100k: the console's bulk job resubmits 100,000
// dead letters (1 KiB bodies) to their queue, on the file store with
// fsync: listing them, then MaxTriageBatch per atomic broker call.
func BenchmarkBulkResubmit100k(b *testing.B) {
	const n = 100_000
	for range b.N {
		b.StopTimer()
		br, clk, c := fileBroker(b)
		p := broker.DefaultQueueProperties()
		p.DeadLetteringOnMessageExpiration = true
		p.MaxSizeInMegabytes = 5 * 1024
		if _, err := br.CreateQueue("q", p); err != nil {
			b.Fatal(err)
		}
		body := encodeDataBody(make([]byte, 1024))
		for i := 0; i < n; i += 500 {
			msgs := make([]*message.Message, 500)
			for j := range msgs {
				msgs[j] = &message.Message{Body: body, TTL: time.Second}
			}
			if err := br.Send(context.Background(), "q", msgs); err != nil {
				b.Fatal(err)
			}
		}
		clk.Advance(2 * time.Second) // every message expires into the DLQ
		for br.NextDeadline().Before(clk.Now().Add(time.Millisecond)) && !br.NextDeadline().IsZero() {
			br.Tick()
		}
		if qi, _ := br.GetQueue("q"); qi.Counts.DeadLetter != n {
			b.Fatalf("dead letters: %+v", qi.Counts)
		}
		b.StartTimer()
		j, err := c.jobs.start(jobSpec{path: "q/$DeadLetterQueue", target: "q"})
		if err != nil {
			b.Fatal(err)
		}
		for j.snapshot().Running {
			time.Sleep(5 * time.Millisecond)
		}
		b.StopTimer()
		if v := j.snapshot(); v.Done != n || v.State != "done" {
			b.Fatalf("job %+v", v)
		}
		if qi, _ := br.GetQueue("q"); qi.Counts.DeadLetter != 0 || qi.Counts.Active != n {
			b.Fatalf("after: %+v", qi.Counts)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkOverview1000: the overview page of 1,000 entities (700 queues,
// 60 topics with 4 subscriptions each), rendered over HTTP.
func BenchmarkOverview1000(b *testing.B) {
	br, _, c := fileBroker(b)
	for i := range 700 {
		if _, err := br.CreateQueue("queue-"+strconv.Itoa(i), broker.DefaultQueueProperties()); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 60 {
		t := "topic-" + strconv.Itoa(i)
		if _, err := br.CreateTopic(t, broker.DefaultTopicProperties()); err != nil {
			b.Fatal(err)
		}
		for s := range 4 {
			if _, err := br.CreateSubscription(t, "sub-"+strconv.Itoa(s), broker.DefaultSubscriptionProperties(), nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		req := httptest.NewRequest(http.MethodGet, Prefix, nil)
		req.RemoteAddr = "127.0.0.1:1"
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || rec.Body.Len() < 100_000 {
			b.Fatalf("%d, %d bytes", rec.Code, rec.Body.Len())
		}
	}
}
