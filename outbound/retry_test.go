package outbound

import (
	"errors"
	"hookgate/storage"
	"math"
	"net/http"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := storage.RetryPolicy{
		InitialInterval: 5 * time.Second, Multiplier: 2, MaxInterval: time.Minute,
		MaxAttempts: 10, MaxElapsed: 24 * time.Hour, // no randomization: exact waits
	}
	fresh := storage.Delivery{RetryFrom: now.Add(-time.Minute)}
	after := func(attempts int, interval time.Duration) storage.Delivery {
		d := fresh
		d.AttemptCount, d.Interval = attempts, interval
		return d
	}
	timeout := errors.New("timeout after 10s")
	for _, tc := range []struct {
		name     string
		d        storage.Delivery
		a        Answer
		verdict  Verdict
		wait     time.Duration // from now, for VerdictRetry
		interval time.Duration
	}{
		{"200", fresh, Answer{StatusCode: 200}, VerdictSucceeded, 0, 0},
		{"204", fresh, Answer{StatusCode: 204}, VerdictSucceeded, 0, 0},
		{"302 is a failure", fresh, Answer{StatusCode: 302}, VerdictRetry, 5 * time.Second, 5 * time.Second},
		{"410 disables", fresh, Answer{StatusCode: 410}, VerdictDisable, 0, 0},
		{"400 retried", fresh, Answer{StatusCode: 400}, VerdictRetry, 5 * time.Second, 5 * time.Second},
		{"500 grows", after(1, 5*time.Second), Answer{StatusCode: 500}, VerdictRetry, 10 * time.Second, 10 * time.Second},
		{"capped at max_interval", after(5, 40*time.Second), Answer{StatusCode: 500}, VerdictRetry, time.Minute, time.Minute},
		{"stays at max_interval", after(6, time.Minute), Answer{StatusCode: 502}, VerdictRetry, time.Minute, time.Minute},
		{"transport error", after(1, 5*time.Second), Answer{Err: timeout}, VerdictRetry, 10 * time.Second, 10 * time.Second},
		{"429 Retry-After seconds", fresh, Answer{StatusCode: 429, RetryAfter: "7"}, VerdictRetry, 7 * time.Second, 5 * time.Second},
		{"503 Retry-After date", fresh, Answer{StatusCode: 503, RetryAfter: now.Add(30 * time.Second).Format(http.TimeFormat)}, VerdictRetry, 30 * time.Second, 5 * time.Second},
		{"Retry-After capped", fresh, Answer{StatusCode: 429, RetryAfter: "3600"}, VerdictRetry, time.Minute, 5 * time.Second},
		{"Retry-After date in the past", fresh, Answer{StatusCode: 503, RetryAfter: now.Add(-time.Hour).Format(http.TimeFormat)}, VerdictRetry, 5 * time.Second, 5 * time.Second},
		{"Retry-After 0 keeps the backoff", after(2, 10*time.Second), Answer{StatusCode: 429, RetryAfter: "0"}, VerdictRetry, 20 * time.Second, 20 * time.Second},
		{"Retry-After shorter than the backoff", after(3, 20*time.Second), Answer{StatusCode: 503, RetryAfter: "7"}, VerdictRetry, 40 * time.Second, 40 * time.Second},
		{"Retry-After longer than the backoff", after(1, 5*time.Second), Answer{StatusCode: 429, RetryAfter: "45"}, VerdictRetry, 45 * time.Second, 10 * time.Second},
		{"Retry-After ignored on 500", fresh, Answer{StatusCode: 500, RetryAfter: "7"}, VerdictRetry, 5 * time.Second, 5 * time.Second},
		{"bad Retry-After falls back", fresh, Answer{StatusCode: 429, RetryAfter: "soon"}, VerdictRetry, 5 * time.Second, 5 * time.Second},
		{"max_attempts reached", after(9, time.Minute), Answer{StatusCode: 500}, VerdictFailed, 0, time.Minute},
		{"one attempt left", after(8, time.Minute), Answer{StatusCode: 500}, VerdictRetry, time.Minute, time.Minute},
		{"max_elapsed exceeded", storage.Delivery{AttemptCount: 3, Interval: time.Minute, RetryFrom: now.Add(-24*time.Hour + 30*time.Second)},
			Answer{StatusCode: 500}, VerdictFailed, 0, time.Minute},
		{"max_elapsed exactly reached", storage.Delivery{AttemptCount: 3, Interval: time.Minute, RetryFrom: now.Add(-24*time.Hour + time.Minute)},
			Answer{StatusCode: 500}, VerdictRetry, time.Minute, time.Minute},
		{"Retry-After beyond max_elapsed", storage.Delivery{AttemptCount: 3, RetryFrom: now.Add(-24*time.Hour + 5*time.Second)},
			Answer{StatusCode: 429, RetryAfter: "30"}, VerdictFailed, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec := Decide(p, &tc.d, tc.a, now)
			if dec.Verdict != tc.verdict {
				t.Fatalf("verdict %s, want %s (%+v)", dec.Verdict, tc.verdict, dec)
			}
			if dec.Interval != tc.interval {
				t.Errorf("interval %s, want %s", dec.Interval, tc.interval)
			}
			if tc.verdict == VerdictRetry && !dec.NextAttemptAt.Equal(now.Add(tc.wait)) {
				t.Errorf("next attempt in %s, want %s", dec.NextAttemptAt.Sub(now), tc.wait)
			}
			if tc.verdict == VerdictFailed && dec.Reason == "" {
				t.Error("a failed delivery needs a reason")
			}
		})
	}
}

