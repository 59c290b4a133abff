package badger

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// Listings page through old (ev:) and new (ae:) event records merged by
// ID, so paging lists every event once, newest first, even when some old
// records are newer than some new ones: a restart across an NTP
// correction, or going back to an older build on an upgraded directory.
// (Found in review: the ranges were scanned one after the other, and a
// cursor from one range cut the other, so bulk replays, which page
// through this listing, skipped some events and replayed others twice.)
func TestPagingListsEveryEventOnceAcrossKeyRanges(t *testing.T) {
	ctx := context.Background()
	db, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
	// Received at start+0..5 ms; 0-1 and 4-5 by the new build, 2-3 by the
	// old one (its clock ahead).
	var ids []string
	for i := range 6 {
		req := acceptRequest(fmt.Sprintf("evt-%d", i), `{}`, start.Add(time.Duration(i)*time.Millisecond), "ep1")
		if _, err := db.Accept(ctx, req); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, req.Event.ID)
	}
	moveToLegacyKeys(t, db, ids[2:4])

	for _, limit := range []int{1, 2, 3} {
		seen := map[string]int{}
		var order []string
		cursor := ""
		for page := 0; ; page++ {
			evs, next, err := db.ListEvents(ctx, storage.EventFilter{Limit: limit, Cursor: cursor})
			if err != nil || page > 10 {
				t.Fatalf("limit %d page %d: %v", limit, page, err)
			}
			for _, ev := range evs {
				seen[ev.ID]++
				order = append(order, ev.EventID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		var missing, twice []string
		for i, id := range ids {
			switch seen[id] {
			case 0:
				missing = append(missing, fmt.Sprintf("evt-%d", i))
			case 1:
			default:
				twice = append(twice, fmt.Sprintf("evt-%d", i))
			}
		}
		if len(missing) > 0 || len(twice) > 0 {
			t.Errorf("pages of %d listed %v: never listed %v, listed more than once %v", limit, order, missing, twice)
		}
		if want := []string{"evt-5", "evt-4", "evt-3", "evt-2", "evt-1", "evt-0"}; !slices.Equal(order, want) && len(missing) == 0 && len(twice) == 0 {
			t.Errorf("pages of %d listed %v, want newest first %v", limit, order, want)
		}
	}
}

// moveToLegacyKeys puts the records of events where builds before
// 2026-11-30 kept them (ev:).
func moveToLegacyKeys(t *testing.T, db *DB, ids []string) {
	t.Helper()
	err := db.update(context.Background(), 4096*len(ids), func(txn *bdg.Txn) error {
		vals := make([][]byte, len(ids))
		for i, id := range ids {
			item, err := txn.Get(eventKey(id))
			if err != nil {
				return err
			}
			if vals[i], err = item.ValueCopy(nil); err != nil {
				return err
			}
		}
		for i, id := range ids {
			if err := txn.Set(legacyEventKey(id), vals[i]); err != nil {
				return err
			}
			if err := txn.Delete(eventKey(id)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
