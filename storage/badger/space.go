package badger

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// minFreeBytes is the free space kept in reserve on the store's file
// system, on top of badgerHeadroom and twice the size of the batch about
// to be written.
//
// Badger writes its memtable log, its tables and large values through
// memory maps of sparse files: on a full disk such a write is not an error
// but a SIGBUS that kills the process. So the writer refuses a batch, with
// ErrNoSpace, before the disk is that full; callers answer 503 and nothing
// is written. The check is made per batch (reusing a recent reading while
// the disk is roomy), so writes resume as soon as room is made.
const minFreeBytes = 8 << 20

// headroomMemtables is how many memtables' worth of space Badger may still
// write on its own after the last refused batch: the memtables in memory
// flushed to level-0 tables (numMemtables), and a compaction of the
// level-0 tables it starts at (Badger's NumLevelZeroTables, 5) into new
// tables before the old ones go. With a reserve of one memtable only, the
// first flush on a nearly full disk killed the process, and every restart
// on it again.
const headroomMemtables = numMemtables + 5

// reserveFor is the free space kept beside a batch for a store with
// memtables of the given size.
func reserveFor(memtable int64) int64 { return minFreeBytes + headroomMemtables*memtable }

// openNeed is the free space Open wants before it lets Badger replay its
// logs, which may flush every memtable: below it, Open fails with
// ErrNoSpace instead of a SIGBUS in Badger's flush.
func openNeed(memtable int64) int64 { return minFreeBytes + (numMemtables+1)*memtable }

// ErrNoSpace is returned for writes refused because the disk is nearly
// full.
var ErrNoSpace = errors.New("badger: not enough free disk space")

// spaceRecheck bounds how long a roomy free-space reading is trusted:
// while the disk has plenty of room (spaceSlack beyond what a batch needs,
// after subtracting what this process wrote since), batches skip the
// statfs call. Near full, every batch looks again.
const (
	spaceRecheck = 100 * time.Millisecond
	spaceSlack   = 256 << 20
)

// spaceReading is the last free-space figure and what was written since.
type spaceReading struct {
	free    int64
	at      time.Time
	written int64
}

// roomy reports whether the reading, taken less than spaceRecheck before
// now, still leaves need plus spaceSlack after what was written since:
// then the batch needs no statfs of its own.
func (r *spaceReading) roomy(need int64, now time.Time) bool {
	return now.Sub(r.at) < spaceRecheck && r.free-r.written >= need+spaceSlack
}

// checkSpace refuses a batch of about size bytes when the file system of
// the store has less than twice that plus the reserve free. Only the
// writer goroutine calls it.
func (db *DB) checkSpace(size int) error {
	need := 2*int64(size) + db.reserve
	r := &db.space
	if r.roomy(need, time.Now()) {
		r.written += int64(size)
		return nil
	}
	free, ok := freeSpace(db.dir)
	if !ok {
		return nil // cannot tell: let Badger try (and report its own error)
	}
	*r = spaceReading{free: free, at: time.Now(), written: int64(size)}
	if r.free < need {
		return fmt.Errorf("%w: %d bytes free, %d needed", ErrNoSpace, r.free, need)
	}
	return nil
}

// freeSpace returns the bytes available to this process on dir's file
// system; ok is false when that cannot be told.
func freeSpace(dir string) (free int64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
