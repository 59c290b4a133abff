package admin

import (
	"sync"
	"time"
)

// The last hour of this gateway's work, by minute: what the admin API's
// GET /stats and GET /endpoints/{id}/stats answer (the console's overview
// and endpoint pages). It is kept in memory, per gateway, like /metrics:
// a restart starts it empty.
const (
	recentBuckets = 60
	recentBucket  = time.Minute
)

// latencyBoundsMS are the upper bounds of the attempt-latency histogram an
// endpoint keeps per minute; the quantiles reported are these bounds.
var latencyBoundsMS = [...]int64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000, 1 << 40}

// endpointMinute is one endpoint's minute.
type endpointMinute struct {
	attempts, attemptsFailed int64
	delivered, failed        int64
	latency                  [len(latencyBoundsMS)]int64
	pending                  int64 // sampled outbox depth; -1 when not sampled
}

type recentSlot struct {
	minute    int64 // the Unix minute the slot holds
	received  map[string]int64
	endpoints map[string]*endpointMinute
}

// Recent is the minute ring, filled by the gateway's metrics; its zero
// value is ready to use. Recording costs a lock and a map lookup.
type Recent struct {
	mu    sync.Mutex
	slots [recentBuckets]recentSlot
}

// slot returns the slot of t's minute, emptied if it held an older one.
// The caller holds r.mu.
func (r *Recent) slot(t time.Time) *recentSlot {
	m := t.Unix() / int64(recentBucket/time.Second)
	s := &r.slots[m%recentBuckets]
	if s.minute != m || s.received == nil {
		*s = recentSlot{minute: m, received: map[string]int64{}, endpoints: map[string]*endpointMinute{}}
	}
	return s
}

func (s *recentSlot) endpoint(id string) *endpointMinute {
	e := s.endpoints[id]
	if e == nil {
		e = &endpointMinute{pending: -1}
		s.endpoints[id] = e
	}
	return e
}

// Received counts an event the source accepted.
func (r *Recent) Received(source string, now time.Time) {
	r.mu.Lock()
	r.slot(now).received[source]++
	r.mu.Unlock()
}

// Attempt counts an attempt's outcome and latency; final says it failed
// the delivery.
func (r *Recent) Attempt(endpoint string, ok, final bool, latency time.Duration, now time.Time) {
	ms := latency.Milliseconds()
	b := 0
	for b < len(latencyBoundsMS)-1 && ms > latencyBoundsMS[b] {
		b++
	}
	r.mu.Lock()
	e := r.slot(now).endpoint(endpoint)
	e.attempts++
	e.latency[b]++
	if !ok {
		e.attemptsFailed++
	}
	if final {
		e.failed++
	}
	r.mu.Unlock()
}

// Failed counts a delivery failed without an attempt (max_elapsed passed
// while its endpoint was paused).
func (r *Recent) Failed(endpoint string, now time.Time) {
	r.mu.Lock()
	r.slot(now).endpoint(endpoint).failed++
	r.mu.Unlock()
}

// Delivered counts a delivery that succeeded.
func (r *Recent) Delivered(endpoint string, now time.Time) {
	r.mu.Lock()
	r.slot(now).endpoint(endpoint).delivered++
	r.mu.Unlock()
}

// Pending records an endpoint's outbox depth, sampled at now.
func (r *Recent) Pending(endpoint string, n int, now time.Time) {
	r.mu.Lock()
	r.slot(now).endpoint(endpoint).pending = int64(n)
	r.mu.Unlock()
}

// StatsBucket is one minute of GET /stats.
type StatsBucket struct {
	At             string `json:"at"`
	Received       int64  `json:"received"`
	Delivered      int64  `json:"delivered"`
	Failed         int64  `json:"failed"`
	Attempts       int64  `json:"attempts"`
	AttemptsFailed int64  `json:"attempts_failed"`
	OutboxPending  int64  `json:"outbox_pending"`
}

// overview sums the last hour's minutes over the sources and endpoints a
// token sees, oldest first. A minute with no depth sample carries the
// last sampled depth of each endpoint forward.
func (r *Recent) overview(now time.Time, sources, endpoints func(id string) bool) []StatsBucket {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := now.Unix() / int64(recentBucket/time.Second)
	out := make([]StatsBucket, 0, recentBuckets)
	last := map[string]int64{}
	for m := cur - recentBuckets + 1; m <= cur; m++ {
		b := StatsBucket{At: time.Unix(m*int64(recentBucket/time.Second), 0).UTC().Format(time.RFC3339)}
		if s := &r.slots[m%recentBuckets]; s.minute == m && s.received != nil {
			for id, n := range s.received {
				if sources(id) {
					b.Received += n
				}
			}
			for id, e := range s.endpoints {
				if !endpoints(id) {
					continue
				}
				b.Delivered += e.delivered
				b.Failed += e.failed
				b.Attempts += e.attempts
				b.AttemptsFailed += e.attemptsFailed
				if e.pending >= 0 {
					last[id] = e.pending
				}
			}
		}
		for _, n := range last {
			b.OutboxPending += n
		}
		out = append(out, b)
	}
	return out
}

// endpointTotals is one endpoint's last hour.
type endpointTotals struct {
	attempts, attemptsFailed, delivered, failed int64
	p50, p95                                    int64 // ms, the histogram's bounds; 0 with no attempts
}

func (r *Recent) hour(id string, now time.Time) endpointTotals {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := now.Unix() / int64(recentBucket/time.Second)
	var t endpointTotals
	var hist [len(latencyBoundsMS)]int64
	for m := cur - recentBuckets + 1; m <= cur; m++ {
		s := &r.slots[m%recentBuckets]
		if s.minute != m || s.endpoints == nil {
			continue
		}
		if e := s.endpoints[id]; e != nil {
			t.attempts += e.attempts
			t.attemptsFailed += e.attemptsFailed
			t.delivered += e.delivered
			t.failed += e.failed
			for i, n := range e.latency {
				hist[i] += n
			}
		}
	}
	t.p50, t.p95 = quantileMS(&hist, t.attempts, 0.50), quantileMS(&hist, t.attempts, 0.95)
	return t
}

// quantileMS is the upper bound of the bucket holding the q-quantile.
func quantileMS(hist *[len(latencyBoundsMS)]int64, n int64, q float64) int64 {
	if n == 0 {
		return 0
	}
	rank := int64(q*float64(n) + 0.5)
	rank = max(rank, 1)
	var seen int64
	for i, c := range hist {
		seen += c
		if seen >= rank {
			if i == len(latencyBoundsMS)-1 {
				return latencyBoundsMS[i-1] // beyond the last bound: at least that
			}
			return latencyBoundsMS[i]
		}
	}
	return 0
}
