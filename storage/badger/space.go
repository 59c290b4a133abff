package badger

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// minFreeBytes is the free space kept in reserve on the store's file
// system, on top of twice the size of the batch about to be written.
//
// Badger writes its memtable log (and large values) through memory maps of
// sparse files: on a full disk such a write is not an error but a SIGBUS
// that kills the process. So the writer refuses a batch, with ErrNoSpace,
// before the disk is that full; callers answer 503 and nothing is written.
// The check is made per batch (reusing a recent reading while the disk is
// roomy), so writes resume as soon as room is made.
const minFreeBytes = 8 << 20

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
// the store has less than twice that plus minFreeBytes free. Only the
// writer goroutine calls it.
func (db *DB) checkSpace(size int) error {
	need := 2*int64(size) + minFreeBytes
	r := &db.space
	if r.roomy(need, time.Now()) {
		r.written += int64(size)
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(db.dir, &st); err != nil {
		return nil // cannot tell: let Badger try (and report its own error)
	}
	*r = spaceReading{free: int64(st.Bavail) * int64(st.Bsize), at: time.Now(), written: int64(size)}
	if r.free < need {
		return fmt.Errorf("%w: %d bytes free, %d needed", ErrNoSpace, r.free, need)
	}
	return nil
}
