// Package metrics is Busbar's Prometheus instrumentation: the series
// GET /metrics serves, named after Azure Monitor's Service Bus metrics
// where one exists (docs/observability.md has the table).
//
// Metrics is the observer the rest of Busbar reports to: the broker
// (broker.Observer: sends, deliveries, settlements), the file store
// (store.SyncObserver: fsync rounds) and the AMQP handler
// (servicebus.Observer, by method set: connections, failed requests) and
// the admin API (admin.Observer: failed requests). Each
// report is an atomic add or a histogram observation, no lock.
//
// What the broker already counts is not counted again: the per-entity
// gauges (active, scheduled, dead-lettered, deferred messages, size) and
// the store's size are read from the broker and the store when Prometheus
// scrapes (Collect), as are the per-entity counters' current set of
// entities, so a deleted entity's series disappear with it:
//
//	report (hot path)                 scrape (Collect)
//	Sent/Delivered/Settled ──► entity counters ─┐
//	Synced ──► fsync, group-commit histograms   ├──► exposition, live entities only
//	broker.ListQueues/Topics/Subscriptions ─────┤
//	store.Stats ────────────────────────────────┘
//
// Per-entity series carry the label entity: a queue or topic name, or a
// subscription's path "topic/Subscriptions/sub". Namespace-wide series
// (connections, errors, latencies) carry none; summing an entity series
// over entity gives its namespace figure. Failed requests are counted per
// namespace only, since a client can name any number of entities that do
// not exist.
//
// A server of several namespaces makes its Metrics with NewShared and
// one per namespace with ForNamespace: every series but the process's
// then carries the label namespace as well, the metric names unchanged.
package metrics

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/busbarmq/busbar/internal/broker"
	"github.com/busbarmq/busbar/internal/store"
)

// conditionServerBusy is the AMQP condition of a throttled request.
const conditionServerBusy = "com.microsoft:server-busy"

// Metrics collects Busbar's metrics. The zero value is not usable; call
// New. All methods are safe for concurrent use.
type Metrics struct {
	reg     *prometheus.Registry
	release func() // ForNamespace's children: unregister their series

	entities sync.Map // entity name → *entityCounters

	sendSeconds   prometheus.Histogram
	settleSeconds prometheus.Histogram
	fsyncSeconds  prometheus.Histogram
	groupCommit   prometheus.Histogram

	connOpened   prometheus.Counter
	connClosed   prometheus.Counter
	activeConns  atomic.Int64
	serverErrors prometheus.Counter
	userErrors   prometheus.Counter
	throttled    prometheus.Counter
	faults       *prometheus.CounterVec

	buildInfo *prometheus.GaugeVec
	active    prometheus.Collector // busbar_active_connections

	src atomic.Pointer[source]
}

// source is what Collect reads at scrape time.
type source struct {
	b  *broker.Broker
	st store.Store
}

type entityCounters struct {
	incoming, outgoing, complete, abandon, deadLetter atomic.Uint64
}

// newMetrics makes the series; shared registers only the process's.
func newMetrics(shared bool) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	latency := prometheus.ExponentialBuckets(0.0001, 2, 16) // 100 µs … 3.3 s
	m.sendSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "busbar_send_seconds", Buckets: latency,
		Help: "Duration of a broker send (one or more messages, durable when it ends).",
	})
	m.settleSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "busbar_settle_seconds", Buckets: latency,
		Help: "Duration of a settlement call (one message, or a batch of completes), durable when it ends.",
	})
	m.fsyncSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "busbar_store_fsync_seconds", Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16), // 50 µs … 1.6 s
		Help: "Duration of one fsync round of the store's log.",
	})
	m.groupCommit = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "busbar_store_group_commit_size", Buckets: prometheus.ExponentialBuckets(1, 2, 12), // 1 … 2048
		Help: "Commits made durable by one fsync round (group commit).",
	})
	m.connOpened = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "busbar_connections_opened_total", Help: "AMQP connections opened (Azure: ConnectionsOpened).",
	})
	m.connClosed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "busbar_connections_closed_total", Help: "AMQP connections closed (Azure: ConnectionsClosed).",
	})
	active := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "busbar_active_connections", Help: "AMQP connections open now (Azure: ActiveConnections).",
	}, func() float64 { return float64(m.activeConns.Load()) })
	m.serverErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "busbar_server_errors_total", Help: "AMQP and admin API requests that failed with a server error (Azure: ServerErrors).",
	})
	m.userErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "busbar_user_errors_total", Help: "AMQP and admin API requests that failed because of the request: unauthorized, not found, invalid, lock lost, … (Azure: UserErrors).",
	})
	m.throttled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "busbar_throttled_requests_total", Help: "AMQP requests refused as server-busy (Azure: ThrottledRequests).",
	})
	m.faults = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "busbar_injected_faults_total", Help: "Faults injected on purpose (--faults), by kind; a server-busy fault also counts as a throttled request.",
	}, []string{"kind"})
	m.buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "busbar_build_info", Help: "Always 1; the label version is Busbar's version.",
	}, []string{"version"})
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.buildInfo,
	)
	if !shared {
		m.reg.MustRegister(m.namespaceCollectors(active)...)
	}
	m.active = active
	return m
}

