package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/internal/testsupport"
)

// TestLoweredRetentionDoesNotDeleteAStoredEndpointsDeliveriesMidRetry:
// config.yaml is checked against delivery.retry and its own endpoints, and
// the admin API against new retry settings, but an endpoint created
// through the API keeps the retry window it got then. When an operator
// later lowers retention, the start warns about the endpoint, and the
// sweep keeps its events while their deliveries retry inside the window
// (it deleted them: they never reached the replayable failed state, and
// GET /deliveries/{id} answered 404).
func TestLoweredRetentionDoesNotDeleteAStoredEndpointsDeliveriesMidRetry(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	rc.failAt("api", true)
	g := startGateway(t, gwOptions{})
	ep := must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{
		"id": "api-ep", "tenant": "acme", "url": rc.url("api"), "sources": []string{"open"},
		// A window of an hour, well within the retention of the time (720h).
		"retry": jsonMap{"initial_interval": "200ms", "max_interval": "500ms", "max_attempts": 10000, "max_elapsed": "1h"},
	}))
	if ep.Retry.MaxElapsed != "1h0m0s" {
		t.Fatalf("endpoint retry: %+v", ep.Retry)
	}
	st, _, body := g.post("open", []byte(`{"id":"evt_lowered","type":"x"}`), nil)
	if st != 202 {
		t.Fatalf("ingest: %d %s", st, body)
	}
	evs := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=api-ep", opToken, nil))
	if len(evs.Data) != 1 {
		t.Fatalf("deliveries: %+v", evs.Data)
	}
	dlv := evs.Data[0].ID
	testsupport.WaitFor(t, 10*time.Second, "a failed first attempt", func() bool { return rc.countAt("api") > 0 })
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}

	// The operator lowers retention: a config.yaml check-config and serve
	// take (retention covers delivery.retry and every config endpoint).
	yaml := fmt.Sprintf(`
server: {listen: "127.0.0.1:0", max_body: 4KiB}
admin:
  listen: "127.0.0.1:0"
  tokens: [{token: operator-token}]
storage: {path: %q}
retention: 3s
delivery:
  allow_private_targets: true
  retry: {initial_interval: 100ms, max_interval: 200ms, max_elapsed: 2s}
sources:
  - {id: open, tenant: acme, verify: {scheme: none}, event_id: json:/id, event_type: json:/type}
`, g.dir)
	h2, err := launch(t, yaml, gwOptions{dir: g.dir})
	if err != nil {
		t.Fatal(err)
	}
	logs := h2.logs
	if !strings.Contains(logs.String(), "endpoint retries for longer than retention") || !strings.Contains(logs.String(), "endpoint=api-ep") {
		t.Errorf("the start did not name the endpoint that retries for longer than retention: %s", logs.String())
	}

	// The delivery goes on retrying in its one-hour window...
	n := rc.countAt("api")
	testsupport.WaitFor(t, 10*time.Second, "retries after the restart", func() bool { return rc.countAt("api") > n+2 })
	// ...past the new retention, then the minute's sweep runs.
	received := time.Now()
	testsupport.WaitFor(t, 10*time.Second, "the event to pass retention (3s)", func() bool { return time.Since(received) > 4*time.Second })
	h2.bg.purge(t.Context())

	st, _, body = h2.api("GET", "/deliveries/"+dlv, opToken, nil)
	if st != 200 {
		t.Fatalf("GET /deliveries/%s after the sweep: %d %s; the delivery was still retrying inside its endpoint's "+
			"max_elapsed (1h), and the lowered retention deleted it with its event", dlv, st, body)
	}
}
