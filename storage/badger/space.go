package badger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// Badger writes its memtable log, its tables and large values through
// memory maps of sparse files: on a full disk such a write is not an error
// but a SIGBUS that kills the process. So the writer refuses batches, with
// ErrNoSpace, while there is still room for everything Badger may go on
// writing on its own: callers answer 503 and nothing is written. The check
// is made per batch (reusing a recent reading while the disk is roomy), so
// writes resume as soon as room is made.
//
// What Badger may still write once writes stop (reserve):
//   - the memtables in memory, flushed to level-0 tables, and those
//     tables once more when level 0 is compacted (2 × numMemtables);
//   - the compaction of level 0 into the base level, which rewrites both
//     before it deletes the old tables: their sizes now;
//   - two other compactions (two compactors), each a table and the ten of
//     the next level under it;
//   - minFreeBytes to spare.
//
// A fixed reserve of eight memtables was not enough: under load level 0
// holds up to fifteen tables before Badger stalls writes.
//
// Control writes (the catalog of sources and endpoints, claim releases,
// cancels, purges) are small and grow nothing Badger compacts much: they go
// on while the open threshold (openNeed) is free, so that a gateway on a
// nearly full disk still starts, serves its admin API and can be managed.
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

// spaceReading is the last free-space figure, the reserve then, and what
// was written since.
type spaceReading struct {
	free    int64
	reserve int64
	at      time.Time
	written int64
}

// roomy reports whether the reading, taken less than spaceRecheck before
// now, still leaves need plus spaceSlack after what was written since:
// then the batch needs no statfs of its own.
func (r *spaceReading) roomy(need int64, now time.Time) bool {
	return now.Sub(r.at) < spaceRecheck && r.free-r.written >= need+spaceSlack
}

// openNeed is the free space Open wants before it lets Badger replay its
// logs, which may flush every memtable: below it, Open fails with
// ErrNoSpace instead of a SIGBUS in Badger's flush. Control writes go on
// down to it too.
func openNeed(memtable int64) int64 { return minFreeBytes + (numMemtables+1)*memtable }

// reserve is what Badger may still write on its own (see above), from
// the sizes of its levels now.
func (db *DB) reserve() int64 {
	r := minFreeBytes + 2*numMemtables*db.memtable
	var table int64
	for _, l := range db.db.Levels() {
		if l.Level == 0 || l.IsBaseLevel {
			r += l.Size
		}
		if l.Level > 0 { // level 0's tables are whole memtables, counted above
			table = max(table, l.TargetFileSize)
		}
	}
	return r + 2*11*table
}

// checkSpace refuses a batch of about size bytes when the file system of
// the store has less than twice that plus the reserve free (openNeed for a
// batch of control writes). Only the writer goroutine calls it.
func (db *DB) checkSpace(size int, control bool) error {
	r := &db.space
	keep := r.reserve
	if control {
		keep = min(keep, openNeed(db.memtable))
	}
	if r.roomy(2*int64(size)+keep, time.Now()) {
		r.written += int64(size)
		return nil
	}
	free, ok := freeSpace(db.dir)
	if !ok {
		return nil // cannot tell: let Badger try (and report its own error)
	}
	*r = spaceReading{free: free, reserve: db.reserve(), at: time.Now(), written: int64(size)}
	keep = r.reserve
	if control {
		keep = openNeed(db.memtable)
	}
	if need := 2*int64(size) + keep; free < need {
		return fmt.Errorf("%w: %d bytes free, %d needed", ErrNoSpace, free, need)
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

// orphanTables counts the disk space of table files that Badger's
// manifest does not name: tables a crash cut short in the middle of their
// writing (maybe the SIGBUS of a full disk). Badger deletes them when it
// opens, so they are free space for Open's check.
func orphanTables(dir string) int64 {
	f, err := os.Open(filepath.Join(dir, bdg.ManifestFilename))
	if err != nil {
		return 0
	}
	defer f.Close()
	m, _, err := bdg.ReplayManifestFile(f, 0, bdg.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		return 0
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".sst")
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(name, 10, 64)
		if _, named := m.Tables[id]; err != nil || named {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join(dir, e.Name()), &st) == nil {
			n += st.Blocks * 512 // what it takes on disk (it may be sparse)
		}
	}
	return n
}
