package badger

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"hookgate/storage"
)

// Events kept for a fresh retry are skipped by Purge, and a call looks at
// no more than purgeScanBudget events. Calls must go on after the kept
// ones, or a head of kept events longer than the budget would stop
// retention for good (every call would look at the same events and
// delete nothing), and come back to them once they are finished.
func TestPurgeResumesPastKeptEvents(t *testing.T) {
	defer func(b int) { purgeScanBudget = b }(purgeScanBudget)
	purgeScanBudget = 2
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	cutoff := now.Add(-time.Hour)
	kept, doomed := keptAndDue(t, db, now, 6, 4)
	moveToLegacyKeys(t, db, doomed[1:]) // one in each key range

	purged := 0
	for range 10 {
		n, err := db.Purge(ctx, cutoff, cutoff, 100)
		if err != nil {
			t.Fatal(err)
		}
		purged += n
	}
	if purged != len(doomed) {
		t.Fatalf("purged %d events in 10 calls, want %d", purged, len(doomed))
	}
	for _, id := range doomed {
		if _, err := db.GetEvent(ctx, id); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("event %s not purged: %v", id, err)
		}
	}
	for _, id := range kept {
		if _, err := db.GetEvent(ctx, id); err != nil {
			t.Fatalf("event %s with a fresh retry: %v", id, err)
		}
	}

	// The retries finish: the next passes take the kept events too.
	jobs, err := db.Claim(ctx, "ep1", now, 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		err := db.Complete(ctx, &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil, CountAttempt: true,
			Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200}, State: storage.StateSucceeded})
		if err != nil {
			t.Fatal(err)
		}
	}
	purged = 0
	for range 10 {
		n, err := db.Purge(ctx, cutoff, cutoff, 100)
		if err != nil {
			t.Fatal(err)
		}
		purged += n
	}
	if purged != len(kept) {
		t.Fatalf("purged %d finished events, want %d", purged, len(kept))
	}
}

// Purge returns fewer than limit only once it has gone through every
// expired event: the gateway's sweep stops at such a call. A call whose
// transactions each delete less than limit (a budget of keys) goes on to
// the next one instead of returning short.
func TestPurgeReturnsShortOnlyAtTheEnd(t *testing.T) {
	defer func(b int) { purgeKeyBudget = b }(purgeKeyBudget)
	purgeKeyBudget = 6 // one event with its delivery per transaction
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	keptAndDue(t, db, now, 10, 0)
	var got []int
	for range 10 {
		n, err := db.Purge(context.Background(), now.Add(-time.Hour), now.Add(-time.Hour), 3)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
		if n < 3 {
			break
		}
	}
	if !slices.Equal(got, []int{3, 3, 3, 1}) {
		t.Fatalf("purged per call: %v, want [3 3 3 1]", got)
	}
}

// Purge deletes events received before cutoff. The time in an event's ID
// has whole milliseconds: in the cutoff's millisecond the record's
// received_at decides, as in a Postgres engine (received_at < cutoff).
// Until 2026-12-02 an event received after the cutoff in that millisecond
// was deleted.
func TestPurgeKeepsAnEventReceivedJustAfterTheCutoff(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	ms := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Millisecond)
	cutoff := ms.Add(400 * time.Microsecond)
	before := acceptRequest("before", `{}`, ms.Add(100*time.Microsecond), "ep1")
	after := acceptRequest("after", `{}`, ms.Add(800*time.Microsecond), "ep1")
	for _, r := range []*storage.AcceptRequest{before, after} {
		r.Deliveries = nil // nothing keeps them: only the cutoff decides
		if _, err := db.Accept(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	n, err := db.Purge(ctx, cutoff, cutoff, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.GetEvent(ctx, before.Event.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("event received before the cutoff was kept: %v", err)
	}
	if _, err := db.GetEvent(ctx, after.Event.ID); err != nil {
		t.Fatalf("event received %v after the cutoff was purged (purged %d): %v",
			after.Event.ReceivedAt.Sub(cutoff), n, err)
	}
}

// Complete "fails with ErrLeaseLost unless the delivery is still held
// under out.Lease": a claimed delivery that retention purged under an
// attempt in flight is not held. Until 2026-12-02 Complete answered
// ErrNotFound, which the dispatcher logged as an error.
func TestCompleteOfADeliveryPurgedInFlightIsLeaseLost(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	old := now.Add(-3 * time.Hour)
	if _, err := db.Accept(ctx, acceptRequest("inflight", `{}`, old, "ep1")); err != nil {
		t.Fatal(err)
	}
	jobs, err := db.Claim(ctx, "ep1", now, 1, time.Minute)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %+v", err, jobs)
	}
	// Its retry budget started before both cutoffs: retention takes it.
	cutoff := now.Add(-time.Hour)
	if k, err := db.Purge(ctx, cutoff, cutoff, 10); err != nil || k != 1 {
		t.Fatalf("purge: %d %v", k, err)
	}
	d := jobs[0].Delivery
	err = db.Complete(ctx, &storage.Outcome{Delivery: d.ID, Lease: d.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200}, State: storage.StateSucceeded})
	if !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("outcome of a purged in-flight delivery: %v, want ErrLeaseLost", err)
	}
}
