package crashtest

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// POST /endpoints/{id}/rotate-secret (grace 0) answered 200 with the new
// secret, then SIGKILL at once: after the restart the endpoint shows the
// secret the 200 carried, and a delivery verifies with it alone.
func TestRotateSecretSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	sink := newCountingReceiver(t, 0)
	sup := newSupervisor(t, buildBinary(t), sink.srv.URL)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	const rounds = 3
	var secret string
	var rc *receiver
	for r := range rounds {
		if r == 0 {
			st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/endpoints",
				map[string]any{"id": "rot", "tenant": tenantID, "url": sink.srv.URL + "/rot"}, nil)
			if err != nil || st != http.StatusCreated {
				t.Fatalf("POST /endpoints: %d %s %v", st, b, err)
			}
		}
		st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/endpoints/rot/rotate-secret",
			map[string]any{"grace": "0s"}, nil)
		if err != nil || st != http.StatusOK {
			t.Fatalf("rotate-secret: %d %s %v", st, b, err)
		}
		if err := sup.kill(); err != nil {
			t.Fatal(err)
		}
		var ep struct{ Secret, URL string }
		if err := json.Unmarshal(b, &ep); err != nil {
			t.Fatal(err)
		}
		secret = ep.Secret
		if err := sup.start(); err != nil {
			t.Fatal(err)
		}
		st, b, _, err = adminCall(sup.client, http.MethodGet, sup.adminURL+"/api/v1/endpoints/rot", nil, nil)
		var got struct{ Secret string }
		if err != nil || st != http.StatusOK || json.Unmarshal(b, &got) != nil {
			t.Fatalf("GET endpoint: %d %s %v", st, b, err)
		}
		if got.Secret != secret {
			t.Fatalf("round %d: after the kill the endpoint's secret is %q, the acknowledged rotation said %q", r, got.Secret, secret)
		}
	}
	rc, err := newReceiver(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	st, b, _, err := adminCall(sup.client, http.MethodPatch, sup.adminURL+"/api/v1/endpoints/rot", map[string]any{"url": rc.URL()}, nil)
	if err != nil || st != http.StatusOK {
		t.Fatalf("PATCH: %d %s %v", st, b, err)
	}
	id := "rot-ev"
	st, b, _, err = adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/events",
		map[string]any{"source": sourceID, "type": "t", "event_id": id, "payload": map[string]any{"type": "t", "data": map[string]any{"test_id": id}}}, nil)
	if err != nil || st != http.StatusAccepted {
		t.Fatalf("publish: %d %s %v", st, b, err)
	}
	waitUntil(t, 20*time.Second, "the delivery", func() bool { ok, _ := rc.deliveredAll([]string{id}); return ok })
	_, _, problems := rc.snapshot()
	for _, p := range problems {
		t.Errorf("receiver: %s", p)
	}
}
