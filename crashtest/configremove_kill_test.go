package crashtest

import (
	"net/http"
	"testing"
	"time"
)

// A config.yaml endpoint with a backlog (a slow receiver, thousands
// pending and some in flight) is removed from config.yaml across a
// SIGKILL; the next run is SIGKILLed right after it starts (while the
// orphaned backlog is being cancelled in the background); the run after
// names the endpoint again, at a new URL. The old URL gets nothing after
// the first kill, the endpoint named again gets none of the old
// deliveries, and a new event reaches it.
func TestConfigEndpointRemovedThenReaddedAcrossKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const n = 4000
	slow := newCountingReceiver(t, 3*time.Second)
	sink := newCountingReceiver(t, 0)
	fresh := newCountingReceiver(t, 0)
	sup := newSupervisor(t, buildBinary(t), slow.srv.URL)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	publishEvents(t, sup, "e", n)
	waitUntil(t, 20*time.Second, "attempts in flight", func() bool { return endpointDeliveries(t, sup, endpointID, "delivering") > 0 })
	if err := sup.kill(); err != nil {
		t.Fatal(err)
	}
	slowBefore := len(slow.hit)
	other := defaultConfig
	other.endpoint = "other"
	sup.writeConfig(t, sink.srv.URL, other)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	if err := sup.kill(); err != nil {
		t.Fatal(err)
	}
	sup.writeConfig(t, fresh.srv.URL, defaultConfig)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	st, b, _, err := adminCall(sup.client, http.MethodPost, sup.adminURL+"/api/v1/events",
		map[string]any{"source": sourceID, "type": "t", "event_id": "after", "payload": map[string]any{"n": -1}}, nil)
	if err != nil || st != http.StatusAccepted {
		t.Fatalf("publish: %d %s %v", st, b, err)
	}
	waitUntil(t, 20*time.Second, "the new event at the endpoint named again", func() bool { return len(fresh.keys()) >= 1 })
	waitUntil(t, 20*time.Second, "no live delivery of the old backlog", func() bool {
		return endpointDeliveries(t, sup, endpointID, "pending") == 0 && endpointDeliveries(t, sup, endpointID, "delivering") == 0
	})
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
	if got := fresh.keys(); len(got) != 1 {
		t.Errorf("the endpoint named again got %d distinct events, want only the new one", len(got))
	}
	if d := len(slow.hit) - slowBefore; d > 0 {
		t.Errorf("the removed endpoint's old URL got %d requests after the kill", d)
	}
	for _, p := range sup.logProblems() {
		t.Errorf("gateway crashed: %s", p)
	}
}
