// Package testsupport holds the helpers that tests of several packages
// share, written once.
package testsupport

import (
	"testing"
	"time"
)

// pollEvery is how often WaitFor looks again.
const pollEvery = 5 * time.Millisecond

// WaitFor polls cond until it holds, and fails the test, naming what it
// waited for, once timeout has passed: a wait with a deadline, never a
// fixed sleep.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(pollEvery) // polling step
	}
}
