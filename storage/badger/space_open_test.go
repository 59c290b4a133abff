package badger

import (
	"testing"

	"hookgate/internal/tmpfs"
)

// TestOpenNeedsOnlyOpenNeed: Open refuses a disk with less than openNeed
// free (136 MiB with 32 MiB memtables); with more, a new store opens, its
// own first write (the tenant index mark, a control write) included,
// though that is less than the reserve of data writes.
func TestOpenNeedsOnlyOpenNeed(t *testing.T) {
	dir := tmpfs.Mount(t, "200m")
	if free, _ := freeSpace(dir); free < openNeed(32<<20) {
		t.Fatalf("setup: %d free", free)
	}
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open of a new store on a 200 MiB disk (Open wants %d bytes): %v", openNeed(32<<20), err)
	}
	_ = db.Close()
}
