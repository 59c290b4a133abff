package storagetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"hookgate/storage"
)

// The promises of storage.Gates: an endpoint's rate_limit, circuit breaker
// and receiver's pause kept by a shared store, checked across two handles
// on its data (two gateways). An engine without them (one process's, whose
// dispatcher keeps them itself) skips these.

var gatePolicy = storage.CircuitPolicy{Failures: 2, Cooldown: time.Second, MaxCooldown: 4 * time.Second}

// gated returns the two handles as Gates, or skips the test.
func gated(t *testing.T, o Opener) (storage.Store, storage.Gates, storage.Gates) {
	t.Helper()
	s := open(t, o)
	hs := handles(t, o, s)
	a, okA := hs[0].(storage.Gates)
	b, okB := hs[len(hs)-1].(storage.Gates)
	if !okA || !okB {
		t.Skip("the engine keeps no gates: its dispatcher does")
	}
	return s, a, b
}

// queue stores endpoint ep and n due deliveries to it, at now.
func queue(t *testing.T, s storage.Store, ep storage.Endpoint, n int, now time.Time) {
	t.Helper()
	ctx := context.Background()
	ep.Tenant, ep.CreatedAt, ep.UpdatedAt = "acme", now, now
	ok(s.PutEndpoint(ctx, &ep))
	for i := range n {
		must(s.Ingest(ctx, Event("acme", "stripe", fmt.Sprintf("%s-%d", ep.ID, i), "b", now, ep.ID)))
	}
}

// take is a gated claim's jobs, leased for a minute.
func take(g storage.Gates, endpoint string, at time.Time, limit int) []storage.Job {
	jobs, _ := must2(g.ClaimGated(context.Background(), endpoint, at, limit, time.Minute, gatePolicy))
	return jobs
}

// outcome records a claimed job's last attempt (failed or succeeded),
// counted for the circuit.
func outcome(t *testing.T, s storage.Store, j storage.Job, success bool, at time.Time) {
	t.Helper()
	out := &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil, CountAttempt: true, Circuit: true,
		Attempt: storage.Attempt{N: j.Delivery.AttemptCount + 1, At: at, StatusCode: 500}, State: storage.StateFailed}
	if success {
		out.Attempt.StatusCode, out.State = 200, storage.StateSucceeded
	}
	ok(s.Complete(context.Background(), out))
}

// An endpoint's rate_limit is the cluster's: two gateways claiming at
// once take a bucket of a tenth of a second's worth between them, and
// after it is empty they are told when the next token comes.
func testGatedRateIsShared(t *testing.T, o Opener) {
	s, a, b := gated(t, o)
	ctx, now := context.Background(), time.Now().UTC()
	queue(t, s, storage.Endpoint{ID: "ep", URL: "https://r.example/hook", RateLimit: 50}, 20, now)
	total := 0
	for i, g := range []storage.Gates{a, b, a, b} {
		jobs, wait := must2(g.ClaimGated(ctx, "ep", now, 10, time.Minute, gatePolicy))
		total += len(jobs)
		if i > 0 && len(jobs) == 0 && (wait.Paused || !wait.Until.After(now) || wait.Until.After(now.Add(100*time.Millisecond))) {
			t.Fatalf("an empty bucket's wait: %+v, want the next token within 20 ms, not paused", wait)
		}
	}
	if total != 5 {
		t.Fatalf("two gateways claimed %d deliveries at once at rate_limit 50, want the bucket's 5", total)
	}
	later := now.Add(100 * time.Millisecond) // 5 more tokens
	more := len(take(b, "ep", later, 10)) +
		len(take(a, "ep", later, 10))
	if more != 5 {
		t.Fatalf("100 ms later the two claimed %d more, want 5", more)
	}
}

