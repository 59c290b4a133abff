package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/internal/testsupport"
	"hookgate/storage"
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
	testsupport.WaitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() == 1 })
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
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "gone", "url": rcv.url("gone")}))
	g.post("open", []byte(`{"id":"f1","type":"a"}`), nil)
	testsupport.WaitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() == 1 })
	scrape := func() string {
		req, _ := http.NewRequest(http.MethodGet, "http://"+g.AdminAddr()+"/metrics", nil)
		_, _, b := do(t, req)
		return string(b)
	}
	series := []string{`hookgate_deliveries_total{endpoint="gone"`, `hookgate_delivery_attempts_total{endpoint="gone"`, `hookgate_delivery_attempt_seconds_count{endpoint="gone"}`}
	testsupport.WaitFor(t, 10*time.Second, "the endpoint's series", func() bool {
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

// heldIdleClaimStore holds the claims of one endpoint until released, as a
// busy disk does: a claim is a durable write, queued behind the group
// commit's batches and their fsync.
type heldIdleClaimStore struct {
	storage.Store
	endpoint string
	arrived  chan struct{}
	once     sync.Once
	release  chan struct{}
}

func (s *heldIdleClaimStore) Claim(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration) ([]storage.Job, error) {
	if endpoint == s.endpoint {
		s.once.Do(func() { close(s.arrived) })
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.Claim(ctx, endpoint, now, limit, lease)
}

// TestInFlightGaugeCountsOnlyAttempts: hookgate_delivery_in_flight
// ("Delivery attempts in flight, by endpoint") counted the slots an
// endpoint loop reserves for a claim before the claim is written, until
// the claim returned. An endpoint with nothing to deliver claims every
// second, so for the length of each claim (a durable write, behind the
// ingest batches under load) an idle endpoint showed max_in_flight
// attempts: an alert on in_flight >= max_in_flight fired falsely. Only
// attempts move the gauge now.
func TestInFlightGaugeCountsOnlyAttempts(t *testing.T) {
	rcv := newReceiver(t)
	s := &heldIdleClaimStore{endpoint: "idle", arrived: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(s.release) }) }
	g := startGateway(t, gwOptions{
		extra:     fmt.Sprintf("endpoints:\n  - {id: idle, tenant: globex, url: %q}\n", rcv.url("idle")),
		wrapStore: func(inner storage.Store) storage.Store { s.Store = inner; return s },
	})
	t.Cleanup(unblock)
	select {
	case <-s.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the endpoint loop never claimed")
	}
	text := scrapeMetrics(t, g)
	unblock()
	if !strings.Contains(text, `hookgate_outbox_pending{endpoint="idle"} 0`) || rcv.count() != 0 {
		t.Fatalf("the endpoint was meant to have nothing to deliver; receiver got %d:\n%s", rcv.count(), text)
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, `hookgate_delivery_in_flight{endpoint="idle"}`) && line != `hookgate_delivery_in_flight{endpoint="idle"} 0` {
			t.Fatalf("no event, no delivery, no attempt; /metrics says %q", line)
		}
	}
}

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
	testsupport.WaitFor(t, 5*time.Second, "the source's series", func() bool {
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
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "gone", "url": slow.URL + "/gone"}))
	if st, _, b := g.post("open", []byte(`{"id":"d1","type":"a"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	slow.waitHit(t)
	if st, _, b := g.api("DELETE", "/endpoints/gone", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	slow.release() // the attempt in flight ends: 200
	// Wait until the attempt is over (its slot is free again).
	testsupport.WaitFor(t, 10*time.Second, "the attempt to end", func() bool {
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

// refusalTotal sums every series of hookgate_ingest_requests_total and
// hookgate_http_refused_total: wherever the gateway chooses to count a
// refused ingest request, it shows here.
func refusalTotal(text string) int {
	total := 0
	for _, m := range regexp.MustCompile(`(?m)^hookgate_(?:ingest_requests|http_refused)_total\{[^}]*\} (\d+)$`).FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		total += n
	}
	return total
}

// TestMetricsCountRequestsRefusedByTheHTTPParser: a provider's webhook
// that the HTTP server refuses before any handler runs was counted nowhere
// in /metrics, unlike the 413 and 415 refusals and the framing 400s that
// reach checkFraming. Each request below is a POST to an existing source,
// answered 4xx; each is counted under hookgate_http_refused_total:
//   - 431 (headers): a header block over the 16 KiB read buffer;
//   - 408 (timeout): a body that does not arrive within the read timeout;
//   - 400 (framing): a Content-Length that is not a number, and a
//     Transfer-Encoding whose body is not chunked.
func TestMetricsCountRequestsRefusedByTheHTTPParser(t *testing.T) {
	const timeout = 300 * time.Millisecond
	g := startCustom(t, withTestConfig(""), func(g *Gateway) { g.public.Server().ReadTimeout = timeout })
	before := refusalTotal(scrapeMetrics(t, g))

	refused := 0
	for _, c := range []struct {
		name, raw string
		want      int
	}{
		{"headers over the read buffer", rawPost("X-Pad: "+strings.Repeat("a", 20<<10)+"\r\nContent-Length: 2\r\n", "{}"), 431},
		{"non-numeric Content-Length", rawPost("Content-Length: abc\r\n", "{}"), 400},
		{"a transfer coding other than chunked", rawPost("Transfer-Encoding: gzip\r\n", "{}"), 400},
	} {
		a := rawExchange(t, g.PublicAddr(), c.raw)
		if a.status != c.want {
			t.Fatalf("%s: %d %s, want %d", c.name, a.status, a.body, c.want)
		}
		refused++
	}

	// A body that stops arriving: the read timeout answers 408.
	conn, err := net.Dial("tcp", g.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(conn, rawPost(fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", 100), `{"id":"slow"`))
	a := readAnswer(t, conn)
	conn.Close()
	if a.status != 408 {
		t.Fatalf("stalled body: %d %s, want 408", a.status, a.body)
	}
	refused++

	text := scrapeMetrics(t, g)
	if got := refusalTotal(text) - before; got != refused {
		var lines []string
		for _, l := range regexp.MustCompile(`(?m)^hookgate_(?:ingest_requests|http_refused)_total.*$`).FindAllString(text, -1) {
			lines = append(lines, l)
		}
		t.Fatalf("%d ingest requests to source %q were refused (431, 400, 400, 408); hookgate_ingest_requests_total and hookgate_http_refused_total moved by %d:\n%s",
			refused, "open", got, strings.Join(lines, "\n"))
	}
}

// holdAfterComplete is the real store, whose Complete of one endpoint's
// delivery returns only when released, after it has been written: the
// window between the outcome's write and the dispatcher's metrics call.
type holdAfterComplete struct {
	storage.Store
	endpoint string
	once     sync.Once
	written  chan struct{}
	release  chan struct{}
}

func (s *holdAfterComplete) Complete(ctx context.Context, out *storage.Outcome) error {
	err := s.Store.Complete(ctx, out)
	d, gerr := s.Store.GetDelivery(ctx, out.Delivery)
	if err == nil && gerr == nil && d.Endpoint == s.endpoint {
		s.once.Do(func() {
			close(s.written)
			<-s.release
		})
	}
	return err
}

// A deleted endpoint's attempt and delivery series stayed on /metrics for
// ever when its last attempt's outcome was written just before the delete
// and reported to the metrics just after it. The delete drops the series
// (forgetEndpoint) right after the registry reload, without waiting for
// attempts in flight; the attempt, whose outcome the store kept (the
// delivery had succeeded, so the backlog cancel does not touch it),
// counted it afterwards and brought the series back.
// TestMetricsStayForgottenAfterAnAttemptInFlightAtDelete covers the
// attempt whose write comes after the cancel (lease lost, not counted);
// this is the attempt whose write came first. It happened in 1 of 300
// endpoint create/deliver/delete rounds without any hook.
func TestMetricsStayForgottenWhenTheLastOutcomeIsCountedAfterTheDelete(t *testing.T) {
	rcv := newReceiver(t)
	var hold *holdAfterComplete
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store {
		hold = &holdAfterComplete{Store: s, endpoint: "gone", written: make(chan struct{}), release: make(chan struct{})}
		return hold
	}})
	t.Cleanup(func() {
		select {
		case <-hold.release:
		default:
			close(hold.release)
		}
	})
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "gone", "url": rcv.url("gone")}))
	if st, _, b := g.post("open", []byte(`{"id":"d1","type":"a"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	select {
	case <-hold.written:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery's outcome was never written")
	}
	if st, _, b := g.api("DELETE", "/endpoints/gone", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	close(hold.release) // the attempt goes on to report its outcome
	testsupport.WaitFor(t, 10*time.Second, "the attempt to end", func() bool {
		return strings.Contains(scrapeMetrics(t, g), `hookgate_delivery_in_flight{endpoint="gone"} 0`)
	})
	text := scrapeMetrics(t, g)
	for _, s := range []string{`hookgate_deliveries_total{endpoint="gone"`, `hookgate_delivery_attempts_total{endpoint="gone"`, `hookgate_delivery_attempt_seconds_count{endpoint="gone"`} {
		if i := strings.Index(text, s); i >= 0 {
			line := text[i:]
			line = line[:strings.IndexByte(line, '\n')]
			t.Errorf("after the endpoint's delete /metrics has %s (for good; an endpoint created later with this id, maybe another tenant's, continues it)", line)
		}
	}
}

// The ids of deleted endpoints are remembered only as long as an attempt
// of theirs may still report (storage.MaxLease): the set grew by one id
// per deleted endpoint for the life of the process.
func TestMetricsForgetDeletedIDsOnceNoAttemptCanReport(t *testing.T) {
	m := newMetrics(nil)
	m.gone.Store("long-gone", time.Now().Add(-storage.MaxLease-time.Minute))
	m.gone.Store("just-gone", time.Now().Add(-time.Minute))
	m.ForgetEndpoint("now-gone")
	for id, want := range map[string]bool{"long-gone": false, "just-gone": true, "now-gone": true} {
		if _, got := m.gone.Load(id); got != want {
			t.Errorf("%s remembered: %v, want %v", id, got, want)
		}
	}
}

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

// heldIngestStore holds every Ingest until release is closed, and says
// when one has arrived.
type heldIngestStore struct {
	storage.Store
	arrived chan struct{}
	once    sync.Once
	release chan struct{}
}

func (s *heldIngestStore) Ingest(ctx context.Context, req *storage.IngestRequest) (storage.IngestResult, error) {
	s.once.Do(func() { close(s.arrived) })
	<-s.release
	return s.Store.Ingest(ctx, req)
}

// An ingest in flight when its source is deleted is counted after
// forgetSource ran: the deleted source's series comes back for good, and
// a source created later with the same id (maybe another tenant's)
// continues its count.
func TestSourceSeriesStayForgottenAfterIngestInFlight(t *testing.T) {
	t.Parallel()
	hs := &heldIngestStore{arrived: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(hs.release) }) }
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { hs.Store = s; return hs }})
	t.Cleanup(unblock)

	done := make(chan int, 1)
	go func() {
		st, _, _ := g.post("open", []byte(`{"id":"inflight","type":"a"}`), nil)
		done <- st
	}()
	select {
	case <-hs.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the ingest did not reach the store")
	}
	// The delete runs on its own: it waits for the ingest in flight (as an
	// endpoint's delete does, registry.exclusive).
	deleted := make(chan int, 1)
	go func() {
		st, _, _ := g.api("DELETE", "/sources/open", acmeToken, nil)
		deleted <- st
	}()
	var delSt int
	select {
	case delSt = <-deleted: // it did not wait: the series comes back below
		unblock()
	case <-time.After(time.Second): // it waits for the ingest: let that end
		unblock()
		delSt = <-deleted
	}
	if delSt != 204 {
		t.Fatalf("delete: %d", delSt)
	}
	var st int
	select {
	case st = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the ingest in flight did not end")
	}
	t.Logf("the ingest in flight at the delete answered %d", st)
	if text := scrapeMetrics(t, g); strings.Contains(text, `source="open"`) {
		i := strings.Index(text, `hookgate_ingest_requests_total{`)
		line := text[i:]
		line = line[:strings.IndexByte(line, '\n')]
		t.Fatalf("after DELETE /sources/open (204) /metrics still has the deleted source's series: %s", line)
	}
}

