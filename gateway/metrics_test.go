package gateway

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMetrics: /metrics (no token) exposes ingest outcomes per source,
// attempts and deliveries per endpoint, the latency histograms and the
// outbox gauges, with values that follow what happened.
func TestMetrics(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q}\n  - {id: down, tenant: acme, url: \"http://127.0.0.1:1/\", event_types: [\"never.*\"]}\n", rcv.url("ep"))})
	g.post("open", []byte(`{"id":"m1","type":"a"}`), nil)
	g.post("open", []byte(`{"id":"m1","type":"a"}`), nil)
	g.post("sw", []byte(`{}`), nil)
	waitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() == 1 })
	wants := []string{
		`hookgate_deliveries_total{endpoint="ep",state="succeeded"} 1`,
		`hookgate_ingest_requests_total{outcome="accepted",source="open"} 1`,
		`hookgate_ingest_requests_total{outcome="replayed",source="open"} 1`,
		`hookgate_ingest_requests_total{outcome="unauthorized",source="sw"} 1`,
		`hookgate_delivery_attempts_total{endpoint="ep",outcome="succeeded"} 1`,
		`hookgate_delivery_attempt_seconds_count{endpoint="ep"} 1`,
		`hookgate_ingest_to_delivery_seconds_count 1`,
		`hookgate_outbox_pending{endpoint="ep"} 0`,
		`hookgate_outbox_due{endpoint="down"} 0`,
	}
	// Poll until every series shows what happened: one scrape is not a
	// snapshot (the registry collects its series concurrently), so a
	// scrape may see the delivery counted and its attempt not yet.
	var text string
	var missing []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		req, _ := http.NewRequest(http.MethodGet, "http://"+g.AdminAddr()+"/metrics", nil)
		st, _, b := do(t, req)
		text, missing = string(b), nil
		for _, want := range wants {
			if st != 200 || !strings.Contains(text, want) {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s the metrics (status %d) still lack %q", st, missing)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Every acknowledged write waited for a store sync: both series count
	// at least the accepted event.
	for _, series := range []string{"hookgate_store_sync_seconds_count", `hookgate_store_sync_seconds_bucket{le="+Inf"}`, "hookgate_store_synced_writes_total"} {
		m := regexp.MustCompile(regexp.QuoteMeta(series) + ` (\d+)`).FindStringSubmatch(text)
		if m == nil {
			t.Errorf("metrics lack %s", series)
			continue
		}
		if n, _ := strconv.Atoi(m[1]); n < 1 {
			t.Errorf("%s is %d", series, n)
		}
	}
}

// A deleted endpoint's attempt and delivery series go with it: they stayed
// forever before, and an endpoint created later with the same id (maybe
// another tenant's) continued its counts.
func TestMetricsForgetDeletedEndpoints(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{})
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "gone", "url": rcv.url("gone")}))
	g.post("open", []byte(`{"id":"f1","type":"a"}`), nil)
	waitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() == 1 })
	scrape := func() string {
		req, _ := http.NewRequest(http.MethodGet, "http://"+g.AdminAddr()+"/metrics", nil)
		_, _, b := do(t, req)
		return string(b)
	}
	series := []string{`hookgate_deliveries_total{endpoint="gone"`, `hookgate_delivery_attempts_total{endpoint="gone"`, `hookgate_delivery_attempt_seconds_count{endpoint="gone"}`}
	waitFor(t, 10*time.Second, "the endpoint's series", func() bool {
		text := scrape()
		for _, s := range series {
			if !strings.Contains(text, s) {
				return false
			}
		}
		return true
	})
	if st, _, b := g.api("DELETE", "/endpoints/gone", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	text := scrape()
	for _, s := range series {
		if strings.Contains(text, s) {
			t.Errorf("after the delete /metrics still has %s…", s)
		}
	}
}
