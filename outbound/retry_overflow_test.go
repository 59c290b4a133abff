package outbound

import (
	"math"
	"testing"
	"time"

	"hookgate/storage"
)

// TestRetryWaitPastMaxElapsedNeverSchedules: the fix of
// TestHugeRetryIntervalNeverRetriesAtOnce takes "the library's wait is
// negative" as the only sign of an overflow. The library's max_elapsed
// check, elapsed+next > MaxElapsedTime, overflows too: with a wait near
// the top of a Duration and a retry budget a few weeks old, the sum wraps
// negative, the library returns the wait, and the delivery is scheduled
// ~292 years ahead (pending for good: neither retried nor failed) instead
// of failing by max_elapsed. (On arm64 the float conversion of an
// overflowing jittered wait saturates to MaxInt64 instead of going
// negative, and any elapsed > 0 then takes this path: the plain case of
// TestHugeRetryIntervalNeverRetriesAtOnce.) Here: a delivery 30 days into
// a 60-day budget whose endpoint's max_interval was PATCHed to ~292 years.
func TestRetryWaitPastMaxElapsedNeverSchedules(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	maxInterval := time.Duration(math.MaxInt64 - 13e14) // 292 years less ~15 days
	p := storage.RetryPolicy{
		InitialInterval: time.Second, Multiplier: 2, MaxInterval: maxInterval,
		Randomization: 1e-4, MaxAttempts: 1000, MaxElapsed: 60 * 24 * time.Hour,
	}
	d := storage.Delivery{
		AttemptCount: 20, Interval: maxInterval,
		CreatedAt: now.Add(-30 * 24 * time.Hour), RetryFrom: now.Add(-30 * 24 * time.Hour),
	}
	for range 50 { // the wait is drawn at random; every draw must fail
		dec := Decide(p, &d, Answer{StatusCode: 500}, now)
		if dec.Verdict != VerdictFailed {
			t.Fatalf("verdict %v, next attempt at %v (%v after the budget started; max_elapsed %v): want failed",
				dec.Verdict, dec.NextAttemptAt, dec.NextAttemptAt.Sub(d.RetryFrom), p.MaxElapsed)
		}
	}
}
