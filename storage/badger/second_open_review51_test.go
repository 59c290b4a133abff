package badger

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSecondOpenLeavesALiveDirectoryAlone: a second hookgate started on the
// data directory of a running one must refuse (Badger's directory lock)
// without touching it. Open runs removeEmptyMemtableLogs before Badger
// takes the lock, so the second process deletes every empty *.mem file of
// the live store first. An empty memtable log is exactly what the running
// Badger has between creating its next log (os.OpenFile, O_CREATE) and
// sizing it (Truncate, then mmap) at every memtable rotation: a second
// start in that window unlinks the log the running store is about to
// write its acknowledged batches to. They live on in the unlinked file
// until the memtable is flushed, and are gone if the process dies first;
// the log syncer, which finds logs by name, never fsyncs it either. The
// window is microseconds per 32 MiB written, so this test shows the
// precondition deterministically: an empty log standing for the one just
// created. The repair must run only once the directory is locked (take a
// lock of our own first, or repair after Badger's open failed for that
// reason).
func TestSecondOpenLeavesALiveDirectoryAlone(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })

	// The running store's next memtable log, created and not sized yet.
	next := filepath.Join(dir, "99999.mem")
	if err := os.WriteFile(next, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	second, err := Open(dir, Options{})
	if err == nil {
		_ = second.Close()
		t.Fatal("a second Open of a directory in use succeeded")
	}
	t.Logf("second open refused: %v", err)
	if _, statErr := os.Stat(next); statErr != nil {
		t.Fatalf("the refused second Open deleted %s from the running store's directory before finding it locked: %v",
			filepath.Base(next), statErr)
	}
}
