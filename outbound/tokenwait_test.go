package outbound

import (
	"testing"
	"time"

	"hookgate/storage"
)

func TestTokenWait(t *testing.T) {
	poll := time.Second
	for _, tc := range []struct {
		tokens, limit float64
		want          time.Duration
	}{
		{0, 10, 100 * time.Millisecond},
		{0.5, 1, 500 * time.Millisecond},
		{0, 0.5, poll},                      // 2 s away: plan again after poll
		{0, 1e-10, poll},                    // a wait that does not fit in a Duration
		{0, 1e-300, poll},                   // nor in a float64 (+Inf)
		{-5, 1e-300, poll},                  //
		{0.99999999, 1e9, time.Millisecond}, // at least minIdleWait
	} {
		if got := tokenWait(tc.tokens, tc.limit, poll); got != tc.want {
			t.Errorf("tokenWait(%v, %v) = %v, want %v", tc.tokens, tc.limit, got, tc.want)
		}
	}
}

// An endpoint stored before max_in_flight was bounded keeps its value,
// but no more than MaxMaxInFlight attempts go to it at once.
func TestMaxInFlightIsCapped(t *testing.T) {
	for _, c := range []struct{ set, want int }{{0, DefaultMaxInFlight}, {3, 3}, {MaxMaxInFlight, MaxMaxInFlight}, {1 << 30, MaxMaxInFlight}} {
		if got := maxInFlight(&storage.Endpoint{MaxInFlight: c.set}); got != c.want {
			t.Errorf("max_in_flight %d: %d slots, want %d", c.set, got, c.want)
		}
	}
}
