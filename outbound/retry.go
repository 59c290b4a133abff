package outbound

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"hookgate/storage"
)

// Retry policy defaults (SPEC §2 delivery.retry), used for the zero fields
// of an endpoint's policy.
const (
	DefaultInitialInterval = 5 * time.Second
	DefaultMultiplier      = 2.0
	DefaultMaxInterval     = time.Hour
	DefaultRandomization   = 0.2
	DefaultMaxAttempts     = 30
	DefaultMaxElapsed      = 24 * time.Hour
)

// maxRetryAfterSeconds bounds a Retry-After in seconds before it is turned
// into a Duration (which would overflow); max_interval caps it anyway.
const maxRetryAfterSeconds = 1 << 30

// DefaultRetryPolicy is the policy of SPEC §2, for an endpoint with none.
var DefaultRetryPolicy = storage.RetryPolicy{
	InitialInterval: DefaultInitialInterval,
	Multiplier:      DefaultMultiplier,
	MaxInterval:     DefaultMaxInterval,
	Randomization:   DefaultRandomization,
	MaxAttempts:     DefaultMaxAttempts,
	MaxElapsed:      DefaultMaxElapsed,
}

// Verdict is what one attempt leads to. It is an enum, not a set of bools,
// so that every caller handles every case.
type Verdict int

// Verdicts of Decide.
const (
	// VerdictSucceeded: the endpoint answered 2xx; the delivery is done.
	VerdictSucceeded Verdict = iota + 1
	// VerdictRetry: the attempt failed; the delivery is due again at
	// Decision.NextAttemptAt.
	VerdictRetry
	// VerdictFailed: the attempt failed and the retry budget is spent
	// (max_attempts or max_elapsed); the delivery is dead-lettered, and stays
	// replayable.
	VerdictFailed
	// VerdictDisable: the endpoint answered 410 Gone: the delivery fails and
	// the endpoint is disabled.
	VerdictDisable
)

// String names a verdict as metrics and logs show it.
func (v Verdict) String() string {
	switch v {
	case VerdictSucceeded:
		return "succeeded"
	case VerdictRetry:
		return "retry"
	case VerdictFailed:
		return "failed"
	case VerdictDisable:
		return "disabled"
	}
	return "unknown"
}

// Answer is what one attempt got back.
type Answer struct {
	// StatusCode is the HTTP status, 0 when there was no response.
	StatusCode int
	// Err is the transport error (timeout, reset, DNS, refused address).
	Err error
	// RetryAfter is the response's Retry-After header, honoured on 429/503.
	RetryAfter string
}

// Decision is the state an attempt leads to, ready to be persisted.
type Decision struct {
	Verdict Verdict
	// NextAttemptAt is when to try again (VerdictRetry only).
	NextAttemptAt time.Time
	// Interval is the unrandomized backoff interval to persist: the one the
	// wait to NextAttemptAt was drawn from, and what the next one grows from.
	Interval time.Duration
	// Reason says why the delivery failed or the endpoint is disabled.
	Reason string
	// Failure names why, when the delivery fails: ReasonAttemptsExhausted,
	// ReasonMaxElapsed or ReasonGone (the reason of its operational event).
	Failure string
}

// Decide turns an attempt's answer into the delivery's next state. d is the
// delivery as claimed (before this attempt is counted), now the end of the
// attempt. Backoff is computed from the persisted state (d.Interval,
// d.AttemptCount, d.RetryFrom) as a timestamp, so it survives restarts:
// the interval grows like cenkalti/backoff's ExponentialBackOff (multiplier,
// capped at max_interval) and the library draws the jitter. On 429 and 503 a
// Retry-After (seconds or HTTP date), capped at max_interval, is a floor
// under the backoff: the retry waits for whichever is later. The delivery
// fails once this attempt reaches max_attempts, or when the next one would
// start after RetryFrom + max_elapsed.
func Decide(p storage.RetryPolicy, d *storage.Delivery, a Answer, now time.Time) Decision {
	switch {
	case a.Err == nil && a.StatusCode >= 200 && a.StatusCode < 300:
		return Decision{Verdict: VerdictSucceeded, Interval: d.Interval}
	case a.Err == nil && a.StatusCode == http.StatusGone:
		return Decision{Verdict: VerdictDisable, Interval: d.Interval, Reason: "endpoint answered 410 Gone", Failure: ReasonGone}
	}
	return retryOrFail(WithDefaults(p), d, a, now)
}

