package crashtest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// Another endpoint signing secret for the restart with a changed config.
const rotatedEndpointSecret = "whsec_cm90YXRlZC1lbmRwb2ludC1zZWNyZXQtMzItYnl0ZXMh"

// Deliveries pending (the endpoint answers 500) when the gateway is
// SIGKILLed; it restarts with a config.yaml that moves the endpoint to
// another URL and gives it a new signing secret. Every pending delivery
// must then reach the new URL, signed with the new secret, carrying the
// same Idempotency-Key, and the old URL gets nothing more.
func TestConfigMovedEndpointAcrossKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const n = 200
	var oldHits atomic.Int64
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		oldHits.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer old.Close()
	rc, err := newReceiver(rotatedEndpointSecret)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()

	sup := newSupervisor(t, buildBinary(t), old.URL)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("mv%04d", i)
		st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/events",
			map[string]any{"source": sourceID, "type": "t", "event_id": ids[i],
				"payload": map[string]any{"type": "t", "data": map[string]any{"test_id": ids[i], "n": i}}}, nil)
		if err != nil || st != http.StatusAccepted {
			t.Fatalf("publish: %d %s %v", st, b, err)
		}
	}
	waitUntil(t, 20*time.Second, "failing attempts at the old URL", func() bool { return oldHits.Load() >= 5 })
	if err := sup.kill(); err != nil {
		t.Fatal(err)
	}
	before := oldHits.Load()
	c := defaultConfig
	c.secret = rotatedEndpointSecret
	sup.writeConfig(t, rc.URL(), c)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(25 * time.Second)
	for {
		all, missing := rc.deliveredAll(ids)
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d pending deliveries did not reach the new URL within 25 s", missing, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, _, problems := rc.snapshot()
	for _, p := range problems {
		t.Errorf("new receiver: %s", p)
	}
	if after := oldHits.Load(); after != before {
		t.Errorf("the old URL got %d attempts after the restart that moved the endpoint away", after-before)
	}
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range sup.logProblems() {
		t.Errorf("gateway crashed: %s", p)
	}
}
