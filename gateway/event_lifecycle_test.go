package gateway

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
	"hookgate/storage"
)

// answerEventID decodes the gateway event id of an ingest answer.
func answerEventID(t *testing.T, b []byte) string {
	t.Helper()
	var a struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &a); err != nil || a.ID == "" {
		t.Fatalf("answer %s: %v", b, err)
	}
	return a.ID
}

// deliverBarrier ingests a fresh event and waits for its delivery at rcv:
// whatever was enqueued before it to the same endpoint has had its chance.
func deliverBarrier(t *testing.T, g *gw, rcv *receiver, name string, want int) {
	t.Helper()
	if st, _, b := g.post("open", fmt.Appendf(nil, `{"id":%q,"type":"t"}`, name), nil); st != 202 {
		t.Fatalf("barrier: %d %s", st, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "the barrier's delivery", func() bool { return rcv.count() >= want })
}

// A provider's retry inside the dedupe window, after a restart, gets the
// first answer byte for byte with Idempotent-Replayed and makes no new
// delivery; another body under the same id is 422 idempotency-key-reused.
func TestProviderRetryInWindowAfterRestart(t *testing.T) {
	rcv := newReceiver(t)
	opts := gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: a, tenant: acme, url: %q}\n", rcv.url("a"))}
	g := startGateway(t, opts)
	body := []byte(`{"id":"in-window","type":"t"}`)
	st, _, first := g.post("open", body, nil)
	if st != 202 {
		t.Fatalf("first: %d %s", st, first)
	}
	testsupport.WaitFor(t, 10*time.Second, "the first delivery", func() bool { return rcv.count() == 1 })
	g = g.restart(opts)
	st, hdr, again := g.post("open", body, nil)
	if st != 202 || string(again) != string(first) || hdr.Get(inbound.HeaderReplayed) != "true" {
		t.Fatalf("retry after restart: %d %q %s, want 202 replayed %s", st, hdr.Get(inbound.HeaderReplayed), again, first)
	}
	wantProblem(t, "other body", 422, "-")(g.post("open", []byte(`{"id":"in-window","type":"t","x":1}`), nil))
	deliverBarrier(t, g, rcv, "barrier-a", 2)
	if n := rcv.count(); n != 2 {
		t.Fatalf("%d requests at the receiver, want 2 (the event once, the barrier)", n)
	}
	if l := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?source=open", acmeToken, nil)); len(l.Data) != 2 {
		t.Fatalf("%d events, want 2", len(l.Data))
	}
}

// dedupe.ttl longer than retention. The event is purged; the provider's
// retry, inside its dedupe window, gets the stored answer (naming an event
// that is gone) and nothing is delivered again.
func TestDedupeWindowOutlivesRetention(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{
		extra:  fmt.Sprintf("endpoints:\n  - {id: a, tenant: acme, url: %q}\n", rcv.url("a")),
		config: func(c *config.Config) { c.Retention = config.Duration(time.Second) },
	})
	body := []byte(`{"id":"outlives","type":"t"}`)
	st, _, first := g.post("open", body, nil)
	if st != 202 {
		t.Fatalf("first: %d %s", st, first)
	}
	id := answerEventID(t, first)
	testsupport.WaitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() == 1 })
	dl := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+id, acmeToken, nil)).Data
	testsupport.WaitFor(t, 10*time.Second, "succeeded", func() bool {
		return must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+dl[0].ID, acmeToken, nil)).State == "succeeded"
	})
	testsupport.WaitFor(t, 10*time.Second, "the event to be purged", func() bool {
		g.bg.purge(t.Context())
		st, _, _ := g.api("GET", "/events/"+id, acmeToken, nil)
		return st == 410
	})
	st, hdr, again := g.post("open", body, nil)
	if st != 202 || string(again) != string(first) || hdr.Get(inbound.HeaderReplayed) != "true" {
		t.Fatalf("retry after purge: %d %q %s", st, hdr.Get(inbound.HeaderReplayed), again)
	}
	deliverBarrier(t, g, rcv, "barrier-b", 2)
	if n := rcv.count(); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

// After dedupe.ttl the same provider id is a new event (new evt_ id);
// a retry inside the new window answers with the new event, and the
// deliveries of both carry the same Idempotency-Key / webhook-id.
func TestSameEventIDAfterDedupeTTLIsANewEventWithTheSameKey(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{ttl: "1s", extra: fmt.Sprintf("endpoints:\n  - {id: a, tenant: acme, url: %q}\n", rcv.url("a"))})
	body := []byte(`{"id":"again","type":"t"}`)
	_, _, first := g.post("open", body, nil)
	id1 := answerEventID(t, first)
	var second []byte
	testsupport.WaitFor(t, 10*time.Second, "the window to pass", func() bool {
		st, hdr, b := g.post("open", body, nil)
		second = b
		return st == 202 && hdr.Get(inbound.HeaderReplayed) == ""
	})
	id2 := answerEventID(t, second)
	if id1 == id2 {
		t.Fatalf("same event id %s after the window", id1)
	}
	st, hdr, third := g.post("open", body, nil)
	if st != 202 || hdr.Get(inbound.HeaderReplayed) != "true" || string(third) != string(second) {
		t.Fatalf("retry in the second window: %d %q %s, want %s", st, hdr.Get(inbound.HeaderReplayed), third, second)
	}
	testsupport.WaitFor(t, 10*time.Second, "two deliveries", func() bool { return rcv.count() >= 2 })
	want := storage.IdempotencyKey("acme", "open", "again")
	for _, q := range rcv.all() {
		if q.header.Get("Idempotency-Key") != want || q.header.Get("webhook-id") != want {
			t.Fatalf("keys %q %q, want %q", q.header.Get("Idempotency-Key"), q.header.Get("webhook-id"), want)
		}
	}
	for _, id := range []string{id1, id2} {
		ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+id, acmeToken, nil))
		if ev.IdempotencyKey != want || len(*ev.Deliveries) != 1 || (*ev.Deliveries)[0].IdempotencyKey != want {
			t.Fatalf("event %s: %+v", id, ev)
		}
	}
}
