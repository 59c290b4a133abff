package badger

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// removeEmptyMemtableLogs deletes memtable logs (*.mem) of size zero.
//
// Badger creates a new memtable log and then sizes it; a process killed
// between the two leaves an empty file, and Badger then refuses to open
// the directory at all ("while opening fid: N err: Create a new file"):
// one unlucky kill during startup would keep the gateway down for good.
// An empty log holds no entry, so removing it loses nothing.
func removeEmptyMemtableLogs(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".mem") {
			continue
		}
		info, err := e.Info()
		if err != nil || info.Size() != 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("remove empty memtable log %s: %w", e.Name(), err)
		}
	}
	return nil
}
