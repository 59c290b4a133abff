package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookgate/internal/tmpfs"
)

// TestGatewayStartsOnADiskWithRoomToOpen: a gateway stopped (a deploy, a
// crash) once its disk reached the write reserve starts again while there
// is room for Badger to open (README): ingest is refused (503) and
// /readyz says so, but the admin API reads and manages, and writes come
// back once room is made. Before, New's write of config.yaml to the store
// was refused like an ingest, and the gateway did not start.
func TestGatewayStartsOnADiskWithRoomToOpen(t *testing.T) {
	mnt := tmpfs.Mount(t, "400m")
	dir := filepath.Join(mnt, "data")
	g := startGateway(t, gwOptions{dir: dir})
	if st, _, b := g.post("open", []byte(`{"id":"before","type":"x"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	h := restartNearlyFull(t, mnt, dir)
	if st, hdr, b := h.post("open", []byte(`{"id":"after","type":"x"}`), nil); st != 503 || hdr.Get("Retry-After") == "" {
		t.Fatalf("ingest below the reserve: %d %s", st, b)
	}
	if st, _, b := h.api("GET", "/events", acmeToken, nil); st != 200 || !strings.Contains(string(b), `"event_id":"before"`) {
		t.Fatalf("GET /events below the reserve: %d %s", st, b)
	}
	must[endpointView](t, 201)(h.api("POST", "/endpoints", acmeToken, jsonMap{"id": "managed", "url": "http://receiver.test/m"}))
	req, _ := http.NewRequest(http.MethodGet, "http://"+h.AdminAddr()+"/readyz", nil)
	if st, _, _ := do(t, req); st != 503 {
		t.Fatalf("/readyz below the reserve: %d", st)
	}
	if err := os.Remove(filepath.Join(mnt, "ballast")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "ingest with room again", func() bool {
		st, _, _ := h.post("open", []byte(`{"id":"after","type":"x"}`), nil)
		return st == 202
	})
}

// restartNearlyFull starts a gateway on dir (under the tmpfs mnt, of
// 400 MiB) once only 200 MiB are left free: more than Open's 136 MiB, less
// than the 264 MiB write reserve. Ingest is refused from then on.
func restartNearlyFull(t *testing.T, mnt, dir string) *gw {
	t.Helper()
	tmpfs.Fill(t, filepath.Join(mnt, "ballast"), 200<<20)
	cfg, err := ParseConfig([]byte(fmt.Sprintf(testConfig, dir, "72h", testSecret, "")), "test.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatalf("gateway on a disk with 200 MiB free (README: it starts with 136 MiB or more, writes refused) did not start: %v", err)
	}
	t.Cleanup(func() { _ = g.Shutdown() })
	if err := g.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	return &gw{Gateway: g, t: t, dir: dir, logs: logs}
}
