package crashtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Endpoints answering 410 one after another, the gateway SIGKILLed while
// their disables are being written: after the restart (and a second
// event, for an endpoint whose disable the kill cut) every endpoint is
// disabled, and each has exactly one hookgate.endpoint.disabled, stored
// and delivered to the tenant's subscriber (a redelivery carries the same
// Idempotency-Key). The disable and its operational event are one store
// write: a kill between them would leave an endpoint disabled with no
// event (or, the event stored without the disable, a second event when
// the 410 is answered again after the restart).
func TestKillWhileEndpointsAreDisabledLosesNoOperationalEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const n = 40
	var mu sync.Mutex
	gone := 0
	ops := map[string]map[string]bool{} // about endpoint -> Idempotency-Keys of its endpoint.disabled
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch {
		case strings.HasPrefix(r.URL.Path, "/gone/"):
			// Spread the answers over a few hundred milliseconds, so
			// that the kill lands among the disables.
			i, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/gone/"))
			time.Sleep(time.Duration(i) * 10 * time.Millisecond)
			mu.Lock()
			gone++
			mu.Unlock()
			w.WriteHeader(http.StatusGone)
		case r.URL.Path == "/ops":
			var p struct{ Type, Endpoint string }
			_ = json.Unmarshal(b, &p)
			if p.Type == "hookgate.endpoint.disabled" {
				mu.Lock()
				if ops[p.Endpoint] == nil {
					ops[p.Endpoint] = map[string]bool{}
				}
				ops[p.Endpoint][r.Header.Get("Idempotency-Key")] = true
				mu.Unlock()
			}
		}
	}))
	defer srv.Close()
	sup := newSupervisor(t, buildBinary(t), srv.URL)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	create := func(body map[string]any) {
		t.Helper()
		st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/endpoints", body, nil)
		if err != nil || st != http.StatusCreated {
			t.Fatalf("create endpoint %v: %d %s %v", body["id"], st, b, err)
		}
	}
	create(map[string]any{"id": "ops", "tenant": tenantID, "url": srv.URL + "/ops", "event_types": []string{"hookgate.endpoint.*"}})
	for i := range n {
		create(map[string]any{"id": fmt.Sprintf("gone-%02d", i), "tenant": tenantID, "url": fmt.Sprintf("%s/gone/%d", srv.URL, i), "event_types": []string{"g"}})
	}
	st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/events",
		map[string]any{"source": sourceID, "type": "g", "event_id": "g1", "payload": map[string]any{"type": "g"}}, nil)
	if err != nil || st != http.StatusAccepted {
		t.Fatalf("publish: %d %s %v", st, b, err)
	}
	waitUntil(t, 20*time.Second, "a few 410 answers", func() bool { mu.Lock(); defer mu.Unlock(); return gone >= 8 })
	if err := sup.kill(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	atKill := gone
	mu.Unlock()
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}

	disabled := func() int {
		st, b, _, err := adminCall(sup.client, http.MethodGet, sup.adminURL+"/api/v1/endpoints?limit=1000", nil, nil)
		if err != nil || st != http.StatusOK {
			t.Fatalf("list endpoints: %d %v", st, err)
		}
		var list struct {
			Data []struct {
				ID       string `json:"id"`
				Disabled bool   `json:"disabled"`
			} `json:"data"`
		}
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, ep := range list.Data {
			if ep.Disabled && strings.HasPrefix(ep.ID, "gone-") {
				k++
			}
		}
		return k
	}
	// A 410 whose delivery's failure was stored but whose disable the kill
	// cut (two writes: the outcome, then the disable with its event) left
	// its endpoint enabled, with no event: a second event finds it gone again.
	st, b, _, err = adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/events",
		map[string]any{"source": sourceID, "type": "g", "event_id": "g2", "payload": map[string]any{"type": "g"}}, nil)
	if err != nil || st != http.StatusAccepted {
		t.Fatalf("publish again: %d %s %v", st, b, err)
	}
	waitUntil(t, 60*time.Second, "every gone endpoint disabled", func() bool { return disabled() == n })
	waitUntil(t, 30*time.Second, "an endpoint.disabled of each at ops", func() bool { mu.Lock(); defer mu.Unlock(); return len(ops) == n })

	st, b, _, err = adminCall(sup.client, http.MethodGet, sup.adminURL+"/api/v1/events?source=hookgate&type=hookgate.endpoint.disabled&limit=1000", nil, nil)
	if err != nil || st != http.StatusOK {
		t.Fatalf("list operational events: %d %s %v", st, b, err)
	}
	var evs struct {
		Data []struct {
			Body string `json:"body"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &evs); err != nil {
		t.Fatal(err)
	}
	stored := map[string]int{}
	for _, ev := range evs.Data {
		var p struct{ Endpoint string }
		if err := json.Unmarshal([]byte(ev.Body), &p); err != nil {
			t.Fatalf("operational event body %q: %v", ev.Body, err)
		}
		stored[p.Endpoint]++
	}
	for i := range n {
		id := fmt.Sprintf("gone-%02d", i)
		if stored[id] != 1 {
			t.Errorf("%s: %d endpoint.disabled events stored, want 1", id, stored[id])
		}
	}
	if len(stored) != n {
		t.Errorf("endpoint.disabled events about %d endpoints, want %d: %v", len(stored), n, stored)
	}
	mu.Lock()
	t.Logf("%d of %d endpoints had answered 410 at the kill; %d answers in all (a 410 whose disable the kill cut is answered again)", atKill, n, gone)
	for id, keys := range ops {
		if len(keys) != 1 {
			t.Errorf("ops got %s's endpoint.disabled under %d Idempotency-Keys, want 1", id, len(keys))
		}
	}
	mu.Unlock()
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
}
