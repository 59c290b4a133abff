package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"hookgate/internal/tmpfs"

	"golang.org/x/sys/unix"
)

// A gateway restarted on a disk below its write reserve refuses new events
// with 503 (nothing can be stored), but a provider's retry of an event it
// acknowledged before needs no write: SPEC section 3 gives it the first
// answer, 202 and Idempotent-Replayed. It got 503 (fixed): after a restart the
// store's table of recent keys is empty, so the retry goes to the writer,
// which refuses the whole batch for space before it reads the stored
// answer. Stripe, Shopify and the rest then count a failed delivery of an
// event that is stored and delivered (Shopify removes a subscription after
// repeated failures).
func TestRetryOfAnAcknowledgedEventAfterARestartOnANearlyFullDisk(t *testing.T) {
	mnt := tmpfs.Mount(t, "400m")
	dir := filepath.Join(mnt, "data")
	g := startGateway(t, gwOptions{dir: dir})
	body := []byte(`{"id":"acked","type":"x"}`)
	st, _, first := g.post("open", body, nil)
	if st != 202 {
		t.Fatalf("ingest: %d %s", st, first)
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// 200 MiB free: room to open (136 MiB), below the write reserve (264 MiB).
	var fs unix.Statfs_t
	if err := unix.Statfs(mnt, &fs); err != nil {
		t.Fatal(err)
	}
	ballast, err := os.Create(filepath.Join(mnt, "ballast"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(ballast.Fd()), 0, 0, int64(fs.Bavail)*int64(fs.Bsize)-200<<20); err != nil {
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
		t.Fatal(err)
	}
	defer func() { _ = g2.Shutdown() }()
	if err := g2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := &gw{Gateway: g2, t: t, dir: dir, logs: logs}
	if st, _, b := h.post("open", []byte(`{"id":"new","type":"x"}`), nil); st != 503 {
		t.Fatalf("setup: a new event below the reserve: %d %s, want 503", st, b)
	}
	st, hdr, again := h.post("open", body, nil)
	if st != 202 || hdr.Get(headerReplayed) != "true" || string(again) != string(first) {
		t.Fatalf("the provider's retry of the acknowledged event: %d replayed=%q %s; want 202, Idempotent-Replayed, %s",
			st, hdr.Get(headerReplayed), again, first)
	}
}
