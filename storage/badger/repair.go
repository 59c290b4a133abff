package badger

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// removeEmptyLogs deletes memtable logs (*.mem) and value logs (*.vlog)
// of size zero.
//
// At every open Badger creates a new memtable log and the next value log
// and then sizes each; a process killed between the two leaves an empty
// file, and Badger then refuses to open the directory at all ("while
// opening fid: N err: Create a new file", "Open existing file: ...vlog
// err: Create a new file"): one unlucky kill during startup would keep the
// gateway down for good. An empty log holds no entry (a value log's header
// alone is 20 bytes), so removing it loses nothing.
func removeEmptyLogs(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if e.IsDir() || !(strings.HasSuffix(e.Name(), ".mem") || strings.HasSuffix(e.Name(), ".vlog")) {
			continue
		}
		info, err := e.Info()
		if err != nil || info.Size() != 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("remove empty log %s: %w", e.Name(), err)
		}
	}
	return nil
}
