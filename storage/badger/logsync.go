package badger

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
// Only the syncer goroutine uses a logSyncer.
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
	f    *os.File
	info os.FileInfo // of f when opened: is the name still this file?
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

// sync makes every write Badger finished before the call durable. values
// says whether any of them may have reached the value log since the last
// sync; the first sync covers it regardless (an earlier process may have
// left writes there unsynced).
func (s *logSyncer) sync(values bool) error {
	values = values || !s.started
	s.started = true
	for _, k := range s.kind {
		if k.values && !values {
			continue
		}
		found, err := k.discover(s.dir)
		if err != nil {
			return err
		}
		if found {
			// A new log's directory entry must survive too.
			if err := s.syncDir(s.dir); err != nil {
				return fmt.Errorf("sync directory %s: %w", s.dir, err)
			}
		}
		for _, l := range k.logs {
			if err := s.syncFile(l.f); err != nil {
				return fmt.Errorf("sync %s: %w", l.f.Name(), err)
			}
		}
		// All but the newest are sealed, and now durable for good.
		for len(k.logs) > 1 {
			_ = k.logs[0].f.Close()
			k.logs = k.logs[1:]
		}
	}
	return nil
}

func (s *logSyncer) close() {
	for _, k := range s.kind {
		for _, l := range k.logs {
			_ = l.f.Close()
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
		info, err := os.Stat(newest.f.Name())
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
	f, err := os.Open(filepath.Join(dir, k.name(n)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return false, err
	}
	k.logs = append(k.logs, &trackedLog{f: f, info: info})
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
