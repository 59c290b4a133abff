package crashtest

import (
	"os"
	"strings"
	"testing"
	"time"
)

// The data directory goes away under a running gateway (a detached
// volume, a deleted ./data): its store's next sync fails, and the store
// refuses every write until it is opened again. The binary exits 1, for
// its supervisor to restart it. It stayed up, /healthz 200, every ingest
// 503; and once it did stop, Badger's close retried flushing to the
// missing directory for ever, so it never exited.
func TestLosingTheStoreExitsForARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	_, sup := startWithReceiver(t)
	if err := os.RemoveAll(sup.dataDir); err != nil {
		t.Fatal(err)
	}
	p := sup.current()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after its data directory went away\n%s", tail(p.log, 20))
	}
	if code := p.state.ExitCode(); code != 1 {
		t.Fatalf("exit code %d, want 1\n%s", code, tail(p.log, 20))
	}
	if !strings.Contains(p.output(), "the store failed and must be reopened") {
		t.Fatalf("the log does not say why it stopped\n%s", tail(p.log, 20))
	}
}
