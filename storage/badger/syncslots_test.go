package badger

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
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
			ctx := context.Background()
			db := openTestDB(t, Options{})
			set := func(key string) error {
				return db.update(ctx, 16, func(txn *bdg.Txn) error { return txn.Set([]byte(key), []byte("v")) })
			}
			if err := set("test/warm"); err != nil {
				t.Fatal(err)
			}
			var (
				armed, entered atomic.Bool
				gate           = make(chan struct{})
				mu             sync.Mutex
				held           *os.File
				during         []*os.File // synced while held was held
			)
			db.logs.syncFile = func(f *os.File) error {
				if armed.Load() && entered.CompareAndSwap(false, true) {
					mu.Lock()
					held = f
					mu.Unlock()
					<-gate
					if tc.heldErr != nil {
						return tc.heldErr
					}
					return fdatasync(f)
				}
				if entered.Load() {
					mu.Lock()
					during = append(during, f)
					mu.Unlock()
				}
				return fdatasync(f)
			}
			armed.Store(true)
			opened := true
			defer func() {
				if opened {
					close(gate)
				}
			}()
			first, second := make(chan error, 1), make(chan error, 1)
			go func() { first <- set("test/first") }()
			waitFor(t, 10*time.Second, "the first write's sync to start", entered.Load)
			go func() { second <- set("test/second") }()
			waitFor(t, 10*time.Second, "the second write's sync of the same log while the first is held", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.ContainsFunc(during, func(f *os.File) bool { return f.Name() == held.Name() })
			})
			mu.Lock()
			for _, f := range during {
				if f.Name() == held.Name() && f.Fd() == held.Fd() {
					t.Errorf("both syncs of %s used file descriptor %d", filepath.Base(f.Name()), f.Fd())
				}
			}
			mu.Unlock()
			select {
			case err := <-second:
				t.Fatalf("the second write was answered (%v) before the first write's sync ended", err)
			case err := <-first:
				t.Fatalf("the first write was answered (%v) during its sync", err)
			case <-time.After(200 * time.Millisecond): // an absence check, not synchronisation
			}
			opened = false
			close(gate)
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
			if err := set("test/after"); !errors.Is(err, ErrSyncFailed) {
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
	create := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("entry"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	create("00001.mem")
	s, rec := newRecordedSyncer(t, dir)
	early, err := s.plan(true, 0)
	if err != nil {
		t.Fatal(err)
	}
	create("00002.mem") // Badger moves on while the early sync is in flight
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
	ctx := context.Background()
	set := func(key string) error {
		return db.update(ctx, 16, func(txn *bdg.Txn) error { return txn.Set([]byte(key), []byte("v")) })
	}
	if err := set("test/warm"); err != nil {
		t.Fatal(err)
	}
	var armed, entered atomic.Bool
	gate := make(chan struct{})
	db.logs.syncFile = func(f *os.File) error {
		if armed.Load() && entered.CompareAndSwap(false, true) {
			<-gate
		}
		return fdatasync(f)
	}
	armed.Store(true)
	opened := true
	defer func() {
		if opened {
			close(gate)
		}
	}()
	written, closed := make(chan error, 1), make(chan error, 1)
	go func() { written <- set("test/held") }()
	waitFor(t, 10*time.Second, "the write's sync to start", entered.Load)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a sync was in flight", err)
	case err := <-written:
		t.Fatalf("the write was answered (%v) during its sync", err)
	case <-time.After(200 * time.Millisecond): // an absence check, not synchronisation
	}
	opened = false
	close(gate)
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
	err = db.view(func(txn *bdg.Txn) error {
		_, err := txn.Get([]byte("test/held"))
		return err
	})
	if err != nil {
		t.Fatalf("the write answered before Close, after a reopen: %v", err)
	}
}

// TestWritesWaitWhenTheSyncsFallBehind: while every sync slot is busy, the
// syncer takes at most syncQueue batches from a queue of syncQueue, and
// then the writer stops committing: what waits for a sync is bounded.
// Each write here is its own batch (the next starts once the previous is
// committed), and every sync is held.
func TestWritesWaitWhenTheSyncsFallBehind(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	set := func(key string) error {
		return db.update(ctx, 16, func(txn *bdg.Txn) error { return txn.Set([]byte(key), []byte("v")) })
	}
	if err := set("test/warm"); err != nil {
		t.Fatal(err)
	}
	var held atomic.Bool
	gate := make(chan struct{})
	db.logs.syncFile = func(f *os.File) error {
		if held.Load() {
			<-gate
		}
		return fdatasync(f)
	}
	held.Store(true)
	opened := true
	defer func() {
		if opened {
			close(gate)
		}
	}()
	base := db.applying.Load()
	// Two batches in the syncs, syncQueue taken from the queue, syncQueue
	// in it, and one more committed whose send then waits.
	committed := uint64(syncSlots + 2*syncQueue + 1)
	errs := make(chan error, committed+1)
	for i := range committed {
		go func() { errs <- set(fmt.Sprintf("test/%03d", i)) }()
		waitFor(t, 10*time.Second, fmt.Sprintf("write %d to be committed", i), func() bool {
			return db.applying.Load() >= base+i+1
		})
	}
	go func() { errs <- set("test/waits") }()
	deadline := time.After(300 * time.Millisecond) // an absence check, not synchronisation
	for db.applying.Load() == base+committed {
		select {
		case err := <-errs:
			t.Fatalf("a write was answered (%v) while every sync was held", err)
		case <-deadline:
			opened = false
			close(gate)
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
