package gateway

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
	"hookgate/internal/tmpfs"
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
	h := restartNearlyFull(t, mnt, dir)
	if st, _, b := h.post("open", []byte(`{"id":"new","type":"x"}`), nil); st != 503 {
		t.Fatalf("setup: a new event below the reserve: %d %s, want 503", st, b)
	}
	st, hdr, again := h.post("open", body, nil)
	if st != 202 || hdr.Get(inbound.HeaderReplayed) != "true" || string(again) != string(first) {
		t.Fatalf("the provider's retry of the acknowledged event: %d replayed=%q %s; want 202, Idempotent-Replayed, %s",
			st, hdr.Get(inbound.HeaderReplayed), again, first)
	}
}

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
	must[admin.Endpoint](t, 201)(h.api("POST", "/endpoints", acmeToken, jsonMap{"id": "managed", "url": "http://receiver.test/m"}))
	req, _ := http.NewRequest(http.MethodGet, "http://"+h.AdminAddr()+"/readyz", nil)
	if st, _, _ := do(t, req); st != 503 {
		t.Fatalf("/readyz below the reserve: %d", st)
	}
	if err := os.Remove(filepath.Join(mnt, "ballast")); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, 10*time.Second, "ingest with room again", func() bool {
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
	h, err := launch(t, fmt.Sprintf(testConfig, dir, "72h", testSecret, ""), gwOptions{dir: dir})
	if err != nil {
		t.Fatalf("gateway on a disk with 200 MiB free (README: it starts with 136 MiB or more, writes refused) did not start: %v", err)
	}
	return h
}
