package gateway

import (
	"strings"
	"testing"

	"hookgate/storage"
)

// Requests answered outside their route's own outcomes are counted: a
// repeated Content-Length (400), a method that is not HTTP's (400) and a
// handler's panic (500), per listener. Neither showed anywhere in /metrics: a flood of smuggling
// attempts, or a handler panicking on every request, went unseen.
func TestMetricsCountFramingRefusalsAndPanics(t *testing.T) {
	ps := &panickyStore{}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { ps.Store = s; return ps }})
	for _, line := range []string{
		`hookgate_http_refused_total{listener="ingest",reason="framing"} 0`,
		`hookgate_http_refused_total{listener="admin",reason="panic"} 0`,
	} {
		if m := scrapeMetrics(t, g); !strings.Contains(m, line) {
			t.Fatalf("/metrics before any refusal lacks %q", line)
		}
	}
	if sts := rawPipeline(t, g, pipelinedPost("twice", "Content-Length: 23\r\n"), 1); len(sts) != 1 || sts[0] != 400 {
		t.Fatalf("repeated Content-Length: %v", sts)
	}
	if a := rawExchange(t, g.AdminAddr(), "PROPFIND /api/v1/events HTTP/1.1\r\nHost: x\r\n\r\n"); a.status != 400 {
		t.Fatalf("unknown method: %d", a.status)
	}
	ps.on.Store(true)
	wantProblem(t, "ingest that panics", 500, "")(g.post("open", []byte(`{"id":"p1","type":"t"}`), nil))
	wantProblem(t, "listing that panics", 500, "")(g.api("GET", "/events", acmeToken, nil))
	wantProblem(t, "listing that panics", 500, "")(g.api("GET", "/events", acmeToken, nil))
	m := scrapeMetrics(t, g)
	for _, line := range []string{
		`hookgate_http_refused_total{listener="ingest",reason="framing"} 1`,
		`hookgate_http_refused_total{listener="ingest",reason="panic"} 1`,
		`hookgate_http_refused_total{listener="admin",reason="panic"} 2`,
		`hookgate_http_refused_total{listener="admin",reason="framing"} 0`,
		`hookgate_http_refused_total{listener="admin",reason="method"} 1`,
		`hookgate_http_refused_total{listener="ingest",reason="method"} 0`,
	} {
		if !strings.Contains(m, line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}
