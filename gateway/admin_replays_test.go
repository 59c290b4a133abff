package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/internal/testsupport"
)

// waitReplay polls a replay job until it is no longer running.
func waitReplay(t *testing.T, g *gw, token, id string) admin.Replay {
	t.Helper()
	var job admin.Replay
	testsupport.WaitFor(t, 20*time.Second, "replay "+id+" to finish", func() bool {
		job = must[admin.Replay](t, 200)(g.api("GET", "/replays/"+id, token, nil))
		return job.State != "running"
	})
	return job
}

func TestAdminBulkReplay(t *testing.T) {
	rcv := newReceiver(t)
	rcv.failAt("flaky", true)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: all, tenant: acme, url: %q}
  - {id: flaky, tenant: acme, url: %q, event_types: ["a"], retry: {max_attempts: 1}}
  - {id: globex, tenant: globex, url: %q}
`, rcv.url("all"), rcv.url("flaky"), rcv.url("globex"))})
	ids := ingestN(t, g, "b", 4) // types a, b, a, b
	if st, _, b := g.post("other", []byte(`{"id":"g1"}`), nil); st != 202 {
		t.Fatalf("ingest to other: %d %s", st, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "the first deliveries", func() bool {
		return rcv.countAt("all") == 4 && rcv.countAt("globex") == 1 &&
			len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=flaky&status=failed", acmeToken, nil)).Data) == 2
	})

	// Everything of source open, to the endpoints that match now.
	st, _, b := g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"})
	raw := must[jsonMap](t, 202)(st, nil, b)
	id, _ := raw["id"].(string)
	if !strings.HasPrefix(id, "rpl_") || raw["state"] != "running" {
		t.Fatalf("created %s", b)
	}
	job := waitReplay(t, g, acmeToken, id)
	if job.State != "completed" || job.Matched != 4 || job.Enqueued != 6 || job.Tenant != "acme" || job.Source != "open" {
		t.Fatalf("replay of open: %+v", job)
	}
	testsupport.WaitFor(t, 10*time.Second, "the replayed deliveries", func() bool {
		return rcv.countAt("all") == 8 && rcv.count() == 4+1+2+6 &&
			len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=flaky&status=failed", acmeToken, nil)).Data) == 4
	})
	if rcv.countAt("globex") != 1 {
		t.Fatal("a replay of acme's source reached globex")
	}

	// Only what failed at one endpoint, once it works again.
	rcv.failAt("flaky", false)
	job = must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"endpoint": "flaky", "status": "failed"}))
	job = waitReplay(t, g, acmeToken, job.ID)
	// The first replay's deliveries to flaky failed too: each event's latest
	// delivery there is failed, so both events match once.
	if job.State != "completed" || job.Matched != 2 || job.Enqueued != 2 {
		t.Fatalf("replay of failed: %+v", job)
	}
	testsupport.WaitFor(t, 10*time.Second, "flaky to succeed", func() bool {
		return len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=flaky&status=succeeded", acmeToken, nil)).Data) == 2
	})
	// Now nothing there is failed any more: the same replay matches nothing.
	job = must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"endpoint": "flaky", "status": "failed"}))
	if job = waitReplay(t, g, acmeToken, job.ID); job.Matched != 0 || job.Enqueued != 0 {
		t.Fatalf("second replay of failed: %+v", job)
	}

	// A time window: only the events received in it.
	first := must[admin.Event](t, 200)(g.api("GET", "/events/"+ids[0], acmeToken, nil))
	before := rcv.countAt("all")
	job = must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"endpoint": "all", "until": first.ReceivedAt}))
	job = waitReplay(t, g, acmeToken, job.ID)
	if job.Matched < 1 || job.Matched != job.Enqueued || job.Until != first.ReceivedAt {
		t.Fatalf("windowed replay %+v", job)
	}
	testsupport.WaitFor(t, 10*time.Second, "the windowed replay", func() bool { return rcv.countAt("all") == before+job.Enqueued })

	// An operator's replay of every tenant.
	job = must[admin.Replay](t, 202)(g.api("POST", "/replays", opToken, jsonMap{"since": "2000-01-01T00:00:00Z"}))
	if job = waitReplay(t, g, opToken, job.ID); job.Matched != 5 || job.Tenant != "" {
		t.Fatalf("operator replay %+v", job)
	}

	// Refusals.
	for _, c := range []struct {
		body          any
		status        int
		field, reason string
	}{
		{jsonMap{}, 422, "", "no filter"},
		{jsonMap{"status": "lost"}, 422, "status", "bad status"},
		{jsonMap{"since": "yesterday"}, 422, "since", "bad since"},
		{jsonMap{"until": "2026-01-01"}, 422, "until", "bad until"},
		// Alone, the zero time (as "no bound") replayed every event.
		{jsonMap{"until": "0001-01-01T00:00:00Z"}, 422, "until", "zero until"},
		{jsonMap{"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, 422, "since", "inverted window"},
		{jsonMap{"source": "nope"}, 422, "source", "unknown source"},
		{jsonMap{"endpoint": "nope"}, 422, "endpoint", "unknown endpoint"},
		{jsonMap{"source": "other", "endpoint": "all"}, 422, "endpoint", "tenants differ"},
		{jsonMap{"source": "open", "limit": 3}, 400, "limit", "unknown field"},
		{"", 400, "", "no body"},
	} {
		tok := acmeToken
		if c.reason == "tenants differ" {
			tok = opToken
		}
		wantProblem(t, c.reason, c.status, c.field)(g.api("POST", "/replays", tok, c.body))
	}
	wantProblem(t, "unknown replay", 404, "")(g.api("GET", "/replays/rpl_nope", acmeToken, nil))
}

// TestAdminRetentionPurgesOldEvents: the retention sweep deletes events
// (with their deliveries) older than retention; the API then answers 410
// for the event, also to a replay, and 404 for its deliveries.
func TestAdminRetentionPurgesOldEvents(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{
		extra: fmt.Sprintf("endpoints:\n  - {id: a, tenant: acme, url: %q}\n", rcv.url("a")),
		// Shorter than the retry window, which a config may not be (the
		// sweep would delete deliveries still retrying); this one succeeds.
		config: func(c *config.Config) { c.Retention = config.Duration(time.Second) },
	})
	st, _, b := g.post("open", []byte(`{"id":"old"}`), nil)
	id := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	testsupport.WaitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() == 1 })
	dl := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+id, acmeToken, nil)).Data[0]

	// Retention deletes it (the sweep, run here instead of waiting a minute).
	testsupport.WaitFor(t, 10*time.Second, "the event to pass retention", func() bool {
		g.bg.purge(t.Context())
		st, _, _ := g.api("GET", "/events/"+id, acmeToken, nil)
		return st == 410
	})
	p := wantProblem(t, "get expired", 410, "")(g.api("GET", "/events/"+id, acmeToken, nil))
	if !strings.Contains(p.Detail, "retention") {
		t.Fatalf("problem %+v", p)
	}
	wantProblem(t, "replay expired", 410, "")(g.api("POST", "/events/"+id+"/replay", acmeToken, nil))
	wantProblem(t, "its delivery", 404, "")(g.api("GET", "/deliveries/"+dl.ID, acmeToken, nil))
	wantProblem(t, "retry its delivery", 404, "")(g.api("POST", "/deliveries/"+dl.ID+"/retry", acmeToken, nil))
	if l := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events", acmeToken, nil)); len(l.Data) != 0 {
		t.Fatalf("events after the sweep: %+v", l)
	}
	// A bulk replay over the purged window finds nothing to do.
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	if job = waitReplay(t, g, acmeToken, job.ID); job.State != "completed" || job.Matched != 0 {
		t.Fatalf("replay after the sweep: %+v", job)
	}
	// A new event is kept by the same sweep.
	st, _, b = g.post("open", []byte(`{"id":"new"}`), nil)
	fresh := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	g.bg.purge(t.Context())
	must[admin.Event](t, 200)(g.api("GET", "/events/"+fresh, acmeToken, nil))
	// An id that never existed but is not past retention is plainly unknown.
	wantProblem(t, "unknown", 404, "")(g.api("GET", "/events/evt_"+strings.Repeat("z", 26), acmeToken, nil))
}
