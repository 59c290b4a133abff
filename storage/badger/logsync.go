package badger

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// logSyncer makes Badger's logs durable with fdatasync on file handles of
// its own, instead of Badger's DB.Sync, for two reasons:
//
//   - DB.Sync syncs only the current memtable's log and value-log file.
//     When a memtable fills up Badger starts a new log and, with SyncWrites
//     off, never syncs the old one: its entries become durable only once
//     the memtable is flushed to a table, up to seconds later. A batch
//     committed just before the switch would have been acknowledged with
//     its log pages still in the page cache.
//   - DB.Sync holds Badger's DB lock (read side) while it waits for the
//     disk, and Badger's write goroutine takes that lock (write side) on
//     every commit, with readers queueing behind it. When a flush or
//     compaction slowed a sync from ~1 ms to 10-30 ms, every commit and
//     every read waited as long.
//
// Badger numbers its logs in ascending order (%05d.mem for memtables,
// %06d.vlog for the value log), writes only to the newest of each kind,
// and flushes memtables in order, deleting a log once its table is
// durable. So once a newer log exists, one more sync of an older one makes
// it final, and it can be let go.
//
// Up to syncSlots syncs may run at once (DB.syncLoop). Each slot has a
// file handle of its own on every log: Linux reports a writeback error
// once per open file, to the first sync that asks, so two syncs sharing a
// handle could see the error go to one of them and the other succeed
// over pages that never reached the disk. With a handle per slot each
// sync hears of every error since that slot's last sync (which, if it
// heard one, stopped the store).
//
// Only the syncer goroutine plans and finishes syncs; a plan's run may
// happen on any goroutine.
type logSyncer struct {
	dir  string
	kind []*logKind
	// started is set after the first sync, which covers every kind.
	started bool
	// syncFile makes one file durable (fdatasync); tests replace it.
	syncFile func(*os.File) error
	// syncDir makes the directory's entries durable; tests replace it.
	syncDir func(dir string) error
}

// syncSlots is how many syncs may be in flight at once.
const syncSlots = 2

// logKind tracks the logs of one kind.
type logKind struct {
	ext   string // ".mem"
	width int    // digits in the name: 5 for 00001.mem
	// values marks the value log: Badger writes to it only values at or
	// above its value threshold, so it needs a sync only after such a
	// write (an fdatasync of a file with nothing to write still costs a
	// cache flush of the disk: ~40 µs here, once per group commit).
	values bool
	logs   []*trackedLog
	next   int // the number the next new log will have
}

type trackedLog struct {
	f    [syncSlots]*os.File // one handle per sync slot
	info os.FileInfo         // of f[0] when opened: is the name still this file?
	// refs counts the planned syncs that have not finished with f.
	refs int
	// final is set once a sync planned after Badger moved on to a newer
	// log finished: nothing more is written to this one, and it is
	// durable. It is closed once refs is 0.
	final bool
}

func (l *trackedLog) name() string { return l.f[0].Name() }

func (l *trackedLog) close() {
	for _, f := range l.f {
		_ = f.Close()
	}
}

// A syncPlan is one sync: the files to make durable, and the sealed logs
// it makes final.
type syncPlan struct {
	slot     int
	files    []*trackedLog
	sealed   []*trackedLog
	syncFile func(*os.File) error
}