// The circuit is the cluster's: failures on two gateways count together,
// once open neither claims, after the cool-down one probe goes (not one
// per gateway), a failed probe doubles the cool-down, a good one closes it.
func testGatedCircuitIsShared(t *testing.T, o Opener) {
	s, a, b := gated(t, o)
	ctx, now := context.Background(), time.Now().UTC()
	queue(t, s, storage.Endpoint{ID: "ep", URL: "https://c.example/hook"}, 6, now)
	claim := func(g storage.Gates, at time.Time, limit int) ([]storage.Job, storage.GateWait) {
		t.Helper()
		return must2(g.ClaimGated(ctx, "ep", at, limit, time.Minute, gatePolicy))
	}
	j1, _ := claim(a, now, 1)
	j2, _ := claim(b, now, 1)
	if len(j1) != 1 || len(j2) != 1 {
		t.Fatalf("claims of a closed circuit took %d and %d, want 1 each", len(j1), len(j2))
	}
	outcome(t, s, j1[0], false, now)
	outcome(t, s, j2[0], false, now) // the second failure in a row, from the other gateway: open
	for _, g := range []storage.Gates{a, b} {
		if jobs, wait := claim(g, now.Add(500*time.Millisecond), 10); len(jobs) != 0 || !wait.Paused || !wait.Until.Equal(now.Add(time.Second)) {
			t.Fatalf("claim of an open circuit: %d jobs, wait %+v; want none, paused until %v", len(jobs), wait, now.Add(time.Second))
		}
	}
	half := now.Add(time.Second)
	probe, _ := claim(a, half, 10)
	if len(probe) != 1 {
		t.Fatalf("after the cool-down the claim took %d, want one probe", len(probe))
	}
	if jobs, wait := claim(b, half, 10); len(jobs) != 0 || !wait.Paused {
		t.Fatalf("the other gateway's claim while the probe is out: %d jobs, wait %+v; want none, paused", len(jobs), wait)
	}
	outcome(t, s, probe[0], false, half)
	if jobs, wait := claim(b, half.Add(1500*time.Millisecond), 10); len(jobs) != 0 || !wait.Until.Equal(half.Add(2*time.Second)) {
		t.Fatalf("after a failed probe: %d jobs, wait %+v; want none until %v (twice the cool-down)", len(jobs), wait, half.Add(2*time.Second))
	}
	again := half.Add(2 * time.Second)
	probe, _ = claim(b, again, 10)
	if len(probe) != 1 {
		t.Fatalf("after the second cool-down the claim took %d, want one probe", len(probe))
	}
	outcome(t, s, probe[0], true, again)
	if jobs, _ := claim(a, again, 10); len(jobs) != 2 {
		t.Fatalf("after a good probe the claim took %d, want the 2 left (closed)", len(jobs))
	}
}

// A probe given back unsent (a shutdown) lets another gateway probe.
func testGatedReleasedProbe(t *testing.T, o Opener) {
	s, a, b := gated(t, o)
	ctx, now := context.Background(), time.Now().UTC()
	queue(t, s, storage.Endpoint{ID: "ep", URL: "https://p.example/hook"}, 3, now)
	jobs := take(a, "ep", now, 2)
	for _, j := range jobs {
		outcome(t, s, j, false, now)
	}
	half := now.Add(time.Second)
	probe := take(a, "ep", half, 10)
	if len(probe) != 1 {
		t.Fatalf("probe claim took %d, want 1", len(probe))
	}
	ok(s.Release(ctx, []string{probe[0].Delivery.ID}, probe[0].Delivery.LeaseUntil, half))
	if other := take(b, "ep", half, 10); len(other) != 1 {
		t.Fatalf("after the probe was released another gateway's claim took %d, want one probe", len(other))
	}
	// An operator's resume of the half-open circuit is its recovery, once.
	if wasOpen := must(a.ResumeEndpoint(ctx, "ep")); !wasOpen {
		t.Fatal("ResumeEndpoint of a half-open circuit says it was not open")
	}
	if wasOpen := must(b.ResumeEndpoint(ctx, "ep")); wasOpen {
		t.Fatal("a second ResumeEndpoint says the circuit was open again")
	}
}

