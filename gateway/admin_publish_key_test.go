package gateway

import (
	"testing"
)

// A publish without event_id, whose payload the source's expression finds
// no id in, is named by its Idempotency-Key, as an ingest request is
// (SPEC section 2's fallback): two publishes of one payload under two keys
// are two events (they were one, by the payload's hash), one under the
// same key is one. Without a key the payload's hash names it, as before.
func TestPublishWithoutEventIDIsNamedByItsKey(t *testing.T) {
	g := startGateway(t, gwOptions{})
	pub := jsonMap{"source": "open", "type": "ping", "payload": jsonMap{"hello": "world"}}
	a := must[jsonMap](t, 202)(g.api("POST", "/events", acmeToken, pub, "Idempotency-Key", "ping-1"))
	b := must[jsonMap](t, 202)(g.api("POST", "/events", acmeToken, pub, "Idempotency-Key", "ping-2"))
	if a["event_id"] != "ping-1" || b["event_id"] != "ping-2" || a["id"] == b["id"] {
		t.Fatalf("two keys: %v and %v, want two events named by their keys", a, b)
	}
	if again := must[jsonMap](t, 202)(g.api("POST", "/events", acmeToken, pub, "Idempotency-Key", "ping-1")); again["id"] != a["id"] {
		t.Fatalf("the same key again: %v, want %v", again, a)
	}
	c := must[jsonMap](t, 202)(g.api("POST", "/events", acmeToken, pub))
	d := must[jsonMap](t, 202)(g.api("POST", "/events", acmeToken, pub))
	if c["id"] != d["id"] || len(c["event_id"].(string)) != 64 {
		t.Fatalf("without a key: %v and %v, want one event named by the payload's hash", c, d)
	}
	// Three events in all.
	if evs := must[apiList[eventView]](t, 200)(g.api("GET", "/events", acmeToken, nil)).Data; len(evs) != 3 {
		t.Fatalf("%d events, want 3", len(evs))
	}
}
