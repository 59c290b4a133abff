package badger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
)

// Several claimers of one endpoint (two gateways on one
// Postgres store, or a loop's pass and its paused-endpoint sweep) never
// hold the same delivery under live leases at once, and together they
// take every due delivery.
func TestConcurrentClaimersNeverShareADelivery(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	const n = 300
	for i := range n {
		if _, err := db.Ingest(ctx, acceptRequest(fmt.Sprint("cc-", i), `{}`, now.Add(-time.Duration(n-i)*time.Microsecond), "ep1")); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	owner := map[string]int{}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for {
				jobs, err := db.Claim(ctx, "ep1", now, 7, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if len(jobs) == 0 {
					return
				}
				mu.Lock()
				for _, j := range jobs {
					if prev, dup := owner[j.Delivery.ID]; dup {
						t.Errorf("delivery %s claimed by claimer %d and %d under live leases", j.Delivery.ID, prev, w)
					}
					owner[j.Delivery.ID] = w
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(owner) != n {
		t.Fatalf("%d of %d due deliveries were claimed", len(owner), n)
	}
}

// The holder of an expired lease completing while
// another worker claims the delivery again: exactly one of them owns the
// delivery. Either the late outcome is stored (and the claim does not see
// the delivery as due: it was not retried, or is due at its new time), or
// the claim takes it and the late outcome is ErrLeaseLost, with no
// attempt written.
func TestLateCompleteRacesAReclaim(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	base := time.Now().UTC()
	for round := range 40 {
		now := base.Add(time.Duration(round) * time.Hour)
		req := acceptRequest(fmt.Sprint("lc-", round), `{}`, now, "ep1")
		if _, err := db.Ingest(ctx, req); err != nil {
			t.Fatal(err)
		}
		first, err := db.Claim(ctx, "ep1", now, 10, time.Minute)
		if err != nil || len(first) != 1 {
			t.Fatalf("round %d: claim: %v %+v", round, err, first)
		}
		d := first[0].Delivery
		later := now.Add(2 * time.Minute) // the first lease is over
		var wg sync.WaitGroup
		var cerr error
		var again []storage.Job
		wg.Go(func() {
			cerr = db.Complete(ctx, &storage.Outcome{Delivery: d.ID, Lease: d.LeaseUntil, CountAttempt: true,
				Attempt: storage.Attempt{N: 1, At: later, StatusCode: 200}, State: storage.StateSucceeded})
		})
		wg.Go(func() {
			var err error
			again, err = db.Claim(ctx, "ep1", later, 10, time.Minute)
			if err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		got, err := db.GetDelivery(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		atts, err := db.ListAttempts(ctx, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case cerr == nil && len(again) == 0:
			if got.State != storage.StateSucceeded || len(atts) != 1 {
				t.Fatalf("round %d: late outcome stored, but delivery %+v attempts %d", round, got, len(atts))
			}
		case errors.Is(cerr, storage.ErrLeaseLost) && len(again) == 1:
			if got.State != storage.StateDelivering || !got.LeaseUntil.Equal(again[0].Delivery.LeaseUntil) || len(atts) != 0 {
				t.Fatalf("round %d: reclaimed, but delivery %+v attempts %d", round, got, len(atts))
			}
			// Finish it so the next round's claim sees only its own.
			if err := db.Complete(ctx, &storage.Outcome{Delivery: d.ID, Lease: again[0].Delivery.LeaseUntil, CountAttempt: true,
				Attempt: storage.Attempt{N: 1, At: later, StatusCode: 200}, State: storage.StateSucceeded}); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("round %d: late complete %v and reclaim of %d: both or neither own the delivery", round, cerr, len(again))
		}
	}
}

// A worker whose lease ran out, after an operator's
// Retry of the delivery and a new claim, can neither record its outcome
// (ErrLeaseLost, no attempt written over the new one's number) nor give
// back the new claim.
func TestStaleHolderAfterRetryAndReclaim(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	req := acceptRequest("stale", `{}`, now, "ep1")
	if _, err := db.Ingest(ctx, req); err != nil {
		t.Fatal(err)
	}
	old, err := db.Claim(ctx, "ep1", now, 1, time.Minute)
	if err != nil || len(old) != 1 {
		t.Fatalf("claim: %v %+v", err, old)
	}
	od := old[0].Delivery
	at := od.LeaseUntil.Add(time.Second)
	if _, err := db.Retry(ctx, od.ID, at); err != nil {
		t.Fatalf("retry after the lease: %v", err)
	}
	if err := db.Complete(ctx, &storage.Outcome{Delivery: od.ID, Lease: od.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: at, StatusCode: 500, Error: "stale"}, State: storage.StatePending, NextAttemptAt: at.Add(time.Hour)}); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("late outcome after a retry: %v, want ErrLeaseLost", err)
	}
	nw, err := db.Claim(ctx, "ep1", at, 1, time.Minute)
	if err != nil || len(nw) != 1 {
		t.Fatalf("claim of the retried delivery: %v %+v", err, nw)
	}
	if err := db.Release(ctx, []string{od.ID}, od.LeaseUntil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := db.Complete(ctx, &storage.Outcome{Delivery: od.ID, Lease: od.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: at, StatusCode: 500, Error: "stale"}, State: storage.StateFailed}); !errors.Is(err, storage.ErrLeaseLost) {
		t.Fatalf("late outcome after a reclaim: %v, want ErrLeaseLost", err)
	}
	got, err := db.GetDelivery(ctx, od.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != storage.StateDelivering || !got.LeaseUntil.Equal(nw[0].Delivery.LeaseUntil) {
		t.Fatalf("the new claim was disturbed by the stale holder: %+v", got)
	}
	if atts, _ := db.ListAttempts(ctx, od.ID); len(atts) != 0 {
		t.Fatalf("a stale holder's attempt was written: %+v", atts)
	}
}

// Purge racing claims of the deliveries of the events it
// deletes: every job a claim returns carries its event (the dispatcher
// sends Job.Event as is), and every delivery is either purged with its
// event or still there.
func TestPurgeRacesClaim(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	old := now.Add(-3 * time.Hour)
	const n = 200
	for i := range n {
		if _, err := db.Ingest(ctx, acceptRequest(fmt.Sprint("pc-", i), `{"x":1}`, old.Add(time.Duration(i)*time.Microsecond), "ep1")); err != nil {
			t.Fatal(err)
		}
	}
	cutoff := now.Add(-time.Hour)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			k, err := db.Purge(ctx, cutoff, cutoff, 7)
			if err != nil {
				t.Error(err)
				return
			}
			if k < 7 {
				return
			}
		}
	})
	var claimed []storage.Job
	wg.Go(func() {
		for range 100 {
			jobs, err := db.Claim(ctx, "ep1", now, 5, time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			claimed = append(claimed, jobs...)
		}
	})
	wg.Wait()
	for _, j := range claimed {
		if j.Event.ID != j.Delivery.Event || string(j.Event.Body) != `{"x":1}` {
			t.Fatalf("a claimed job without its event: %+v", j)
		}
	}
	// Anything the racing purge left is gone after one more.
	if _, err := db.Purge(ctx, cutoff, cutoff, 1000); err != nil {
		t.Fatal(err)
	}
	if left := countKeys(t, db, prefixQueue); left != 0 {
		t.Fatalf("%d outbox entries left after every event was purged", left)
	}
	if left := countKeys(t, db, prefixDelivery); left != 0 {
		t.Fatalf("%d delivery records left after every event was purged", left)
	}
}