// The gauges to alert on when delivery stops: an endpoint disabled, and
// how long its earliest due delivery has waited past its due time.
func TestMetricsShowAStalledEndpoint(t *testing.T) {
	rcv := newReceiver(t)
	rcv.failAt("stuck", true)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: stuck, tenant: acme, url: %q, retry: {initial_interval: 200ms, max_interval: 200ms, max_attempts: 100}}
  - {id: fine, tenant: acme, url: %q, event_types: ["never"]}
`, rcv.url("stuck"), rcv.url("fine"))})
	g.post("open", []byte(`{"id":"s1","type":"a"}`), nil)
	testsupport.WaitFor(t, 10*time.Second, "the first failed attempt", func() bool { return rcv.countAt("stuck") >= 1 })
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/stuck", acmeToken, jsonMap{"disabled": true}))
	gauge := func(text, series string) float64 {
		m := regexp.MustCompile(regexp.QuoteMeta(series) + ` (\S+)`).FindStringSubmatch(text)
		if m == nil {
			return -1
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	var text string
	testsupport.WaitFor(t, 10*time.Second, "the stalled endpoint's gauges", func() bool {
		req, _ := http.NewRequest(http.MethodGet, "http://"+g.AdminAddr()+"/metrics", nil)
		_, _, b := do(t, req)
		text = string(b)
		return gauge(text, `hookgate_endpoint_disabled{endpoint="stuck"}`) == 1 &&
			gauge(text, `hookgate_outbox_oldest_due_seconds{endpoint="stuck"}`) > 0.2
	})
	if d, o := gauge(text, `hookgate_endpoint_disabled{endpoint="fine"}`), gauge(text, `hookgate_outbox_oldest_due_seconds{endpoint="fine"}`); d != 0 || o != 0 {
		t.Errorf("the endpoint with nothing due: disabled %v, oldest due %v s; want 0 and 0", d, o)
	}
}
