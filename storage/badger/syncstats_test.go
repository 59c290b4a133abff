package badger

import (
	"sync"
	"testing"
	"time"
)

// A scrape during a sync must not see the sync in a bucket but not in the
// count: Prometheus takes the count as the +Inf bucket, and a histogram
// whose buckets exceed it is invalid (and made rate() of the buckets jump).
func TestSyncStatsNeverShowABucketAboveTheCount(t *testing.T) {
	db := &DB{}
	const syncs = 1_000_000
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		for range syncs {
			db.stats.observe(100*time.Microsecond, 1)
		}
	})
	torn := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		st := db.SyncStats()
		if last := st.Buckets[len(st.Buckets)-1]; last > st.Syncs {
			torn++
		}
	}
	wg.Wait()
	if torn > 0 {
		t.Fatalf("%d scrapes showed a bucket above the count", torn)
	}
	st := db.SyncStats()
	if st.Syncs != syncs || st.Buckets[0] != syncs || st.Writes != syncs {
		t.Fatalf("after %d syncs: %+v", syncs, st)
	}
}
