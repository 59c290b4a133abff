package badger

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"hookgate/storage"
)

// NextDue is the dispatcher's only wake-up besides its
// poll: a time later than the earliest due delivery (or ok false while
// one is live) delays it by up to the poll interval. Under a random mix of
// Ingest, Claim, Complete (retry, success), Release (to a time, or to the
// due time before the claim), Retry and Enqueue, NextDue never reports a
// time after the earliest live due time, Depth counts exactly the live
// deliveries, and a claim at a time takes exactly those due then.
func TestNextDueAndDepthFollowTheOutbox(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { nextDueModel(t, seed) })
	}
}

func nextDueModel(t *testing.T, seed uint64) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	r := rand.New(rand.NewPCG(seed, 2))
	base := time.Now().UTC().Truncate(time.Second)
	clock := base
	var ids []string
	held := map[string]storage.Job{}
	earliest := func() (time.Time, int, bool) {
		var min time.Time
		live := 0
		for _, id := range ids {
			d, err := db.GetDelivery(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if d.State.Terminal() {
				continue
			}
			live++
			at := dueAt(&d)
			if min.IsZero() || at.Before(min) {
				min = at
			}
		}
		return min, live, live > 0
	}
	for step := range 400 {
		clock = clock.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
		switch op := r.IntN(7); {
		case op == 0 || len(ids) == 0:
			at := clock.Add(time.Duration(r.IntN(20)-10) * time.Second)
			req := acceptRequest(fmt.Sprint("m-", step), `{}`, at, "ep1")
			if _, err := db.Ingest(ctx, req); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, req.Deliveries[0].ID)
		case op == 1:
			jobs, err := db.Claim(ctx, "ep1", clock, 1+r.IntN(3), time.Duration(1+r.IntN(30))*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				held[j.Delivery.ID] = j
			}
		case op == 2 || op == 3:
			for id, j := range held {
				st := storage.StatePending
				if op == 3 {
					st = storage.StateSucceeded
				}
				next := clock.Add(time.Duration(r.IntN(40)-20) * time.Second)
				err := db.Complete(ctx, &storage.Outcome{Delivery: id, Lease: j.Delivery.LeaseUntil, CountAttempt: true,
					Attempt: storage.Attempt{N: j.Delivery.AttemptCount + 1, At: clock}, State: st, NextAttemptAt: next})
				if err != nil && err != storage.ErrLeaseLost {
					t.Fatal(err)
				}
				delete(held, id)
				break
			}
		case op == 4:
			for id, j := range held {
				due := time.Time{}
				if r.IntN(2) == 0 {
					due = clock.Add(time.Duration(r.IntN(20)-10) * time.Second)
				}
				if err := db.Release(ctx, []string{id}, j.Delivery.LeaseUntil, due); err != nil {
					t.Fatal(err)
				}
				delete(held, id)
				break
			}
		case op == 5:
			id := ids[r.IntN(len(ids))]
			if _, err := db.Retry(ctx, id, clock); err == nil {
				delete(held, id)
			}
		default:
			d, err := db.GetDelivery(ctx, ids[r.IntN(len(ids))])
			if err != nil {
				t.Fatal(err)
			}
			d.ID = storage.NewID("dlv_", clock)
			d.State, d.LeaseUntil, d.AttemptCount = storage.StatePending, time.Time{}, 0
			d.NextAttemptAt = clock.Add(time.Duration(r.IntN(20)-10) * time.Second)
			if err := db.Enqueue(ctx, []storage.Delivery{d}); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, d.ID)
		}
		want, live, any := earliest()
		due, ok, err := db.NextDue(ctx, "ep1")
		if err != nil {
			t.Fatal(err)
		}
		if any && (!ok || due.After(want)) {
			t.Fatalf("step %d: NextDue %v %v, but a delivery is due at %v", step, due, ok, want)
		}
		if n, _, err := db.Depth(ctx, "ep1", clock, 1<<20); err != nil || n != live {
			t.Fatalf("step %d: Depth %d live (%v), want %d", step, n, err, live)
		}
	}
	// Finally a claim far ahead takes every live delivery, once.
	far := clock.Add(time.Hour)
	_, live, _ := earliest()
	got := 0
	for {
		jobs, err := db.Claim(ctx, "ep1", far, 50, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			break
		}
		got += len(jobs)
	}
	if got != live {
		t.Fatalf("a claim after every lease took %d of %d live deliveries", got, live)
	}
}
