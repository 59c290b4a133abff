package badger

import (
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
	db := &DB{dir: t.TempDir()}
	if err := db.checkSpace(1 << 20); err != nil {
		t.Skipf("the test's file system is nearly full: %v", err)
	}
	first := db.space
	if first.at.IsZero() || first.written != 1<<20 {
		t.Fatalf("first check did not read the file system: %+v", first)
	}
	if !first.roomy(2<<20+minFreeBytes, time.Now()) {
		t.Skip("less than the slack free on the test's file system")
	}
	if err := db.checkSpace(1 << 20); err != nil {
		t.Fatal(err)
	}
	if db.space.at != first.at || db.space.written != 2<<20 {
		t.Fatalf("second check: %+v; want the first reading reused with both batches counted", db.space)
	}
}
