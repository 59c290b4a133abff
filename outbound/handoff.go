package outbound

import (
	"time"

	"hookgate/storage"
)

// Hand-off: ingest can create a delivery already claimed by this process
// and hand it straight to its endpoint's loop, instead of writing it
// pending and having the loop claim it with a second write and read the
// event back. Reserve takes a slot first (so max_in_flight, the circuit and
// the rate limit still hold); the store write then records the delivery as
// delivering under the returned lease, and Hand starts the attempt with the
// event ingest already has in memory. If the process dies in between, the
// lease expires and the delivery is claimed like any other: nothing lives
// only in memory.

// Reserve takes one slot of each endpoint in ids that can send right now
// (enabled, circuit closed, a free max_in_flight slot and a rate token) and
// returns, per endpoint, the lease its delivery must be written with; a
// zero time means no slot: write that delivery pending as usual. Every
// reserved slot must be given back by Hand or Unreserve.
func (d *Dispatcher) Reserve(ids []string, now time.Time) []time.Time {
	leases := make([]time.Time, len(ids))
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.state != lifecycleRunning {
		return leases
	}
	for i, id := range ids {
		l := d.endpoints[id]
		if l == nil {
			continue
		}
		if ep, ok := l.reserve(now); ok {
			leases[i] = now.Add(d.leaseFor(&ep))
		}
	}
	return leases
}

// reserve takes a slot if the endpoint could claim a delivery now.
func (l *endpointLoop) reserve(now time.Time) (storage.Endpoint, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ep.Disabled || l.inFlight >= maxInFlight(&l.ep) || l.held(now) {
		return l.ep, false
	}
	if allowed, _ := l.circuit.allow(now); allowed != unlimited {
		return l.ep, false // open or probing: the loop decides
	}
	if l.limiter != nil {
		if l.limiter.TokensAt(now) < 1 {
			return l.ep, false
		}
		l.limiter.ReserveN(now, 1)
	}
	l.inFlight++
	return l.ep, true
}

// Unreserve gives back slots whose deliveries were not written (the event
// was a duplicate, or the store failed).
func (d *Dispatcher) Unreserve(ids []string) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, id := range ids {
		if l := d.endpoints[id]; l != nil {
			l.finished()
		}
	}
}

// Hand starts the attempts of deliveries that were written claimed under
// leases from Reserve. After Stop began, it only frees the slots: the
// deliveries are claimed again when their leases expire. A delivery whose
// endpoint changed since its Reserve so that it may not be sent now
// (disabled, its circuit no longer closed, held by a Retry-After, or a
// timeout longer than its lease allows) is released instead: pending and
// due, for the loop to claim under the endpoint's current settings.
func (d *Dispatcher) Hand(jobs []storage.Job) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	now := d.cfg.Now()
	for i := range jobs {
		job := &jobs[i]
		l := d.endpoints[job.Delivery.Endpoint]
		if l == nil {
			continue
		}
		if d.state != lifecycleRunning {
			l.finished()
			continue
		}
		l.mu.Lock()
		ep := l.ep
		allowed, _ := l.circuit.allow(now)
		fits := !ep.Disabled && allowed == unlimited && !l.held(now) &&
			!now.Add(d.leaseFor(&ep)).After(job.Delivery.LeaseUntil.Add(leaseMargin/2))
		l.mu.Unlock()
		d.jobs.Add(1)
		if !fits {
			go func() {
				defer d.jobs.Done()
				d.release(job)
				l.finished()
			}()
			continue
		}
		go l.attempt(ep, job, 0, false)
	}
}
