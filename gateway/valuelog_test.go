package gateway

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/config"
	"hookgate/internal/testsupport"
)

// vlogBytes sums the sizes of Badger's value log files in dir (Badger
// truncates them to what they hold when it closes).
func vlogBytes(t *testing.T, dir string) int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// With the default server.max_body (1MiB), a body the gateway accepts
// makes an event record larger than badger.MaxInlineRecord (1MiB): the
// body plus its headers and ids. Such a record went to Badger's value log,
// whose space the engine never reclaims, so the disk those events took was
// never given back, whatever retention deleted: a sender posting large
// incompressible bodies grew the data directory for ever. Such records are
// now written in parts that stay in the LSM tree.
func TestDefaultMaxBodyEventsAreReclaimedAfterRetention(t *testing.T) {
	dir := t.TempDir()
	h := startGateway(t, gwOptions{dir: dir, config: func(c *config.Config) { c.Server.MaxBody = config.DefaultMaxBody }})
	const events = 4
	for i := range events {
		body := make([]byte, config.DefaultMaxBody) // exactly server.max_body: accepted
		if _, err := rand.Read(body); err != nil {  // incompressible
			t.Fatal(err)
		}
		st, _, b := h.post("open", body, map[string]string{
			"Content-Type":    "application/octet-stream",
			"Idempotency-Key": fmt.Sprintf("big-%d", i),
		})
		if st != 202 {
			t.Fatalf("event %d: %d %s", i, st, b)
		}
	}
	if err := h.Shutdown(); err != nil {
		t.Fatal(err)
	}
	t.Logf("value log after %d events of max_body: %d bytes", events, vlogBytes(t, dir))

	// A gateway whose retention has passed purges every one of them...
	h2 := startGateway(t, gwOptions{dir: dir, config: func(c *config.Config) {
		c.Server.MaxBody = config.DefaultMaxBody
		c.Retention = config.Duration(time.Millisecond)
	}})
	testsupport.WaitFor(t, 20*time.Second, "retention to purge the events", func() bool {
		h2.bg.purge(t.Context())
		st, _, b := h2.api("GET", "/events", opToken, nil)
		var page struct{ Data []json.RawMessage }
		return st == 200 && json.Unmarshal(b, &page) == nil && len(page.Data) == 0
	})
	if err := h2.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// ...but the disk they took is not given back.
	if n := vlogBytes(t, dir); n > 64<<10 {
		t.Errorf("after retention purged all %d events, Badger's value log still holds %d bytes (never reclaimed); "+
			"events of the default max_body must stay in the LSM tree", events, n)
	}
}

// A max_body over what the Badger engine keeps in its LSM tree is allowed
// (GitHub sends up to 25 MB) but warned about: such events' space is not
// reclaimed after purge.
func TestLargeMaxBodyWarnsAboutTheValueLog(t *testing.T) {
	for _, c := range []struct {
		max  config.Size
		warn bool
	}{{config.DefaultMaxBody, false}, {2 << 20, true}} {
		var logs syncBuffer
		cfg := &config.Config{Server: config.ServerConfig{MaxBody: c.max}, Storage: config.StorageConfig{Driver: "badger", Path: t.TempDir()}}
		s, err := openStore(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "value log"); got != c.warn {
			t.Errorf("max_body %v: warned %v, want %v; logs:\n%s", c.max, got, c.warn, logs.String())
		}
	}
}
