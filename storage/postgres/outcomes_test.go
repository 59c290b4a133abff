package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"hookgate/internal/pgtest"
	"hookgate/storage"
	"hookgate/storage/storagetest"
)

// Outcomes ending at once are committed in groups, and each keeps its own
// result: a lost lease is that outcome's ErrLeaseLost, a statement the
// database refuses fails that outcome alone, and every other outcome is
// written.
func TestCompleteGroupsKeepEachOutcome(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	db := openDB(t, dsn, schema)
	ctx, now := context.Background(), time.Now().UTC()
	const n = 300
	for i := range n {
		if _, err := db.Ingest(ctx, storagetest.Event("acme", "src", fmt.Sprintf("e%03d", i), "b", now, "ep")); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := db.Claim(ctx, "ep", now, n, time.Minute)
	if err != nil || len(jobs) != n {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	kind := func(i int) string {
		switch {
		case i%10 == 7:
			return "refused" // a URL that is not UTF-8: the database refuses the statement
		case i%10 == 3:
			return "lost"
		}
		return "ok"
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			out := &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil, CountAttempt: true,
				State: storage.StateSucceeded, Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200}}
			switch kind(i) {
			case "lost":
				out.Lease = out.Lease.Add(time.Nanosecond)
			case "refused":
				out.State, out.NextAttemptAt = storage.StatePending, now
				out.Hold, out.HoldURL = now.Add(time.Minute), "https://\xff/"
			}
			errs[i] = db.Complete(ctx, out)
		})
	}
	wg.Wait()
	for i, j := range jobs {
		d, err := db.GetDelivery(ctx, j.Delivery.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch kind(i) {
		case "ok":
			if errs[i] != nil || d.State != storage.StateSucceeded {
				t.Fatalf("outcome %d: %v, state %s; want written, succeeded", i, errs[i], d.State)
			}
		case "lost":
			if !errors.Is(errs[i], storage.ErrLeaseLost) || d.State != storage.StateDelivering {
				t.Fatalf("outcome %d under another lease: %v, state %s; want ErrLeaseLost, still delivering", i, errs[i], d.State)
			}
		case "refused":
			if errs[i] == nil || errors.Is(errs[i], storage.ErrLeaseLost) || d.State != storage.StateDelivering {
				t.Fatalf("refused outcome %d: %v, state %s; want its error, still delivering", i, errs[i], d.State)
			}
		}
	}
}
