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

	"golang.org/x/sys/unix"
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
	// Leave 200 MiB free: more than Open's 136 MiB, less than the 264 MiB
	// write reserve.
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	ballast, err := os.Create(filepath.Join(mnt, "ballast"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(ballast.Fd()), 0, 0, free-200<<20); err != nil {
		t.Fatal(err)
	}
	_ = ballast.Close()

	cfg, err := ParseConfig([]byte(fmt.Sprintf(testConfig, dir, "72h", testSecret, "")), "test.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	g2, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatalf("gateway on a disk with 200 MiB free (README: it starts with 136 MiB or more, writes refused) did not start: %v", err)
	}
	defer func() { _ = g2.Shutdown() }()
	if err := g2.Start(context.Background()); err != nil {
		t.Fatalf("start: %v", err)
	}
	h := &gw{Gateway: g2, t: t, dir: dir, logs: logs}
	if st, hdr, b := h.post("open", []byte(`{"id":"after","type":"x"}`), nil); st != 503 || hdr.Get("Retry-After") == "" {
		t.Fatalf("ingest below the reserve: %d %s", st, b)
	}
	if st, _, b := h.api("GET", "/events", acmeToken, nil); st != 200 || !strings.Contains(string(b), `"event_id":"before"`) {
		t.Fatalf("GET /events below the reserve: %d %s", st, b)
	}
	must[endpointView](t, 201)(h.api("POST", "/endpoints", acmeToken, jsonMap{"id": "managed", "url": "http://receiver.test/m"}))
	req, _ := http.NewRequest(http.MethodGet, "http://"+g2.AdminAddr()+"/readyz", nil)
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
