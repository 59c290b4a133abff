package badger

import (
	"context"
	"errors"
	"hookgate/storage"
	"slices"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
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
// In an earlier version, an event received after the cutoff in that millisecond
// was deleted.
func TestPurgeKeepsAnEventReceivedJustAfterTheCutoff(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	ms := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Millisecond)
	cutoff := ms.Add(400 * time.Microsecond)
	before := acceptRequest("before", `{}`, ms.Add(100*time.Microsecond), "ep1")
	after := acceptRequest("after", `{}`, ms.Add(800*time.Microsecond), "ep1")
	for _, r := range []*storage.IngestRequest{before, after} {
		r.Deliveries = nil // nothing keeps them: only the cutoff decides
		if _, err := db.Ingest(ctx, r); err != nil {
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
// attempt in flight is not held. In an earlier version, Complete answered
// ErrNotFound, which the dispatcher logged as an error.
func TestCompleteOfADeliveryPurgedInFlightIsLeaseLost(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	old := now.Add(-3 * time.Hour)
	if _, err := db.Ingest(ctx, acceptRequest("inflight", `{}`, old, "ep1")); err != nil {
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

// One delivery whose own keys (its attempts) are more than Badger takes in
// one transaction goes over several too, attempts first. Found in review:
// the split took a delivery whole, however big, so the transaction failed
// on every sweep and retention stopped for good at this event. Attempts
// are not bounded (max_attempts has no upper limit; 1 s intervals over a
// max_elapsed of a day are ~86,000 attempts; manual retries add more).
func TestPurgeOneDeliveryTooBigForOneTransaction(t *testing.T) {
	// Same ratio as production (16,384 budget / ~52,000 Badger limit):
	// 1 MiB memtables take ~3,300 keys per transaction.
	defer func(b int) { purgeKeyBudget = b }(purgeKeyBudget)
	purgeKeyBudget = 1000
	ctx := context.Background()
	db := openTestDB(t, Options{MemTableSize: 1 << 20})
	then := time.Now().UTC().Add(-2 * time.Hour)
	req := acceptFor(t, db, "acme", "heavy", then, "ep1")
	dlv := req.Deliveries[0].ID
	for chunk := range 10 { // 5,000 attempts of the one delivery
		err := db.update(ctx, 0, func(txn *bdg.Txn) error {
			for i := range 500 {
				if err := txn.Set(attemptKey(dlv, chunk*500+i+1), []byte(`{}`)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	acceptFor(t, db, "acme", "light", then.Add(time.Millisecond), "ep1")

	n, err := db.Purge(ctx, then.Add(time.Hour), then.Add(time.Hour), 100)
	if err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v; want 2 events deleted, no error", n, err)
	}
	for _, p := range [][]byte{prefixAttempt, prefixDelivery, prefixEventDelivery, prefixEvent} {
		if n := countKeys(t, db, p); n != 0 {
			t.Errorf("%d keys left under %q", n, p)
		}
	}
}

// An event whose keys (its deliveries' records, indexes and attempts) are
// more than one transaction may delete is purged over several, a few
// whole deliveries at a time, and leaves no key behind. Before, it was
// deleted in one transaction or not at all: past Badger's limit (~52,000
// keys, thousands of replays of one event) every sweep failed on it and
// retention stopped for good.
func TestPurgeSplitsAnEventTooBigForOneTransaction(t *testing.T) {
	// With 1 MiB memtables Badger takes ~3,300 keys per transaction; the
	// event below has ~4,000 (1,000 deliveries of 4 keys).
	defer func(b int) { purgeKeyBudget = b }(purgeKeyBudget)
	purgeKeyBudget = 1000
	ctx := context.Background()
	db := openTestDB(t, Options{MemTableSize: 1 << 20})
	then := time.Now().UTC().Add(-2 * time.Hour)
	heavy := acceptRequest("heavy", `{}`, then, "ep1")
	if _, err := db.Ingest(ctx, heavy); err != nil {
		t.Fatal(err)
	}
	for range 5 { // replays, finished long ago
		var more []storage.Delivery
		for range 200 {
			d := heavy.Deliveries[0]
			d.ID = storage.NewID("dlv_", then)
			d.State = storage.StateFailed
			more = append(more, d)
		}
		if err := db.Enqueue(ctx, more); err != nil {
			t.Fatal(err)
		}
	}
	light := acceptRequest("light", `{}`, then.Add(time.Millisecond), "ep1")
	if _, err := db.Ingest(ctx, light); err != nil {
		t.Fatal(err)
	}

	purged := 0
	for range 20 {
		n, err := db.Purge(ctx, then.Add(time.Hour), then.Add(time.Hour), 100)
		if err != nil {
			t.Fatalf("purge: %v", err)
		}
		if n == 0 {
			break
		}
		purged += n
	}
	if purged != 2 {
		t.Fatalf("purged %d events, want 2", purged)
	}
	for _, p := range [][]byte{prefixEvent, prefixTenantEvent, prefixDelivery, prefixEventDelivery,
		prefixEndpointDelivery, prefixTenantDelivery, prefixQueue, prefixAttempt} {
		if n := countKeys(t, db, p); n != 0 {
			t.Errorf("%d keys left under %q", n, p)
		}
	}
}

// A run of kept events longer than purgeScanBudget, in the legacy "ev:"
// range, ahead of due events in "ae:": one sweep (the gateway calls Purge
// until it deletes nothing) must purge every due event. Found in review:
// a call that ended the pass in "ev:" but stopped in "ae:" started "ev:"
// over in the next call, which then walked the kept run again and deleted
// nothing, so each minute's sweep deleted one batch at most.
func TestPurgeSweepGoesPastKeptLegacyEvents(t *testing.T) {
	defer func(b int) { purgeScanBudget = b }(purgeScanBudget)
	purgeScanBudget = 4
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	cutoff := now.Add(-time.Hour)
	kept, doomed := keptAndDue(t, db, now, 17, 5)
	moveToLegacyKeys(t, db, kept) // the kept head is in the legacy range

	// As gateway/background.go: call Purge until a call deletes nothing.
	sweep := func() int {
		total := 0
		for range 100 {
			n, err := db.Purge(ctx, cutoff, cutoff, 256)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			total += n
		}
		return total
	}
	if purged := sweep(); purged != len(doomed) {
		t.Fatalf("one sweep purged %d of %d due events", purged, len(doomed))
	}
	for _, id := range kept {
		if _, err := db.GetEvent(ctx, id); err != nil {
			t.Fatalf("kept event %s: %v", id, err)
		}
	}
}
