package outbound

import (
	"testing"
	"time"
)

func TestCircuit(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := &circuit{threshold: 3, minCool: 5 * time.Second, maxCool: 15 * time.Second}
	expect := func(wantN int, wantState circuitState) {
		t.Helper()
		if n, _ := c.allow(now); n != wantN || c.state != wantState {
			t.Fatalf("allow = %d in %s, want %d in %s", n, c.state, wantN, wantState)
		}
	}
	fail := func(probe bool) { c.record(false, probe, now) }

	fail(false)
	fail(false)
	c.record(true, false, now) // a success resets the count
	fail(false)
	fail(false)
	expect(unlimited, circuitClosed)
	fail(false)
	if n, until := c.allow(now); n != 0 || !until.Equal(now.Add(5*time.Second)) {
		t.Fatalf("after 3 failures: allow = %d until %s; want 0 until +5s", n, until)
	}
	fail(false) // an attempt claimed before the circuit opened: ignored
	expect(0, circuitOpen)

	now = now.Add(5 * time.Second)
	expect(1, circuitHalfOpen)
	if !c.claimed(1) {
		t.Fatal("the half-open claim is the probe")
	}
	expect(0, circuitHalfOpen) // one probe at a time
	fail(true)
	if _, until := c.allow(now); !until.Equal(now.Add(10 * time.Second)) {
		t.Fatalf("a failed probe reopens with a doubled cool-down, until %s", until)
	}
	now = now.Add(10 * time.Second)
	expect(1, circuitHalfOpen)
	c.claimed(1)
	fail(true)
	if _, until := c.allow(now); !until.Equal(now.Add(15 * time.Second)) {
		t.Fatalf("the cool-down is capped at maxCool, until %s", until)
	}
	now = now.Add(15 * time.Second)
	expect(1, circuitHalfOpen)
	c.claimed(1)
	if from, to := c.record(true, true, now); from != circuitHalfOpen || to != circuitClosed {
		t.Fatalf("a successful probe: %s -> %s", from, to)
	}
	expect(unlimited, circuitClosed)
	for range 3 {
		fail(false)
	}
	if _, until := c.allow(now); !until.Equal(now.Add(5 * time.Second)) {
		t.Fatal("after closing, the cool-down starts over")
	}
}