func newLogSyncer(dir string) (*logSyncer, error) {
	s := &logSyncer{
		dir: dir,
		kind: []*logKind{
			{ext: ".mem", width: 5, next: 1},
			{ext: ".vlog", width: 6, next: 1, values: true},
		},
		syncFile: fdatasync,
		syncDir:  syncDir,
	}
	for _, k := range s.kind {
		if _, err := k.scan(dir); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// plan prepares a sync of every write Badger finished before the call,
// to run in slot (no other sync may be running in it). values says
// whether any of those writes may have reached the value log since the
// last sync; the first sync covers it regardless (an earlier process may
// have left writes there unsynced). New logs' directory entries are
// synced here, before the plan is returned.
func (s *logSyncer) plan(values bool, slot int) (*syncPlan, error) {
	values = values || !s.started
	s.started = true
	p := &syncPlan{slot: slot, syncFile: s.syncFile}
	for _, k := range s.kind {
		if k.values && !values {
			continue
		}
		found, err := k.discover(s.dir)
		if err == nil && found {
			// A new log's directory entry must survive too.
			if err = s.syncDir(s.dir); err != nil {
				err = fmt.Errorf("sync directory %s: %w", s.dir, err)
			}
		}
		if err != nil {
			s.finish(p, err) // gives back the logs taken so far
			return nil, err
		}
		for i, l := range k.logs {
			if l.final {
				continue
			}
			l.refs++
			p.files = append(p.files, l)
			// All but the newest are sealed: this sync makes them final.
			if i < len(k.logs)-1 {
				p.sealed = append(p.sealed, l)
			}
		}
	}
	return p, nil
}

// run makes the plan's files durable; it touches no syncer state.
func (p *syncPlan) run() error {
	for _, l := range p.files {
		if err := p.syncFile(l.f[p.slot]); err != nil {
			return fmt.Errorf("sync %s: %w", l.name(), err)
		}
	}
	return nil
}

// finish records the outcome of a plan's run and closes the logs that
// are final and no longer in any sync's hands.
func (s *logSyncer) finish(p *syncPlan, err error) {
	for _, l := range p.files {
		l.refs--
	}
	if err == nil {
		for _, l := range p.sealed {
			l.final = true
		}
	}
	for _, k := range s.kind {
		k.logs = slices.DeleteFunc(k.logs, func(l *trackedLog) bool {
			if l.final && l.refs == 0 {
				l.close()
				return true
			}
			return false
		})
	}
}

func (s *logSyncer) close() {
	for _, k := range s.kind {
		for _, l := range k.logs {
			l.close()
		}
		k.logs = nil
	}
}

// discover opens the logs Badger started since the last call; it reports
// whether there were any.
func (k *logKind) discover(dir string) (bool, error) {
	found := false
	for {
		ok, err := k.open(dir, k.next)
		if err != nil {
			return found, err
		}
		if !ok {
			break
		}
		found = true
	}
	// The newest log we hold is Badger's current one unless Badger moved
	// on and deleted it (and maybe its successors) before we looked: then
	// only a listing finds the current one. Logs deleted meanwhile were
	// flushed to tables, which Badger made durable itself.
	if n := len(k.logs); n > 0 {
		newest := k.logs[n-1]
		info, err := os.Stat(newest.name())
		if err == nil && os.SameFile(info, newest.info) {
			return found, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return found, err
		}
	}
	more, err := k.scan(dir)
	return found || more, err
}

// scan lists dir and opens every log of this kind numbered k.next or
// later.
func (k *logKind) scan(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	var nums []int
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), k.ext)
		if !ok || e.IsDir() {
			continue
		}
		n, err := strconv.Atoi(name)
		if err != nil || n < k.next || k.name(n) != e.Name() {
			continue
		}
		nums = append(nums, n)
	}
	// ReadDir sorts by name, and names are zero-padded: ascending order.
	found := false
	for _, n := range nums {
		ok, err := k.open(dir, n)
		if err != nil {
			return found, err
		}
		found = found || ok
	}
	return found, nil
}

// open starts tracking log number n if it exists.
func (k *logKind) open(dir string, n int) (bool, error) {
	name := filepath.Join(dir, k.name(n))
	l := &trackedLog{}
	for i := range l.f {
		f, err := os.Open(name)
		if err != nil {
			for _, f := range l.f[:i] {
				_ = f.Close()
			}
			if errors.Is(err, fs.ErrNotExist) {
				// Gone after all (or between two opens): flushed to a
				// table, which Badger made durable itself.
				return false, nil
			}
			return false, err
		}
		l.f[i] = f
	}
	info, err := l.f[0].Stat()
	if err != nil {
		l.close()
		return false, err
	}
	l.info = info
	k.logs = append(k.logs, l)
	k.next = n + 1
	return true, nil
}

func (k *logKind) name(n int) string {
	return fmt.Sprintf("%0*d%s", k.width, n, k.ext)
}

// syncDir fsyncs a directory, making the names in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