// retryOrFail schedules the next attempt of a failed one, or fails the
// delivery when its budget is spent.
func retryOrFail(p storage.RetryPolicy, d *storage.Delivery, a Answer, now time.Time) Decision {
	fail := Decision{Verdict: VerdictFailed, Interval: d.Interval}
	if d.AttemptCount-d.RetryBase+1 >= p.MaxAttempts {
		fail.Reason = fmt.Sprintf("gave up after %d attempts (max_attempts)", d.AttemptCount-d.RetryBase+1)
		fail.Failure = ReasonAttemptsExhausted
		return fail
	}
	from := retryFrom(d, now)
	interval := nextInterval(p, d.Interval)
	wait, ok := jitter(p, interval, from, now)
	if asked, has := retryAfter(a, now); has && ok {
		// Never sooner than the receiver asks, nor than the policy's own
		// schedule: "Retry-After: 0" must not turn retries into a loop.
		wait = max(wait, min(asked, p.MaxInterval))
		ok = now.Add(wait).Sub(from) <= p.MaxElapsed
	}
	if !ok {
		fail.Reason = fmt.Sprintf("gave up: next attempt would be more than %s after the first (max_elapsed)", p.MaxElapsed)
		fail.Failure = ReasonMaxElapsed
		return fail
	}
	return Decision{Verdict: VerdictRetry, NextAttemptAt: now.Add(wait), Interval: interval}
}

// WithDefaults fills the zero fields of a policy from DefaultRetryPolicy. A
// zero Randomization means no jitter, unless the whole policy is zero (an
// endpoint without one), which takes every default.
func WithDefaults(p storage.RetryPolicy) storage.RetryPolicy {
	if p == (storage.RetryPolicy{}) {
		return DefaultRetryPolicy
	}
	if p.InitialInterval <= 0 {
		p.InitialInterval = DefaultInitialInterval
	}
	if p.Multiplier < 1 {
		p.Multiplier = DefaultMultiplier
	}
	if p.MaxInterval <= 0 {
		p.MaxInterval = DefaultMaxInterval
	}
	p.Randomization = min(max(p.Randomization, 0), 1)
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = DefaultMaxElapsed
	}
	return p
}

// retryFrom is when the delivery's retry budget started.
func retryFrom(d *storage.Delivery, now time.Time) time.Time {
	switch {
	case !d.RetryFrom.IsZero():
		return d.RetryFrom
	case !d.CreatedAt.IsZero():
		return d.CreatedAt
	}
	return now
}

// nextInterval grows the persisted interval like ExponentialBackOff does
// between two NextBackOff calls: times the multiplier, capped at
// max_interval (0 = no wait yet: the initial interval).
func nextInterval(p storage.RetryPolicy, prev time.Duration) time.Duration {
	switch {
	case prev <= 0:
		return min(p.InitialInterval, p.MaxInterval)
	case float64(prev) >= float64(p.MaxInterval)/p.Multiplier:
		return p.MaxInterval
	}
	return time.Duration(float64(prev) * p.Multiplier)
}

// jitter draws the wait for an unrandomized interval with the library's
// randomization, and applies its max_elapsed rule with RetryFrom as the
// start: ok is false when the library says Stop.
func jitter(p storage.RetryPolicy, interval time.Duration, from, now time.Time) (time.Duration, bool) {
	clock := &fixedClock{t: from}
	b := &backoff.ExponentialBackOff{
		InitialInterval:     interval,
		RandomizationFactor: p.Randomization,
		Multiplier:          p.Multiplier,
		MaxInterval:         p.MaxInterval,
		MaxElapsedTime:      p.MaxElapsed,
		Stop:                backoff.Stop,
		Clock:               clock,
	}
	b.Reset() // the backoff "started" when the retry budget did
	clock.t = now
	wait := b.NextBackOff()
	// A huge max_interval with jitter overflows to a negative wait (other
	// than Stop): it was taken as "due at once", and the delivery was
	// retried without pause until max_attempts. And the library's own
	// max_elapsed check (elapsed+wait) can overflow past it: the delivery
	// was due in 2318, pending for good. Neither fits the budget.
	if wait < 0 || p.MaxElapsed > 0 && now.Add(wait).Sub(from) > p.MaxElapsed {
		return backoff.Stop, false
	}
	return wait, true
}

// fixedClock is a backoff.Clock that says what it is told: the backoff's
// start and now come from the persisted record, not the wall clock.
type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

// retryAfter returns the wait a 429 or 503 asks for in its Retry-After
// header (delay-seconds or HTTP date); ok is false without a usable one.
func retryAfter(a Answer, now time.Time) (time.Duration, bool) {
	if a.Err != nil || (a.StatusCode != http.StatusTooManyRequests && a.StatusCode != http.StatusServiceUnavailable) {
		return 0, false
	}
	return ParseRetryAfter(a.RetryAfter, now)
}

// ParseRetryAfter parses a Retry-After value (RFC 9110 §10.2.3): a number
// of seconds or an HTTP date, as a wait from now (never negative). ok is
// false when the value is neither.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	secs, err := strconv.ParseUint(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) && strings.Trim(v, "0123456789") == "" {
		secs, err = maxRetryAfterSeconds, nil // delay-seconds has no upper bound
	}
	if err == nil {
		return time.Duration(min(secs, maxRetryAfterSeconds)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
