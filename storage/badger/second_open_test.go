package badger

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSecondOpenLeavesALiveDirectoryAlone: a second hookgate started on the
// data directory of a running one is refused without touching it. Open
// ran removeEmptyLogs before Badger took its lock, so the second
// process deleted every empty *.mem file of the live store first; an empty
// memtable log is what the running Badger has between creating its next
// log and sizing it, at every memtable rotation, and a second start in
// that window unlinked the log the store was about to write acknowledged
// batches to. Open now takes a lock of its own before any repair.
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
