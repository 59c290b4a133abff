package gateway

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/internal/testsupport"
)

// The console's reads: the last hour by minute (GET /stats), an
// endpoint's recent attempts, backlog and pause (GET /endpoints/{id}/stats),
// the latest bulk replays (GET /replays) and events by the provider's
// event ID, each scoped to the token's tenant.
func TestAdminConsoleReads(t *testing.T) {
	rcv := newReceiver(t)
	rcv.failAt("down", true)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: up, tenant: acme, url: %q}
  - {id: down, tenant: acme, url: %q, event_types: ["a"], retry: {max_attempts: 2}}
  - {id: globex-ep, tenant: globex, url: %q}
`, rcv.url("up"), rcv.url("down"), rcv.url("globex"))})
	ingestN(t, g, "s", 4) // types a, b, a, b: up gets 4, down 2
	for i := range 3 {
		if st, _, b := g.post("other", fmt.Appendf(nil, `{"id":"g%d"}`, i), nil); st != 202 {
			t.Fatalf("ingest to other: %d %s", st, b)
		}
	}
	sum := func(v admin.Stats) (s admin.StatsBucket) {
		for _, b := range v.Buckets {
			s.Received += b.Received
			s.Delivered += b.Delivered
			s.Failed += b.Failed
			s.Attempts += b.Attempts
			s.AttemptsFailed += b.AttemptsFailed
		}
		return s
	}
	var all admin.StatsBucket
	testsupport.WaitFor(t, 10*time.Second, "the deliveries to succeed and fail", func() bool {
		all = sum(must[admin.Stats](t, 200)(g.api("GET", "/stats", opToken, nil)))
		return all.Delivered == 4+3 && all.Failed == 2
	})
	if all.Received != 7 || all.Attempts != 4+3+2*2 || all.AttemptsFailed != 4 {
		t.Fatalf("operator's last hour: %+v", all)
	}
	acme := must[admin.Stats](t, 200)(g.api("GET", "/stats", acmeToken, nil))
	if len(acme.Buckets) != 60 || acme.BucketSeconds != 60 {
		t.Fatalf("stats shape: %d buckets of %d s", len(acme.Buckets), acme.BucketSeconds)
	}
	first, _ := time.Parse(time.RFC3339, acme.Buckets[0].At)
	last, _ := time.Parse(time.RFC3339, acme.Buckets[59].At)
	if last.Sub(first) != 59*time.Minute || time.Since(last) > time.Minute+time.Second {
		t.Fatalf("buckets from %s to %s", acme.Buckets[0].At, acme.Buckets[59].At)
	}
	if s := sum(acme); s.Received != 4 || s.Delivered != 4 || s.Failed != 2 || s.Attempts != 4+2*2 {
		t.Fatalf("acme's last hour (globex's must not count): %+v", s)
	}

	up := must[admin.EndpointStats](t, 200)(g.api("GET", "/endpoints/up/stats", acmeToken, nil))
	if up.Attempts != 4 || up.Succeeded != 4 || up.SuccessRate == nil || *up.SuccessRate != 1 ||
		up.LatencyP50MS < 1 || up.LatencyP95MS < up.LatencyP50MS || up.Pending != 0 || up.Circuit != "closed" || up.WindowSeconds != 3600 {
		t.Fatalf("up's stats: %+v", up)
	}
	down := must[admin.EndpointStats](t, 200)(g.api("GET", "/endpoints/down/stats", acmeToken, nil))
	if down.Attempts != 4 || down.AttemptsFailed != 4 || down.Failed != 2 || down.SuccessRate == nil || *down.SuccessRate != 0 {
		t.Fatalf("down's stats: %+v", down)
	}
	wantProblem(t, "another tenant's endpoint", 404, "")(g.api("GET", "/endpoints/globex-ep/stats", acmeToken, nil))
	wantProblem(t, "a query the route does not take", 400, "window")(g.api("GET", "/stats?window=2h", acmeToken, nil))

	// The provider's event ID, across sources, in the token's tenant.
	evs := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?event_id=s-2", acmeToken, nil)).Data
	if len(evs) != 1 || evs[0].EventID != "s-2" {
		t.Fatalf("events with event_id s-2: %+v", evs)
	}
	if evs := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?event_id=g1", acmeToken, nil)).Data; len(evs) != 0 {
		t.Fatalf("acme sees globex's event g1: %+v", evs)
	}

	// Bulk replays: newest first, each token its own.
	var started []string
	for _, src := range []string{"open", "sw"} {
		started = append(started, must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": src})).ID)
	}
	globexJob := must[admin.Replay](t, 202)(g.api("POST", "/replays", opToken, jsonMap{"source": "other"}))
	var ids []string
	for _, j := range must[admin.List[admin.Replay]](t, 200)(g.api("GET", "/replays", acmeToken, nil)).Data {
		ids = append(ids, j.ID)
	}
	slices.Reverse(started)
	if !slices.Equal(ids, started) {
		t.Fatalf("acme's replays %v, want %v (newest first, not globex's %s)", ids, started, globexJob.ID)
	}
	if n := len(must[admin.List[admin.Replay]](t, 200)(g.api("GET", "/replays", opToken, nil)).Data); n != 3 {
		t.Fatalf("the operator lists %d replays, want 3", n)
	}
}
