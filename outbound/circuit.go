package outbound

import "time"

// circuitState is where an endpoint's circuit breaker is.
type circuitState int

const (
	// circuitClosed: deliveries flow; consecutive failures are counted.
	circuitClosed circuitState = iota
	// circuitOpen: the endpoint is paused until the cool-down ends. Nothing
	// is claimed, so its deliveries keep their attempt budget.
	circuitOpen
	// circuitHalfOpen: the cool-down is over; one probe delivery is let
	// through and its outcome closes or reopens the circuit.
	circuitHalfOpen
)

// String names a state for logs.
func (s circuitState) String() string {
	switch s {
	case circuitClosed:
		return "closed"
	case circuitOpen:
		return "open"
	}
	return "half-open"
}

// circuit pauses one endpoint after consecutive failed attempts instead of
// burning the attempts of its whole backlog against it. It is plain state:
// its endpoint loop calls it under the loop's lock, with the time passed in.
type circuit struct {
	threshold int           // consecutive failures that open it
	minCool   time.Duration // first cool-down
	maxCool   time.Duration // cool-downs double up to this

	state    circuitState
	failures int           // consecutive failed attempts while closed
	cool     time.Duration // current cool-down, 0 while closed
	until    time.Time     // end of the cool-down while open
	probing  bool          // the half-open probe is in flight
}

// unlimited is what allow returns when the circuit does not bound claims.
const unlimited = -1

// allow says how many deliveries may be claimed at now: unlimited while
// closed, one probe once the cool-down is over, none while open (then
// until is when that changes) or while the probe is out.
func (c *circuit) allow(now time.Time) (n int, until time.Time) {
	switch c.state {
	case circuitClosed:
		return unlimited, time.Time{}
	case circuitOpen:
		if now.Before(c.until) {
			return 0, c.until
		}
		c.state = circuitHalfOpen
	}
	if c.probing {
		return 0, time.Time{}
	}
	return 1, time.Time{}
}

// claimed records that the claim allowed by allow took n deliveries; in
// half-open state the one delivery is the probe.
func (c *circuit) claimed(n int) (probe bool) {
	if c.state == circuitHalfOpen && n > 0 {
		c.probing = true
		return true
	}
	return false
}

// record counts an attempt's outcome and returns the state change, if any.
// Outcomes of attempts claimed before the circuit opened are ignored while
// it is open: only the probe decides how it closes.
func (c *circuit) record(ok, probe bool, now time.Time) (from, to circuitState) {
	from = c.state
	switch {
	case probe:
		c.probing = false
		if ok {
			c.close()
		} else {
			c.open(now, min(2*c.cool, c.maxCool))
		}
	case c.state != circuitClosed:
	case ok:
		c.failures = 0
	default:
		c.failures++
		if c.failures >= c.threshold {
			c.open(now, c.minCool)
		}
	}
	return from, c.state
}

// reset closes the circuit whatever its state (the endpoint was changed,
// e.g. re-enabled by an operator).
func (c *circuit) reset() {
	c.close()
	c.probing = false
}

func (c *circuit) close() {
	c.state, c.failures, c.cool, c.until = circuitClosed, 0, 0, time.Time{}
}

func (c *circuit) open(now time.Time, cool time.Duration) {
	cool = max(cool, c.minCool)
	c.state, c.failures, c.cool, c.until = circuitOpen, 0, cool, now.Add(cool)
}
