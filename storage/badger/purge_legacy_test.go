package badger

import (
	"context"
	"testing"
	"time"
)

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
