package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/clock"
	"github.com/busbarmq/busbar/internal/message"
	"github.com/busbarmq/busbar/internal/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T) (*Metrics, *broker.Broker) {
	t.Helper()
	m := New()
	st := memstore.New()
	b, err := broker.Open(broker.Options{Store: st, Clock: clock.NewFake(time.Unix(1_800_000_000, 0)), Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(); _ = st.Close() })
	m.Watch(b, st)
	return m, b
}

func TestEntityCountersAndGauges(t *testing.T) {
	m, b := open(t)
	ctx := context.Background()
	if _, err := b.CreateQueue("q", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctx, "q", []*message.Message{{Body: []byte("a")}, {Body: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	r, err := b.OpenReceiver("q", broker.PeekLock)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ds, err := r.TryReceive(2)
	if err != nil || len(ds) != 2 {
		t.Fatalf("TryReceive = %d, %v", len(ds), err)
	}
	if err := b.Complete(ctx, "q", ds[0].LockToken); err != nil {
		t.Fatal(err)
	}
	if err := b.DeadLetter(ctx, "q", ds[1].LockToken, "r", "d", nil); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP busbar_incoming_messages_total Messages accepted by a send or schedule on the queue or topic (Azure: IncomingMessages).
# TYPE busbar_incoming_messages_total counter
busbar_incoming_messages_total{entity="q"} 2
# HELP busbar_outgoing_messages_total Messages handed to receivers of the queue or subscription, its sub-queues included (Azure: OutgoingMessages).
# TYPE busbar_outgoing_messages_total counter
busbar_outgoing_messages_total{entity="q"} 2
# HELP busbar_complete_message_total Messages completed (Azure: CompleteMessage).
# TYPE busbar_complete_message_total counter
busbar_complete_message_total{entity="q"} 1
# HELP busbar_deadlettered_messages_total Messages dead-lettered by a client's settlement (Azure: DeadletteredMessages as a rate).
# TYPE busbar_deadlettered_messages_total counter
busbar_deadlettered_messages_total{entity="q"} 1
# HELP busbar_active_messages Active messages, locked ones included (Azure: ActiveMessages).
# TYPE busbar_active_messages gauge
busbar_active_messages{entity="q"} 0
# HELP busbar_deadlettered_messages Messages in the dead-letter queue (Azure: DeadletteredMessages).
# TYPE busbar_deadlettered_messages gauge
busbar_deadlettered_messages{entity="q"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want),
		"busbar_incoming_messages_total", "busbar_outgoing_messages_total", "busbar_complete_message_total",
		"busbar_deadlettered_messages_total", "busbar_active_messages", "busbar_deadlettered_messages"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.sendSeconds); n != 1 {
		t.Errorf("send histogram series = %d", n)
	}

	// Deleting the queue drops its series, counters included; a new queue
	// of the same name starts from zero.
	if err := b.DeleteQueue("q"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(m.Registry(), "busbar_incoming_messages_total", "busbar_active_messages"); err != nil || n != 0 {
		t.Errorf("after delete: %d series (%v), want 0", n, err)
	}
	if _, err := b.CreateQueue("q", broker.DefaultQueueProperties()); err != nil {
		t.Fatal(err)
	}
	want = `
# HELP busbar_incoming_messages_total Messages accepted by a send or schedule on the queue or topic (Azure: IncomingMessages).
# TYPE busbar_incoming_messages_total counter
busbar_incoming_messages_total{entity="q"} 0
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "busbar_incoming_messages_total"); err != nil {
		t.Error(err)
	}
}

func TestRequestFailedClasses(t *testing.T) {
	m := New()
	m.RequestFailed("q", "amqp:not-found", 404)
	m.RequestFailed("", "amqp:unauthorized-access", 401)
	m.RequestFailed("q", "amqp:internal-error", 500)
	m.RequestFailed("q", conditionServerBusy, 503)
	if got := testutil.ToFloat64(m.userErrors); got != 2 {
		t.Errorf("user errors = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.serverErrors); got != 1 {
		t.Errorf("server errors = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.throttled); got != 1 {
		t.Errorf("throttled = %v, want 1", got)
	}
}

func TestConnectionsAndStore(t *testing.T) {
	m := New()
	m.ConnectionOpened()
	m.ConnectionOpened()
	m.ConnectionClosed()
	m.Synced(2*time.Millisecond, 7)
	m.SetVersion("1.2.3")
	want := `
# HELP busbar_active_connections AMQP connections open now (Azure: ActiveConnections).
# TYPE busbar_active_connections gauge
busbar_active_connections 1
# HELP busbar_connections_opened_total AMQP connections opened (Azure: ConnectionsOpened).
# TYPE busbar_connections_opened_total counter
busbar_connections_opened_total 2
# HELP busbar_connections_closed_total AMQP connections closed (Azure: ConnectionsClosed).
# TYPE busbar_connections_closed_total counter
busbar_connections_closed_total 1
# HELP busbar_build_info Always 1; the label version is Busbar's version.
# TYPE busbar_build_info gauge
busbar_build_info{version="1.2.3"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want),
		"busbar_active_connections", "busbar_connections_opened_total", "busbar_connections_closed_total", "busbar_build_info"); err != nil {
		t.Error(err)
	}
	for _, h := range []string{"busbar_store_fsync_seconds", "busbar_store_group_commit_size"} {
		if n, err := testutil.GatherAndCount(m.Registry(), h); err != nil || n != 1 {
			t.Errorf("%s: %d series (%v), want 1", h, n, err)
		}
	}
}
