package badger

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"hookgate/internal/testsupport"
	"testing"
	"time"
)

// A free-space reading spares a statfs only while it is fresh and leaves
// the slack beyond what was written since and what the batch needs.
func TestSpaceReadingRoomy(t *testing.T) {
	now := time.Now()
	fresh := spaceReading{free: 1 << 30, at: now}
	for _, c := range []struct {
		name string
		r    spaceReading
		need int64
		want bool
	}{
		{"fresh and roomy", fresh, 16 << 20, true},
		{"stale", spaceReading{free: 1 << 30, at: now.Add(-spaceRecheck)}, 16 << 20, false},
		{"never read", spaceReading{}, 16 << 20, false},
		{"written since eats the slack", spaceReading{free: 1 << 30, at: now, written: 1<<30 - spaceSlack}, 16 << 20, false},
		{"exactly the slack left", spaceReading{free: spaceSlack + 16<<20, at: now}, 16 << 20, true},
		{"one byte short", spaceReading{free: spaceSlack + 16<<20 - 1, at: now}, 16 << 20, false},
	} {
		if got := c.r.roomy(c.need, now); got != c.want {
			t.Errorf("%s: roomy = %v, want %v", c.name, got, c.want)
		}
	}
}

// Batches written on a roomy disk are counted against the reading they
// reuse, so the statfs comes back before the slack could be used up.
func TestCheckSpaceCountsWrites(t *testing.T) {
	db := openTestDB(t, Options{}) // its writer is idle: this test is the writer now
	db.space = spaceReading{}
	if err := db.checkSpace(1<<20, false); err != nil {
		t.Skipf("the test's file system is nearly full: %v", err)
	}
	first := db.space
	if first.at.IsZero() || first.written != 1<<20 || first.reserve < minFreeBytes+2*numMemtables*db.memtable {
		t.Fatalf("first check did not read the file system and the reserve: %+v", first)
	}
	if !first.roomy(2<<20+first.reserve, time.Now()) {
		t.Skip("less than the slack free on the test's file system")
	}
	if err := db.checkSpace(1<<20, false); err != nil {
		t.Fatal(err)
	}
	if db.space.at != first.at || db.space.written != 2<<20 {
		t.Fatalf("second check: %+v; want the first reading reused with both batches counted", db.space)
	}
}

// The reserve grows with what Badger would compact: level 0 and the base
// level.
func TestReserveFollowsTheLevels(t *testing.T) {
	db := openTestDB(t, Options{MemTableSize: 1 << 20})
	empty := db.reserve()
	if empty < minFreeBytes+2*numMemtables*db.memtable {
		t.Fatalf("reserve of an empty store %d", empty)
	}
	now := time.Now().UTC()
	pad := make([]byte, 12<<10)
	for i := range 400 { // ~6 MiB, incompressible: several memtables flushed to level 0
		_, _ = rand.Read(pad)
		body := fmt.Sprintf(`{"n":%d,"pad":%q}`, i, base64.StdEncoding.EncodeToString(pad))
		if _, err := db.Ingest(context.Background(), acceptRequest(fmt.Sprintf("r-%d", i), body, now, "ep")); err != nil {
			t.Fatal(err)
		}
	}
	testsupport.WaitFor(t, 10*time.Second, "tables on disk", func() bool { return len(db.db.Tables()) > 0 })
	if got := db.reserve(); got <= empty {
		t.Fatalf("reserve %d with tables on disk, %d empty: want more", got, empty)
	}
}
