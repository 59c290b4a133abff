package outbound

import (
	"testing"
	"time"

	"hookgate/storage"
)

// TestRetryAfterPastUint64IsHonoured: SPEC section 4 honours a 429/503's
// Retry-After in seconds up to max_interval. delay-seconds is 1*DIGIT
// (RFC 9110 section 10.2.3) with no upper bound, and the gateway already
// caps 18446744073709551615 at max_interval; one more (a 20-digit value)
// is ignored instead, and the receiver that asked for the longest wait is
// retried on the plain backoff, within milliseconds. (Found by FuzzDecide.)
func TestRetryAfterPastUint64IsHonoured(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := storage.RetryPolicy{InitialInterval: 100 * time.Millisecond, Multiplier: 2, MaxInterval: 10 * time.Second,
		Randomization: 0, MaxAttempts: 10, MaxElapsed: time.Hour}
	for _, v := range []string{"18446744073709551615", "18446744073709551616", "99999999999999999999999"} {
		d := &storage.Delivery{CreatedAt: now, RetryFrom: now}
		dec := Decide(p, d, Answer{StatusCode: 503, RetryAfter: v}, now)
		if dec.Verdict != VerdictRetry || dec.NextAttemptAt.Sub(now) < p.MaxInterval {
			t.Errorf("503 with Retry-After: %s: %s in %s; want a retry after max_interval (%s)", v, dec.Verdict, dec.NextAttemptAt.Sub(now), p.MaxInterval)
		}
	}
}
