package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"hookgate/gateway/admin"
	"hookgate/outbound"
	"hookgate/storage"
)

// metrics are hookgate's Prometheus series, on a registry of their own so
// that tests can run several gateways in one process.
type metrics struct {
	reg            *prometheus.Registry
	ingestTotal    *prometheus.CounterVec
	attemptsTotal  *prometheus.CounterVec
	attemptLatency *prometheus.HistogramVec
	deliveredTotal *prometheus.CounterVec
	e2eLatency     prometheus.Histogram
	inFlight       *prometheus.GaugeVec
	refusedTotal   *prometheus.CounterVec

	// ingestCounters caches ingestTotal's children by ingestLabels: the
	// vector's own lookup hashes the label values on every request.
	ingestCounters sync.Map
	// gone holds the ids of deleted endpoints (forgetEndpoint), with when,
	// until an endpoint with the id exists again (live) or no attempt of
	// theirs can still report (storage.MaxLease later): an attempt that
	// was in flight at the delete reports after it, and brought the series
	// back.
	gone sync.Map // id → time.Time

	// recent is the last hour by minute, for the admin API's stats.
	recent admin.Recent
}

type ingestLabels struct{ source, outcome string }

func newMetrics(store storage.Store) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		ingestTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_ingest_requests_total",
			Help: "Ingest requests by source and outcome (accepted, replayed, handshake, unauthorized, mismatch, store_error, too_large, encoded, ...).",
		}, []string{"source", "outcome"}),
		attemptsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_delivery_attempts_total",
			Help: "Delivery attempts by endpoint and outcome.",
		}, []string{"endpoint", "outcome"}),
		attemptLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hookgate_delivery_attempt_seconds",
			Help:    "Latency of delivery attempts.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"endpoint"}),
		deliveredTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_deliveries_total",
			Help: "Deliveries that reached a final state, by endpoint and state.",
		}, []string{"endpoint", "state"}),
		e2eLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hookgate_ingest_to_delivery_seconds",
			Help:    "Time from an event's receipt to its successful delivery.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookgate_delivery_in_flight",
			Help: "Delivery attempts in flight, by endpoint.",
		}, []string{"endpoint"}),
		refusedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookgate_http_refused_total",
			Help: "Requests answered before or without their route's own outcome, by listener (ingest, admin) and reason: framing (ambiguous framing, header lines or a request the server cannot parse: 400; a transfer coding other than chunked: 501), headers (a header block over the read buffer: 431), timeout (a request that stopped arriving: 408), method (not an HTTP method: 400), panic (a handler panicked: 500).",
		}, []string{"listener", "reason"}),
	}
	m.reg.MustRegister(m.ingestTotal, m.attemptsTotal, m.attemptLatency, m.deliveredTotal, m.e2eLatency, m.inFlight, m.refusedTotal,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newOutboxCollector(store))
	if sr, ok := store.(storage.SyncReporter); ok {
		m.reg.MustRegister(newSyncCollector(sr))
	}
	return m
}

// refused is the counter of requests a listener answered for reason (see
// refusedTotal); its series shows 0 from the start.
func (m *metrics) refused(listener, reason string) prometheus.Counter {
	return m.refusedTotal.WithLabelValues(listener, reason)
}

func (m *metrics) ingest(source, outcome string) {
	k := ingestLabels{source, outcome}
	c, ok := m.ingestCounters.Load(k)
	if !ok {
		c, _ = m.ingestCounters.LoadOrStore(k, m.ingestTotal.WithLabelValues(source, outcome))
	}
	c.(prometheus.Counter).Inc()
	if outcome == "accepted" {
		m.recent.Received(source, time.Now())
	}
}

// outboxCollector reports the outbox gauges at scrape time from the store,
// so they are true after a restart too.
type outboxCollector struct {
	store    storage.Store
	live     *prometheus.Desc
	due      *prometheus.Desc
	oldest   *prometheus.Desc
	disabled *prometheus.Desc
}

func newOutboxCollector(s storage.Store) *outboxCollector {
	return &outboxCollector{
		store:    s,
		live:     prometheus.NewDesc("hookgate_outbox_pending", "Deliveries of the endpoint not yet succeeded, failed or cancelled (pending or in flight), counted up to 100000.", []string{"endpoint"}, nil),
		due:      prometheus.NewDesc("hookgate_outbox_due", "Of those, deliveries due now (waiting for a slot, the rate limit or a paused endpoint), counted up to 100000.", []string{"endpoint"}, nil),
		oldest:   prometheus.NewDesc("hookgate_outbox_oldest_due_seconds", "How long the endpoint's earliest due delivery has been waiting past its due time (0 when none is overdue): grows while the endpoint is paused, disabled or cannot keep up.", []string{"endpoint"}, nil),
		disabled: prometheus.NewDesc("hookgate_endpoint_disabled", "1 while the endpoint is disabled (by a 410 answer or an operator), else 0: a disabled endpoint's deliveries wait until it is enabled again.", []string{"endpoint"}, nil),
	}
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.live
	ch <- c.due
	ch <- c.oldest
	ch <- c.disabled
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	eps, err := c.store.ListEndpoints(ctx)
	if err != nil {
		return
	}
	now := time.Now()
	for _, ep := range eps {
		live, due, err := c.store.Depth(ctx, ep.ID, now, admin.DepthLimit)
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.live, prometheus.GaugeValue, float64(live), ep.ID)
		ch <- prometheus.MustNewConstMetric(c.due, prometheus.GaugeValue, float64(due), ep.ID)
		ch <- prometheus.MustNewConstMetric(c.disabled, prometheus.GaugeValue, map[bool]float64{true: 1}[ep.Disabled], ep.ID)
		var overdue time.Duration
		if next, ok, err := c.store.NextDue(ctx, ep.ID); err == nil && ok && due > 0 {
			overdue = max(0, now.Sub(next))
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, overdue.Seconds(), ep.ID)
	}
}