func TestDecideJitterComesFromTheLibrary(t *testing.T) {
	now := time.Now()
	p := storage.RetryPolicy{InitialInterval: time.Second, Multiplier: 2, MaxInterval: time.Hour, Randomization: 0.5, MaxAttempts: 100, MaxElapsed: 48 * time.Hour}
	d := storage.Delivery{AttemptCount: 2, Interval: 4 * time.Second, RetryFrom: now}
	seen := map[time.Duration]bool{}
	for range 200 {
		dec := Decide(p, &d, Answer{StatusCode: 500}, now)
		wait := dec.NextAttemptAt.Sub(now)
		if wait < 4*time.Second || wait > 12*time.Second+time.Nanosecond {
			t.Fatalf("wait %s outside 8s ± 50%%", wait)
		}
		if dec.Interval != 8*time.Second {
			t.Fatalf("persisted interval %s, want the unrandomized 8s", dec.Interval)
		}
		seen[wait] = true
	}
	if len(seen) < 100 {
		t.Fatalf("only %d distinct waits in 200 draws: no jitter", len(seen))
	}
}

func TestWithDefaults(t *testing.T) {
	if got := WithDefaults(storage.RetryPolicy{}); got != DefaultRetryPolicy {
		t.Fatalf("zero policy = %+v, want the defaults", got)
	}
	got := WithDefaults(storage.RetryPolicy{InitialInterval: time.Millisecond, Randomization: 0})
	if got.InitialInterval != time.Millisecond || got.Randomization != 0 || got.MaxAttempts != DefaultMaxAttempts ||
		got.Multiplier != DefaultMultiplier || got.MaxInterval != DefaultMaxInterval || got.MaxElapsed != DefaultMaxElapsed {
		t.Fatalf("partial policy = %+v", got)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true},
		{"120", 2 * time.Minute, true},
		{" 5 ", 5 * time.Second, true},
		{"Sun, 01 Mar 2026 12:01:00 GMT", time.Minute, true},
		{"Sunday, 01-Mar-26 12:01:00 GMT", time.Minute, true}, // RFC 850
		{"Sun Mar  1 12:01:00 2026", time.Minute, true},       // asctime
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0, true},
		{"99999999999999999999", maxRetryAfterSeconds * time.Second, true}, // past uint64: the longest wait
		{"18446744073709551616", maxRetryAfterSeconds * time.Second, true},
		// Past uint64 and then not digits: not a Retry-After (FuzzDecide
		// found them honoured as the longest wait).
		{"18700000000000000000A0", 0, false},
		{"99999999999999999999 seconds", 0, false},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"", 0, false},
		{"tomorrow", 0, false},
	} {
		got, ok := ParseRetryAfter(tc.in, now)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	if got, ok := ParseRetryAfter("18446744073709551615", now); !ok || got <= 0 {
		t.Errorf("huge delay-seconds = %s, %v; want a large positive wait", got, ok)
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "Sun, 01 Mar 2026 12:01:00 GMT", "-1", "1e9", "18446744073709551615"} {
		f.Add(s)
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, s string) {
		if d, ok := ParseRetryAfter(s, now); d < 0 || (!ok && d != 0) {
			t.Fatalf("ParseRetryAfter(%q) = %s, %v", s, d, ok)
		}
	})
}

// A Retry-After in seconds is honoured up to max_interval (SPEC section
// 4) however many digits it has: delay-seconds is 1*DIGIT (RFC 9110
// section 10.2.3). One past 2^64-1 was ignored, and the receiver that
// asked for the longest wait was retried within milliseconds.
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
