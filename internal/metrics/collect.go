package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/store"
)

func entityDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, []string{"entity"}, nil)
}

var (
	descIncoming   = entityDesc("busbar_incoming_messages_total", "Messages accepted by a send or schedule on the queue or topic (Azure: IncomingMessages).")
	descOutgoing   = entityDesc("busbar_outgoing_messages_total", "Messages handed to receivers of the queue or subscription, its sub-queues included (Azure: OutgoingMessages).")
	descComplete   = entityDesc("busbar_complete_message_total", "Messages completed (Azure: CompleteMessage).")
	descAbandon    = entityDesc("busbar_abandon_message_total", "Messages abandoned (Azure: AbandonMessage).")
	descDeadLetter = entityDesc("busbar_deadlettered_messages_total", "Messages dead-lettered by a client's settlement (Azure: DeadletteredMessages as a rate).")

	descActive     = entityDesc("busbar_active_messages", "Active messages, locked ones included (Azure: ActiveMessages).")
	descScheduled  = entityDesc("busbar_scheduled_messages", "Scheduled messages not yet enqueued (Azure: ScheduledMessages).")
	descDLQ        = entityDesc("busbar_deadlettered_messages", "Messages in the dead-letter queue (Azure: DeadletteredMessages).")
	descDeferred   = entityDesc("busbar_deferred_messages", "Deferred messages.")
	descSize       = entityDesc("busbar_size_bytes", "Stored size of the entity's messages (Azure: Size).")
	descStoreBytes = prometheus.NewDesc("busbar_store_bytes", "Disk space the store's files take (0 in memory).", nil, nil)
	descStoreData  = prometheus.NewDesc("busbar_store_data_bytes", "Bytes of message data the store holds.", nil, nil)
)

// entityCollector emits the per-entity series and the store's, reading
// the broker and the store at scrape time.
type entityCollector struct{ m *Metrics }

func (c entityCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIncoming, descOutgoing, descComplete, descAbandon, descDeadLetter,
		descActive, descScheduled, descDLQ, descDeferred, descSize, descStoreBytes, descStoreData} {
		ch <- d
	}
}

func (c entityCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.m.src.Load()
	if src == nil {
		return
	}
	// Counters are kept for the entities that exist. The names known
	// before listing are the candidates for removal: an entity created
	// after the listing is not among them, so its first counts survive.
	var known []string
	c.m.entities.Range(func(k, _ any) bool {
		known = append(known, k.(string))
		return true
	})
	// live: the entities that exist, and whether they are sent to (a
	// queue or topic) and received from (a queue or subscription).
	type kind struct{ sends, receives bool }
	live := make(map[string]kind)
	gauge := func(d *prometheus.Desc, v int64, entity string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), entity)
	}
	counts := func(name string, k broker.Counts, kd kind) {
		live[name] = kd
		gauge(descScheduled, k.Scheduled, name)
		gauge(descSize, k.SizeInBytes, name)
		if kd.receives {
			gauge(descActive, k.Active, name)
			gauge(descDLQ, k.DeadLetter, name)
			gauge(descDeferred, k.Deferred, name)
		}
	}
	for _, q := range src.b.ListQueues() {
		counts(q.Name, q.Counts, kind{sends: true, receives: true})
	}
	for _, t := range src.b.ListTopics() {
		counts(t.Name, t.Counts, kind{sends: true})
		subs, err := src.b.ListSubscriptions(t.Name)
		if err != nil {
			continue // deleted meanwhile
		}
		for _, s := range subs {
			counts(broker.SubscriptionPath(t.Name, s.Name), s.Counts, kind{receives: true})
		}
	}
	for _, name := range known {
		if _, ok := live[name]; !ok {
			c.m.entities.Delete(name)
		}
	}
	// Every live entity has its counters, at 0 before any traffic.
	var zero entityCounters
	for name, kd := range live {
		ec := &zero
		if v, ok := c.m.entities.Load(name); ok {
			ec = v.(*entityCounters)
		}
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name)
		}
		if kd.sends {
			counter(descIncoming, ec.incoming.Load())
		}
		if kd.receives {
			counter(descOutgoing, ec.outgoing.Load())
			counter(descComplete, ec.complete.Load())
			counter(descAbandon, ec.abandon.Load())
			counter(descDeadLetter, ec.deadLetter.Load())
		}
	}
	if sr, ok := src.st.(store.StatsReporter); ok {
		st := sr.Stats()
		ch <- prometheus.MustNewConstMetric(descStoreBytes, prometheus.GaugeValue, float64(st.DiskBytes))
		ch <- prometheus.MustNewConstMetric(descStoreData, prometheus.GaugeValue, float64(st.DataBytes))
	}
}
