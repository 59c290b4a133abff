package badger

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
)

// syncRecorder replaces a logSyncer's file and directory syncs with ones
// that also record what they synced, in order ("dir" for the directory).
type syncRecorder struct {
	mu     sync.Mutex
	events []string
	fail   error
}

func (r *syncRecorder) install(s *logSyncer) {
	s.syncFile = func(f *os.File) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.fail != nil {
			return r.fail
		}
		r.events = append(r.events, filepath.Base(f.Name()))
		return fdatasync(f)
	}
	s.syncDir = func(dir string) error {
		r.mu.Lock()
		r.events = append(r.events, "dir")
		r.mu.Unlock()
		return syncDir(dir)
	}
}

// sync makes every write Badger finished before the call durable, in the
// caller's goroutine and slot 0: one plan, run and finished at once.
func (s *logSyncer) sync(values bool) error {
	p, err := s.plan(values, 0)
	if err != nil {
		return err
	}
	err = p.run()
	s.finish(p, err)
	return err
}

// newRecordedSyncer opens a logSyncer on dir whose syncs rec records.
func newRecordedSyncer(t *testing.T, dir string) (*logSyncer, *syncRecorder) {
	t.Helper()
	s, err := newLogSyncer(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	rec := &syncRecorder{}
	rec.install(s)
	return s, rec
}

// take returns the events recorded since the last call, .vlog ones left out.
func (r *syncRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := slices.DeleteFunc(r.events, func(e string) bool { return strings.HasSuffix(e, ".vlog") })
	r.events = nil
	return ev
}

// createLog writes a small file called name into dir, as Badger would
// start a log or table.
func createLog(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("entry"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLogSyncerFollowsBadgersLogs: with files laid out as Badger does,
// each sync covers the current log and every log sealed since the last
// sync, syncs the directory when a log is new, and finds the current log
// even when the ones before it were deleted unseen.
func TestLogSyncerFollowsBadgersLogs(t *testing.T) {
	dir := t.TempDir()
	remove := func(name string) {
		t.Helper()
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	createLog(t, dir, "00001.mem")
	createLog(t, dir, "00002.mem")
	createLog(t, dir, "000001.vlog")
	createLog(t, dir, "00003.sst")
	createLog(t, dir, "0004.mem") // not a name Badger gives: ignored
	s, rec := newRecordedSyncer(t, dir)
	step := func(want ...string) {
		t.Helper()
		if err := s.sync(true); err != nil {
			t.Fatal(err)
		}
		got := rec.take()
		if !slices.Equal(got, want) {
			t.Fatalf("synced %q, want %q", got, want)
		}
	}
	step("00001.mem", "00002.mem") // both may hold writes of an earlier process
	step("00002.mem")
	createLog(t, dir, "00003.mem") // Badger starts a new memtable: 2 is sealed
	step("dir", "00002.mem", "00003.mem")
	step("00003.mem")
	createLog(t, dir, "00004.mem")
	createLog(t, dir, "00005.mem")
	step("dir", "00003.mem", "00004.mem", "00005.mem")
	// Flushed and deleted before the syncer looked: 6 and 7 never seen.
	createLog(t, dir, "00006.mem")
	createLog(t, dir, "00007.mem")
	createLog(t, dir, "00008.mem")
	remove("00005.mem")
	remove("00006.mem")
	remove("00007.mem")
	step("dir", "00005.mem", "00008.mem") // 5 is still open here: harmless
	step("00008.mem")
	if n := len(s.kind[0].logs); n != 1 {
		t.Fatalf("%d memtable logs held open, want 1", n)
	}
	// The value log is followed the same way.
	createLog(t, dir, "000002.vlog")
	if err := s.sync(true); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	vlogs := slices.DeleteFunc(rec.events, func(e string) bool { return !strings.HasSuffix(e, ".vlog") && e != "dir" })
	rec.mu.Unlock()
	if want := []string{"dir", "000001.vlog", "000002.vlog"}; !slices.Equal(vlogs, want) {
		t.Fatalf("value-log syncs %q, want %q", vlogs, want)
	}
}

// TestSealedMemtableLogsAreSynced runs a real Badger with small memtables
// and checks, write by write, that when Badger switches to a new memtable
// log the sealed one is synced once more in the same sync (DB.Sync, used
// before, synced only the new one), and that the syncer ends up holding
// exactly Badger's current log.
func TestSealedMemtableLogsAreSynced(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rec syncRecorder
	rec.install(db.logs)
	value := make([]byte, 64<<10)
	var events []string
	for i := range 100 {
		if _, err := rand.Read(value); err != nil {
			t.Fatal(err)
		}
		err := db.update(context.Background(), len(value), func(txn *bdg.Txn) error {
			return txn.Set(fmt.Appendf(nil, "test/%03d", i), value)
		})
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, rec.take()...)
	}
	// Every memtable log after the first appears first as "dir", sealed,
	// new: the sealed one synced in the very sync that found the new one.
	var first []int
	seen := map[string]bool{}
	for i, e := range events {
		if e != "dir" && !seen[e] {
			seen[e] = true
			first = append(first, i)
		}
	}
	if len(first) < 4 {
		t.Fatalf("only %d memtable logs in 6.4 MB of writes: %q", len(first), events)
	}
	for _, i := range first[1:] {
		if i < 2 || events[i-2] != "dir" || !sealedBefore(events[i-1], events[i]) {
			t.Fatalf("log %s not found as dir, sealed, new: %q", events[i], events[max(0, i-3):i+1])
		}
	}
	mems, err := filepath.Glob(filepath.Join(dir, "*.mem"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(mems)
	held := db.logs.kind[0].logs
	if len(held) != 1 || held[0].name() != mems[len(mems)-1] {
		t.Fatalf("syncer holds %d logs (last %s), Badger's current is %s", len(held), held[len(held)-1].name(), mems[len(mems)-1])
	}
}

// sealedBefore reports whether log a is the one numbered just before b.
func sealedBefore(a, b string) bool {
	var na, nb int
	if _, err := fmt.Sscanf(a, "%05d.mem", &na); err != nil {
		return false
	}
	if _, err := fmt.Sscanf(b, "%05d.mem", &nb); err != nil {
		return false
	}
	return na+1 == nb
}

// TestFailedSyncStopsTheStore: a sync that fails answers its writes with
// ErrSyncFailed, and every later write too (the page cache may have
// dropped what it could not write: fsyncgate), until the store is
// reopened, which finds everything written before the failure.
func TestFailedSyncStopsTheStore(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := setTestKey(db, "test/before"); err != nil {
		t.Fatal(err)
	}
	var rec syncRecorder
	rec.install(db.logs)
	rec.mu.Lock()
	rec.fail = errors.New("EIO")
	rec.mu.Unlock()
	if err := setTestKey(db, "test/failed"); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("write whose sync failed: %v, want ErrSyncFailed", err)
	}
	rec.mu.Lock()
	rec.fail = nil
	rec.mu.Unlock()
	if err := setTestKey(db, "test/after"); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("write after a failed sync: %v, want ErrSyncFailed", err)
	}
	if err := db.waitDurable(ctx); !errors.Is(err, ErrSyncFailed) {
		t.Fatalf("durable read after a failed sync: %v, want ErrSyncFailed", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := setTestKey(db, "test/reopened"); err != nil {
		t.Fatalf("write after reopening: %v", err)
	}
	if err := getTestKey(db, "test/before"); err != nil {
		t.Fatalf("write acknowledged before the failure: %v", err)
	}
}

// TestValueLogIsSyncedAfterValueWrites: the value log is synced only
// when a write may have reached it. An event whose record is below
// Badger's value threshold leaves it alone, and its sync does not touch
// it (an fdatasync of a clean file still flushes the disk's cache); an
// event past the threshold is in the value log, and the sync that
// acknowledges it covers the value log.
func TestValueLogIsSyncedAfterValueWrites(t *testing.T) {
	db := openTestDB(t, Options{MemTableSize: 1 << 20}) // value threshold 157,286 bytes
	var rec syncRecorder
	rec.install(db.logs)
	vlogSyncs := func() int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		n := 0
		for _, e := range rec.events {
			if strings.HasSuffix(e, ".vlog") {
				n++
			}
		}
		rec.events = nil
		return n
	}
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := db.Ingest(ctx, acceptRequest("small", `{"id":"small"}`, now, "ep")); err != nil {
		t.Fatal(err)
	}
	if n := vlogSyncs(); n != 0 {
		t.Fatalf("a small event's sync synced the value log %d times, want 0", n)
	}
	big := make([]byte, 200<<10) // incompressible: its record stays above the threshold
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest(ctx, acceptRequest("big", string(big), now, "ep")); err != nil {
		t.Fatal(err)
	}
	if n := vlogSyncs(); n == 0 {
		t.Fatal("the sync that acknowledged an event in the value log did not sync the value log")
	}
	// Any other write may hold a big value: its sync covers the value log.
	if err := db.update(ctx, 64, func(txn *bdg.Txn) error { return txn.Set([]byte("test/x"), big) }); err != nil {
		t.Fatal(err)
	}
	if n := vlogSyncs(); n == 0 {
		t.Fatal("a write that may hold a big value was acknowledged without a sync of the value log")
	}
}
