package badger

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// minFreeBytes is the free space kept in reserve on the store's file
// system, on top of twice the size of the batch about to be written.
//
// Badger writes its memtable log (and large values) through memory maps of
// sparse files: on a full disk such a write is not an error but a SIGBUS
// that kills the process. So the writer refuses a batch, with ErrNoSpace,
// before the disk is that full; callers answer 503 and nothing is written.
// The check is made per batch, so writes resume as soon as room is made.
const minFreeBytes = 8 << 20

// ErrNoSpace is returned for writes refused because the disk is nearly
// full.
var ErrNoSpace = errors.New("badger: not enough free disk space")

// checkSpace refuses a batch of about size bytes when the file system of
// the store has less than twice that plus minFreeBytes free.
func (db *DB) checkSpace(size int) error {
	var st unix.Statfs_t
	if err := unix.Statfs(db.dir, &st); err != nil {
		return nil // cannot tell: let Badger try (and report its own error)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if need := 2*int64(size) + minFreeBytes; free < need {
		return fmt.Errorf("%w: %d bytes free, %d needed", ErrNoSpace, free, need)
	}
	return nil
}
