package badger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

// The gateway's Shutdown closes the store after the grace period even when
// a handler is still reading (a slow admin listing, a metrics scrape's
// Depth, an ingest's dedupe read). Close waits for reads in flight before
// it closes Badger: in an earlier version, one got Badger's "DB Closed" (not
// storage.ErrClosed), or panicked in Txn.NewIterator.
func TestCloseWaitsForReadsInFlight(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := time.Now().UTC()
	body := strings.Repeat("x", 64<<10)
	sawOther := false
	for round := range 6 {
		db, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			for i := range 30 {
				if _, err := db.Ingest(ctx, acceptRequest(fmt.Sprint("cr-", i), body+fmt.Sprint(i), now, "ep1")); err != nil {
					t.Fatal(err)
				}
			}
		}
		var reads atomic.Int64
		var panics, other atomic.Value
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				defer func() {
					if r := recover(); r != nil {
						panics.Store(fmt.Sprint(r))
					}
				}()
				for {
					_, _, err := db.ListEvents(ctx, storage.EventFilter{Limit: 30})
					if err == nil {
						_, _, err = db.ListDeliveries(ctx, storage.DeliveryFilter{Limit: 30})
					}
					if err == nil {
						_, _, err = db.NextDue(ctx, "ep1")
					}
					if errors.Is(err, storage.ErrClosed) {
						return
					}
					if err != nil {
						other.Store(err.Error())
						return
					}
					reads.Add(1)
				}
			})
		}
		deadline := time.Now().Add(10 * time.Second)
		for reads.Load() < 12 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // polling step
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if e := other.Load(); e != nil && !sawOther {
			sawOther = true
			t.Errorf("round %d: a read running while the store closed failed with %q, not ErrClosed", round, e)
		}
		if p := panics.Load(); p != nil {
			t.Fatalf("round %d: a read running while the store closed panicked: %v", round, p)
		}
	}
}