// syncCollector reports the store's group-commit syncs: how long a
// durable write waits for the disk, and how many writes share a sync.
type syncCollector struct {
	store   storage.SyncReporter
	seconds *prometheus.Desc
	writes  *prometheus.Desc
}

func newSyncCollector(s storage.SyncReporter) *syncCollector {
	return &syncCollector{
		store:   s,
		seconds: prometheus.NewDesc("hookgate_store_sync_seconds", "Duration of the store's syncs (fsync of a group of writes); every acknowledged write waited for one.", nil, nil),
		writes:  prometheus.NewDesc("hookgate_store_synced_writes_total", "Store write operations completed by its syncs, one per durable write call (divide by the syncs' count for the group size).", nil, nil),
	}
}

func (c *syncCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.seconds
	ch <- c.writes
}

func (c *syncCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.store.SyncStats()
	buckets := make(map[float64]uint64, len(storage.SyncBounds))
	for i, b := range storage.SyncBounds {
		if i < len(st.Buckets) {
			buckets[b] = st.Buckets[i]
		}
	}
	ch <- prometheus.MustNewConstHistogram(c.seconds, st.Syncs, st.Seconds, buckets)
	ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(st.Writes))
}

var _ outbound.Metrics = (*metrics)(nil)

// Attempt counts one decided attempt and its latency.
func (m *metrics) Attempt(endpoint string, v outbound.Verdict, latency time.Duration) {
	if _, gone := m.gone.Load(endpoint); gone {
		return
	}
	m.attemptsTotal.WithLabelValues(endpoint, v.String()).Inc()
	m.attemptLatency.WithLabelValues(endpoint).Observe(latency.Seconds())
	final := v == outbound.VerdictFailed || v == outbound.VerdictDisable
	m.recent.Attempt(endpoint, v == outbound.VerdictSucceeded, final, latency, time.Now())
	switch v {
	case outbound.VerdictFailed, outbound.VerdictDisable:
		m.deliveredTotal.WithLabelValues(endpoint, "failed").Inc()
	}
}

// Expired counts a delivery failed unsent (max_elapsed passed while its
// endpoint was paused): a failed delivery, but no attempt.
func (m *metrics) Expired(endpoint string) {
	if _, gone := m.gone.Load(endpoint); gone {
		return
	}
	m.deliveredTotal.WithLabelValues(endpoint, "failed").Inc()
	m.recent.Failed(endpoint, time.Now())
}

// Delivered counts a success and its ingest-to-delivery latency.
func (m *metrics) Delivered(endpoint string, sinceIngest time.Duration) {
	m.e2eLatency.Observe(sinceIngest.Seconds())
	if _, gone := m.gone.Load(endpoint); gone {
		return
	}
	m.deliveredTotal.WithLabelValues(endpoint, "succeeded").Inc()
	m.recent.Delivered(endpoint, time.Now())
}

// ForgetEndpoint drops a deleted endpoint's attempt and delivery series:
// they would stay forever, and continue in the counts of an endpoint
// created later with the same id (maybe another tenant's). The in-flight
// gauge stays: attempts still running report to it, and it returns to 0.
func (m *metrics) ForgetEndpoint(id string) {
	now := time.Now()
	m.gone.Range(func(k, v any) bool {
		if now.Sub(v.(time.Time)) > storage.MaxLease {
			m.gone.Delete(k)
		}
		return true
	})
	m.gone.Store(id, now)
	l := prometheus.Labels{"endpoint": id}
	m.attemptsTotal.DeletePartialMatch(l)
	m.attemptLatency.DeletePartialMatch(l)
	m.deliveredTotal.DeletePartialMatch(l)
}

// live takes the endpoints that exist now (a registry reload): the ids of
// deleted ones among them were created again, and count again.
func (m *metrics) live(eps []storage.Endpoint) {
	for _, ep := range eps {
		m.gone.Delete(ep.ID)
	}
}

// ForgetSource drops a deleted source's ingest series, for the same
// reason as forgetEndpoint (source ids are global too).
func (m *metrics) ForgetSource(id string) {
	m.ingestTotal.DeletePartialMatch(prometheus.Labels{"source": id})
	m.ingestCounters.Range(func(k, _ any) bool {
		if k.(ingestLabels).source == id {
			m.ingestCounters.Delete(k)
		}
		return true
	})
}

// InFlight tracks attempts in flight per endpoint.
func (m *metrics) InFlight(endpoint string, delta int) {
	m.inFlight.WithLabelValues(endpoint).Add(float64(delta))
}
