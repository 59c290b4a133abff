package badger

import (
	"errors"
	"fmt"
	"hookgate/internal/testsupport"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestSecondSyncRunsWhileTheFirstIsHeld: a write committed while another
// write's sync is running gets a sync of its own at once, on a file
// handle of its own, but is answered only after the earlier write, and
// with its error if that sync fails (a sync that succeeds after a failed
// one proves nothing: the failure may have cost this write's pages).
func TestSecondSyncRunsWhileTheFirstIsHeld(t *testing.T) {
	for _, tc := range []struct {
		name    string
		heldErr error // what the held sync returns
	}{
		{"held sync succeeds", nil},
		{"held sync fails", errors.New("EIO")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openTestDB(t, Options{})
			if err := setTestKey(db, "test/warm"); err != nil {
				t.Fatal(err)
			}
			h := holdSyncs(t, db, false, tc.heldErr)
			first, second := make(chan error, 1), make(chan error, 1)
			go func() { first <- setTestKey(db, "test/first") }()
			testsupport.WaitFor(t, 10*time.Second, "the first write's sync to start", h.entered.Load)
			go func() { second <- setTestKey(db, "test/second") }()
			testsupport.WaitFor(t, 10*time.Second, "the second write's sync of the same log while the first is held", func() bool {
				h.mu.Lock()
				defer h.mu.Unlock()
				return slices.ContainsFunc(h.during, func(f *os.File) bool { return f.Name() == h.held.Name() })
			})
			h.mu.Lock()
			for _, f := range h.during {
				if f.Name() == h.held.Name() && f.Fd() == h.held.Fd() {
					t.Errorf("both syncs of %s used file descriptor %d", filepath.Base(f.Name()), f.Fd())
				}
			}
			h.mu.Unlock()
			select {
			case err := <-second:
				t.Fatalf("the second write was answered (%v) before the first write's sync ended", err)
			case err := <-first:
				t.Fatalf("the first write was answered (%v) during its sync", err)
			case <-time.After(200 * time.Millisecond): // an absence check, not synchronisation
			}
			h.release()
			errFirst := <-first
			errSecond := <-second
			if tc.heldErr == nil {
				if errFirst != nil || errSecond != nil {
					t.Fatalf("writes: %v, %v", errFirst, errSecond)
				}
				return
			}
			if !errors.Is(errFirst, ErrSyncFailed) || !errors.Is(errSecond, ErrSyncFailed) {
				t.Fatalf("writes after a failed sync: %v, %v; want ErrSyncFailed for both", errFirst, errSecond)
			}
			if err := setTestKey(db, "test/after"); !errors.Is(err, ErrSyncFailed) {
				t.Fatalf("write after the failed sync: %v, want ErrSyncFailed", err)
			}
		})
	}
}

// TestLogSyncerKeepsSealedLogsForSyncsInFlight: a sealed log made final
// by a later sync stays open while an earlier sync still has to sync it,
// and is let go once that one is done.
func TestLogSyncerKeepsSealedLogsForSyncsInFlight(t *testing.T) {
	dir := t.TempDir()
	createLog(t, dir, "00001.mem")
	s, rec := newRecordedSyncer(t, dir)
	early, err := s.plan(true, 0)
	if err != nil {
		t.Fatal(err)
	}
	createLog(t, dir, "00002.mem") // Badger moves on while the early sync is in flight
	late, err := s.plan(true, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := late.run(); err != nil {
		t.Fatal(err)
	}
	s.finish(late, nil) // 1 is final now, but the early sync holds it
	if err := early.run(); err != nil {
		t.Fatalf("the early sync after the late one finished: %v", err)
	}
	s.finish(early, nil)
	if got, want := rec.take(), []string{"dir", "00001.mem", "00002.mem", "00001.mem"}; !slices.Equal(got, want) {
		t.Fatalf("synced %q, want %q", got, want)
	}
	held := s.kind[0].logs
	if len(held) != 1 || filepath.Base(held[0].name()) != "00002.mem" {
		t.Fatalf("syncer holds %d memtable logs, want 00002.mem alone", len(held))
	}
	if err := s.sync(true); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.take(), []string{"00002.mem"}; !slices.Equal(got, want) {
		t.Fatalf("next sync synced %q, want %q", got, want)
	}
}

// TestCloseWaitsForTheSyncInFlight: Close during a sync returns only
// after that sync ended and its write was answered, and the write is there
// after a reopen (the syncer must not stop, and close its log handles,
// with a sync still running).
func TestCloseWaitsForTheSyncInFlight(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := setTestKey(db, "test/warm"); err != nil {
		t.Fatal(err)
	}
	h := holdSyncs(t, db, false, nil)
	written, closed := make(chan error, 1), make(chan error, 1)
	go func() { written <- setTestKey(db, "test/held") }()
	testsupport.WaitFor(t, 10*time.Second, "the write's sync to start", h.entered.Load)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a sync was in flight", err)
	case err := <-written:
		t.Fatalf("the write was answered (%v) during its sync", err)
	case <-time.After(200 * time.Millisecond): // an absence check, not synchronisation
	}
	h.release()
	for name, ch := range map[string]chan error{"the write": written, "Close": closed} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return after the sync ended", name)
		}
	}
	db, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := getTestKey(db, "test/held"); err != nil {
		t.Fatalf("the write answered before Close, after a reopen: %v", err)
	}
}

// TestWritesWaitWhenTheSyncsFallBehind: while every sync slot is busy, the
// syncer takes at most syncQueue batches from a queue of syncQueue, and
// then the writer stops committing: what waits for a sync is bounded.
// Each write here is its own batch (the next starts once the previous is
// committed), and every sync is held.
func TestWritesWaitWhenTheSyncsFallBehind(t *testing.T) {
	db := openTestDB(t, Options{})
	if err := setTestKey(db, "test/warm"); err != nil {
		t.Fatal(err)
	}
	h := holdSyncs(t, db, true, nil)
	base := db.applying.Load()
	// Two batches in the syncs, syncQueue taken from the queue, syncQueue
	// in it, and one more committed whose send then waits.
	committed := uint64(syncSlots + 2*syncQueue + 1)
	errs := make(chan error, committed+1)
	for i := range committed {
		go func() { errs <- setTestKey(db, fmt.Sprintf("test/%03d", i)) }()
		testsupport.WaitFor(t, 10*time.Second, fmt.Sprintf("write %d to be committed", i), func() bool {
			return db.applying.Load() >= base+i+1
		})
	}
	go func() { errs <- setTestKey(db, "test/waits") }()
	deadline := time.After(300 * time.Millisecond) // an absence check, not synchronisation
	for db.applying.Load() == base+committed {
		select {
		case err := <-errs:
			t.Fatalf("a write was answered (%v) while every sync was held", err)
		case <-deadline:
			h.release()
			for range committed + 1 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			return
		case <-time.After(5 * time.Millisecond): // polling step
		}
	}
	t.Fatalf("the writer committed batch %d with %d waiting for a sync", db.applying.Load()-base, committed)
}
