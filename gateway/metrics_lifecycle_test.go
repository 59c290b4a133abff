package gateway

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrapeMetrics returns the admin listener's /metrics text.
func scrapeMetrics(t *testing.T, g *gw) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+g.AdminAddr()+"/metrics", nil)
	st, _, b := do(t, req)
	if st != 200 {
		t.Fatalf("/metrics: %d", st)
	}
	return string(b)
}

// A deleted source's ingest series must go with it, as a deleted
// endpoint's do (TestMetricsForgetDeletedEndpoints): source ids are global
// (the ingest path), so a source created later with the same id, maybe
// another tenant's, would otherwise continue the old source's counts.
func TestMetricsForgetDeletedSources(t *testing.T) {
	g := startGateway(t, gwOptions{})
	if st, _, b := g.post("open", []byte(`{"id":"s1","type":"a"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	series := `hookgate_ingest_requests_total{outcome="accepted",source="open"}`
	waitFor(t, 5*time.Second, "the source's series", func() bool {
		return regexp.MustCompile(regexp.QuoteMeta(series) + ` 1\n`).MatchString(scrapeMetrics(t, g))
	})
	must[jsonMap](t, 204)(g.api("DELETE", "/sources/open", acmeToken, nil))

	// globex takes the id that acme gave up, and gets one event.
	must[jsonMap](t, 201)(g.api("POST", "/sources", opToken, jsonMap{"id": "open", "tenant": "globex", "verify": jsonMap{"scheme": "none"}}))
	if st, _, b := g.post("open", []byte(`{"id":"s2","type":"a"}`), nil); st != 202 {
		t.Fatalf("ingest to globex's source: %d %s", st, b)
	}
	m := regexp.MustCompile(regexp.QuoteMeta(series) + ` (\d+)`).FindStringSubmatch(scrapeMetrics(t, g))
	if m == nil || m[1] != "1" {
		t.Fatalf("globex's new source %q has accepted one event; /metrics says %v (acme's deleted source's count carried over)", "open", m)
	}
}

// An attempt in flight when its endpoint is deleted finishes afterwards
// (the dispatcher lets it), and reports to the metrics then: the series
// that forgetEndpoint just dropped come back for good, and the delivery,
// which the delete cancelled (its outcome is dropped: lease lost), is
// counted as succeeded.
func TestMetricsStayForgottenAfterAnAttemptInFlightAtDelete(t *testing.T) {
	slow := newHeldReceiver(t)
	g := startGateway(t, gwOptions{})
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "gone", "url": slow.URL + "/gone"}))
	if st, _, b := g.post("open", []byte(`{"id":"d1","type":"a"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	slow.waitHit(t)
	if st, _, b := g.api("DELETE", "/endpoints/gone", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	slow.release() // the attempt in flight ends: 200
	// Wait until the attempt is over (its slot is free again).
	waitFor(t, 10*time.Second, "the attempt to end", func() bool {
		return strings.Contains(scrapeMetrics(t, g), `hookgate_delivery_in_flight{endpoint="gone"} 0`)
	})
	_, _, dl := g.api("GET", "/deliveries?endpoint=gone", opToken, nil)
	t.Logf("the store: %s", dl)
	text := scrapeMetrics(t, g)
	for _, s := range []string{`hookgate_deliveries_total{endpoint="gone"`, `hookgate_delivery_attempts_total{endpoint="gone"`} {
		if i := strings.Index(text, s); i >= 0 {
			line := text[i:]
			line = line[:strings.IndexByte(line, '\n')]
			t.Errorf("after the delete /metrics has %s", line)
		}
	}
}

// Every ingest request refused is an ingest outcome (README: "/metrics
// ... ingest outcomes per source"): a webhook refused for its size (413,
// GitHub sends up to 25 MB; README says to raise max_body for it) or for a
// Content-Encoding (415) is a provider's event the gateway dropped, and
// neither /metrics nor the log shows it.
func TestMetricsCountRefusedIngests(t *testing.T) {
	g := startGateway(t, gwOptions{}) // max_body: 4KiB
	big := []byte(`{"id":"big","pad":"` + strings.Repeat("x", 8<<10) + `"}`)
	st, _, _ := g.post("open", big, nil)
	if st != 413 {
		t.Fatalf("oversized body: %d, want 413", st)
	}
	if st, _, _ := g.post("open", []byte(`{"id":"gz"}`), map[string]string{"Content-Encoding": "gzip"}); st != 415 {
		t.Fatalf("encoded body: %d, want 415", st)
	}
	total := 0
	for _, m := range regexp.MustCompile(`(?m)^hookgate_ingest_requests_total\{[^}]*\} (\d+)$`).FindAllStringSubmatch(scrapeMetrics(t, g), -1) {
		n, _ := strconv.Atoi(m[1])
		total += n
	}
	text := scrapeMetrics(t, g)
	if total != 2 || !strings.Contains(text, `hookgate_ingest_requests_total{outcome="too_large",source="open"} 1`) ||
		!strings.Contains(text, `hookgate_ingest_requests_total{outcome="encoded",source="open"} 1`) {
		t.Fatalf("two ingest requests refused (413, 415); hookgate_ingest_requests_total counts %d:\n%s", total, text)
	}
	// A path that names no source is counted without its name.
	g.post("no-such-source", big, nil)
	if text := scrapeMetrics(t, g); !strings.Contains(text, `hookgate_ingest_requests_total{outcome="too_large",source=""} 1`) || strings.Contains(text, "no-such-source") {
		t.Fatalf("a refused request to an unknown source:\n%s", text)
	}
}
