package crashtest

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every open of the store makes Badger create the next value log file
// (maxFid+1) and then size it. A SIGKILL between the two (a restart killed
// during its startup) leaves an empty NNNNNN.vlog, and every later start
// failed ("Open existing file: .../000002.vlog err: Create a new file"):
// the gateway stayed down. The state such a kill leaves is made exactly
// here: the store is written and the process killed, then an empty value
// log with the next file id is put beside the others. The start that
// follows must serve, and deliver the acknowledged event.
func TestEmptyValueLogFromAKilledStartupDoesNotFailTheNextStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	rc, sup := startWithReceiver(t)
	st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/events",
		map[string]any{"source": sourceID, "type": "t", "event_id": "before-kill", "payload": map[string]any{"n": 1}}, nil)
	if err != nil || st != http.StatusAccepted {
		t.Fatalf("publish: %d %s %v", st, b, err)
	}
	if err := sup.kill(); err != nil {
		t.Fatal(err)
	}
	// The next start's value log, created but not yet sized.
	next := nextValueLog(t, sup.dataDir)
	if err := os.WriteFile(next, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("left an empty %s, as a kill during startup does", filepath.Base(next))
	if err := sup.start(); err != nil {
		t.Fatalf("the first start after a kill during startup failed: %v", err)
	}
	waitUntil(t, 10*time.Second, "the acknowledged event at the receiver", func() bool { return len(rc.keys()) == 1 })
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
}

// nextValueLog names the value log file Badger creates at the next open:
// one past the highest file id in dir.
func nextValueLog(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	maxFid := uint64(0)
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".vlog")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(name, 10, 32)
		if err != nil {
			continue
		}
		maxFid = max(maxFid, n)
	}
	if maxFid == 0 {
		t.Fatalf("no value log in %s", dir)
	}
	return filepath.Join(dir, fmt.Sprintf("%06d.vlog", maxFid+1))
}