// New returns Metrics with the Go runtime and process collectors
// registered. Its entity and store series appear once Watch has been
// called.
func New() *Metrics { return newMetrics(false) }

// NewShared returns Metrics for a server of several namespaces: its
// registry serves the process's series (Go runtime, process, build info)
// and those of every Metrics ForNamespace made, each with the label
// namespace. Nothing reports to it directly.
func NewShared() *Metrics { return newMetrics(true) }

// ForNamespace returns the Metrics of one namespace, registered in m's
// registry with the label namespace=name on every series; its Handler and
// Registry are m's. Call it once per name.
func (m *Metrics) ForNamespace(name string) *Metrics {
	child := newMetrics(true)
	child.reg = m.reg
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"namespace": name}, m.reg)
	cs := child.namespaceCollectors(child.active)
	wrapped.MustRegister(cs...)
	child.release = func() {
		for _, c := range cs {
			wrapped.Unregister(c)
		}
	}
	return child
}

// Release removes a namespace's series (ForNamespace) from the registry,
// when the namespace is deleted; ForNamespace may then be called again
// with its name. It does nothing on other Metrics.
func (m *Metrics) Release() {
	if m.release != nil {
		m.release()
	}
}

// namespaceCollectors are the series of one namespace.
func (m *Metrics) namespaceCollectors(active prometheus.Collector) []prometheus.Collector {
	return []prometheus.Collector{
		m.sendSeconds, m.settleSeconds, m.fsyncSeconds, m.groupCommit,
		m.connOpened, m.connClosed, active,
		m.serverErrors, m.userErrors, m.throttled, m.faults,
		entityCollector{m},
	}
}

// Watch makes the broker's entities and the store's size part of every
// scrape from now on.
func (m *Metrics) Watch(b *broker.Broker, st store.Store) {
	m.src.Store(&source{b: b, st: st})
}

// SetVersion sets busbar_build_info's version label (one series).
func (m *Metrics) SetVersion(version string) {
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version).Set(1)
}

// Handler serves the metrics in the Prometheus text format (OpenMetrics
// when the scraper asks for it). It does not authenticate.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// Registry is the registry behind Handler, for tests and embedding.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

func (m *Metrics) counters(entity string) *entityCounters {
	if c, ok := m.entities.Load(entity); ok {
		return c.(*entityCounters)
	}
	c, _ := m.entities.LoadOrStore(entity, new(entityCounters))
	return c.(*entityCounters)
}

var _ broker.Observer = (*Metrics)(nil)

// Sent implements broker.Observer.
func (m *Metrics) Sent(entity string, n int, d time.Duration) {
	m.counters(entity).incoming.Add(uint64(n))
	m.sendSeconds.Observe(d.Seconds())
}

// Delivered implements broker.Observer.
func (m *Metrics) Delivered(entity string, n int) {
	m.counters(entity).outgoing.Add(uint64(n))
}

// Settled implements broker.Observer.
func (m *Metrics) Settled(entity string, o broker.Outcome, n int, d time.Duration) {
	switch o {
	case broker.OutcomeComplete:
		m.counters(entity).complete.Add(uint64(n))
	case broker.OutcomeAbandon:
		m.counters(entity).abandon.Add(uint64(n))
	case broker.OutcomeDeadLetter:
		m.counters(entity).deadLetter.Add(uint64(n))
	}
	m.settleSeconds.Observe(d.Seconds())
}

var _ store.SyncObserver = (*Metrics)(nil)

// Synced implements store.SyncObserver.
func (m *Metrics) Synced(d time.Duration, commits int) {
	m.fsyncSeconds.Observe(d.Seconds())
	m.groupCommit.Observe(float64(commits))
}

// ConnectionOpened implements servicebus.Observer.
func (m *Metrics) ConnectionOpened() {
	m.connOpened.Inc()
	m.activeConns.Add(1)
}

// ConnectionClosed implements servicebus.Observer.
func (m *Metrics) ConnectionClosed() {
	m.connClosed.Inc()
	m.activeConns.Add(-1)
}

// FaultInjected implements faults.Observer: a fault of kind was injected.
func (m *Metrics) FaultInjected(kind string) {
	m.faults.WithLabelValues(kind).Inc()
}

// RequestFailed implements servicebus.Observer and admin.Observer (AMQP
// and admin API requests alike): a server-busy condition
// is throttled, a status of 500 or more a server error, anything else
// the client's.
func (m *Metrics) RequestFailed(_, cond string, status int32) {
	switch {
	case cond == conditionServerBusy:
		m.throttled.Inc()
	case status >= 500:
		m.serverErrors.Inc()
	default:
		m.userErrors.Inc()
	}
}