// A receiver's pause, written with one gateway's outcome, holds every
// gateway's claims while it lasts, unless it was asked by another URL than
// the endpoint's now; an operator's resume ends it for all.
func testGatedHoldIsShared(t *testing.T, o Opener) {
	s, a, b := gated(t, o)
	ctx, now := context.Background(), time.Now().UTC()
	const url = "https://h.example/hook"
	queue(t, s, storage.Endpoint{ID: "ep", URL: url}, 4, now)
	j := take(a, "ep", now, 1)
	until := now.Add(time.Minute)
	ok(s.Complete(ctx, &storage.Outcome{Delivery: j[0].Delivery.ID, Lease: j[0].Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 429}, State: storage.StatePending, NextAttemptAt: until,
		Hold: until, HoldURL: url}))
	if jobs, wait := must2(b.ClaimGated(ctx, "ep", now.Add(time.Second), 10, time.Minute, gatePolicy)); len(jobs) != 0 || !wait.Paused || !wait.Until.Equal(until) {
		t.Fatalf("the other gateway's claim during the pause: %d jobs, wait %+v; want none, paused until %v", len(jobs), wait, until)
	}
	if wasOpen := must(b.ResumeEndpoint(ctx, "ep")); wasOpen {
		t.Fatal("ResumeEndpoint of a receiver's pause says the circuit was open")
	}
	if jobs := take(a, "ep", now.Add(time.Second), 10); len(jobs) != 3 {
		t.Fatalf("after an operator's resume the claim took %d, want the 3 due", len(jobs))
	}

	queue(t, s, storage.Endpoint{ID: "moved", URL: "https://new.example/hook"}, 2, now)
	j = take(a, "moved", now, 1)
	ok(s.Complete(ctx, &storage.Outcome{Delivery: j[0].Delivery.ID, Lease: j[0].Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 429}, State: storage.StatePending, NextAttemptAt: now,
		Hold: until, HoldURL: "https://old.example/hook"}))
	if jobs := take(b, "moved", now, 10); len(jobs) != 2 {
		t.Fatalf("a pause asked by another URL held the endpoint: the claim took %d, want 2", len(jobs))
	}
}

// An endpoint enabled again, or moved to another URL, starts with a
// closed circuit and no pause, on every gateway: what opened them was the
// old endpoint's receiver.
func testGatedEndpointChangeResets(t *testing.T, o Opener) {
	s, a, b := gated(t, o)
	ctx, now := context.Background(), time.Now().UTC()
	queue(t, s, storage.Endpoint{ID: "ep", URL: "https://x.example/hook"}, 6, now)
	open := func() {
		t.Helper()
		for _, j := range take(a, "ep", now, 2) {
			outcome(t, s, j, false, now)
		}
		if jobs, wait := must2(b.ClaimGated(ctx, "ep", now, 10, time.Minute, gatePolicy)); len(jobs) != 0 || !wait.Paused {
			t.Fatalf("after two failures: %d jobs, wait %+v; want the circuit open", len(jobs), wait)
		}
	}
	update := func(fn func(*storage.Endpoint)) {
		t.Helper()
		must(s.UpdateEndpoint(ctx, "ep", func(ep *storage.Endpoint) error { fn(ep); return nil }))
	}
	open()
	update(func(ep *storage.Endpoint) { ep.Disabled = true })
	update(func(ep *storage.Endpoint) { ep.Disabled = false })
	if jobs := take(b, "ep", now, 2); len(jobs) != 2 {
		t.Fatalf("after a disable and enable the claim took %d, want 2 (circuit closed)", len(jobs))
	} else {
		for _, j := range jobs {
			outcome(t, s, j, false, now)
		}
	}
	if jobs, wait := must2(a.ClaimGated(ctx, "ep", now, 10, time.Minute, gatePolicy)); len(jobs) != 0 || !wait.Paused {
		t.Fatalf("after two more failures: %d jobs, wait %+v; want the circuit open again", len(jobs), wait)
	}
	update(func(ep *storage.Endpoint) { ep.URL = "https://y.example/hook" })
	if jobs := take(a, "ep", now, 10); len(jobs) == 0 {
		t.Fatal("after a move to another URL the circuit still held the endpoint")
	}
}
