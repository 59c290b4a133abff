package badger

import (
	"os"
	"strings"
	"testing"

	"hookgate/internal/tmpfs"
)

// TestFullDiskUnderConcurrentLoad: under eight concurrent writers level 0
// holds many tables (Badger stalls writes only at 15), and a level-0
// compaction rewrites them with the overlapping tables of the base level.
// A fixed reserve of eight memtables let that compaction's table build (a
// memory map) die of SIGBUS on a 3 GiB disk, in 4 runs of 6; the reserve
// now follows the levels' sizes. It takes minutes with -race, so it runs
// only with HOOKGATE_LONG_TESTS=1 (docs/guarantees.md, "Reproduce").
func TestFullDiskUnderConcurrentLoad(t *testing.T) {
	if os.Getenv("HOOKGATE_LONG_TESTS") == "" {
		t.Skip("takes minutes; set HOOKGATE_LONG_TESTS=1")
	}
	const size = "3g"
	dir := tmpfs.Mount(t, size)
	out, err := runFullDiskChild(t, dir, "load")
	if err != nil || !strings.Contains(out, "REFUSED") || !strings.Contains(out, "CLOSED") {
		again, _ := runFullDiskChild(t, dir, "soak")
		free, _ := freeSpace(dir)
		t.Fatalf("filling a %s disk with concurrent writers: the store process ended with %v (want writes refused with ErrNoSpace and a clean close)\n%s\nthen, %d bytes free, a restart:\n%s", size, err, out, free, again)
	}
}
