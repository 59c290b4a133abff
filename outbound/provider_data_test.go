package outbound

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"hookgate/storage"
)

// An event type is provider data (json:/type, or the "type" of POST
// /events): a JSON string may decode to one holding a newline or another
// control byte. The delivery must still reach the endpoint (SPEC §4: every
// accepted event becomes a delivery). Copied raw into hookgate-event-type
// (as until 2026-11-29), net/http refused the request before sending it,
// and every attempt failed until the delivery was dead-lettered.
func TestEventTypeWithControlCharacterIsDelivered(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, nil)
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) { ep.Retry.MaxAttempts = 3 })
	ds := accept(t, db, event{typ: "invoice.paid\n", body: []byte(`{"id":"evt_1","type":"invoice.paid\n"}`)}, ep)
	startDispatcher(t, db, Config{CircuitFailures: 100}, ep).Notify()
	waitFor(t, wait, "the delivery to end", func() bool { return delivery(t, db, ds[0].ID).State.Terminal() })

	if s := delivery(t, db, ds[0].ID).State; s != storage.StateSucceeded || rc.count() == 0 {
		t.Fatalf("delivery %s after %d requests reached the endpoint; attempts %+v", s, rc.count(), attempts(t, db, ds[0].ID))
	}
	rc.mu.Lock()
	got := rc.reqs[0]
	rc.mu.Unlock()
	if typ := got.header.Get(HeaderEventType); typ != "invoice.paid%0A" {
		t.Errorf("%s: %q, want the control byte percent-encoded", HeaderEventType, typ)
	}
	if want := `{"id":"evt_1","type":"invoice.paid\n"}`; string(got.body) != want {
		t.Errorf("body %q, want %q unchanged", got.body, want)
	}
}

func TestHeaderValue(t *testing.T) {
	for in, want := range map[string]string{
		"invoice.paid":         "invoice.paid",
		"50%":                  "50%", // nothing to encode: sent as it is
		"a\tb":                 "a\tb",
		"ünïcode":              "ünïcode",
		"a\r\nX-Injected: 1":   "a%0D%0AX-Injected: 1",
		"50%\n":                "50%25%0A",
		"del\x7f":              "del%7F",
		"application/json\x00": "application/json%00",
	} {
		if got := headerValue(in); got != want {
			t.Errorf("headerValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// Such events, when they could not be sent, also counted as endpoint
// failures: a few of them opened the circuit and paused deliveries of
// ordinary events to an endpoint that answers 200 to everything.
func TestEventTypeWithControlCharacterDoesNotPauseAHealthyEndpoint(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, nil)
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) {
		ep.MaxInFlight = 1
		ep.Retry.MaxAttempts = 1
	})
	for range 3 {
		accept(t, db, event{typ: "a\x01b"}, ep)
	}
	good := accept(t, db, event{}, ep)[0]
	d := startDispatcher(t, db, Config{CircuitFailures: 3, CircuitCooldown: time.Minute}, ep)
	d.Notify()
	waitFor(t, wait, "the ordinary delivery to be settled or the circuit to open", func() bool {
		return delivery(t, db, good.ID).State.Terminal() || circuitOf(d, ep.ID) == circuitOpen
	})
	if s := delivery(t, db, good.ID).State; s != storage.StateSucceeded {
		t.Fatalf("ordinary delivery %s, circuit %s, endpoint got %d requests: the endpoint was paused by deliveries the gateway itself could not send",
			s, circuitOf(d, ep.ID), rc.count())
	}
}

// SPEC §5: an attempt records "response (first 1 KiB)". A UTF-8 response
// whose 1024th byte falls inside a character was stored with a U+FFFD that
// the endpoint never sent, and an excerpt longer than 1 KiB.
func TestResponseExcerptIsAPrefixOfTheResponse(t *testing.T) {
	db, _ := openDB(t)
	body := strings.Repeat("a", responseExcerpt-1) + "é" + strings.Repeat("b", 100)
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(body))
	})
	ep := testEndpoint(t, db, "ep", rc.URL)
	ds := accept(t, db, event{}, ep)
	startDispatcher(t, db, Config{}, ep).Notify()
	waitFor(t, wait, "delivery", inState(t, db, ds[0].ID, storage.StateSucceeded))

	as := attempts(t, db, ds[0].ID)
	got := as[0].Response
	if len(got) > responseExcerpt || !strings.HasPrefix(body, got) || strings.ContainsRune(got, utf8.RuneError) {
		t.Fatalf("excerpt of %d bytes ending in %q; want a prefix of the response of at most %d bytes without U+FFFD",
			len(got), got[max(0, len(got)-8):], responseExcerpt)
	}
}

// Endpoint ids are global: after a tenant deletes an endpoint, another may
// create one with the same id. A delivery written for the old endpoint
// (a replay or retry that raced the delete) then sits in the new
// endpoint's outbox. It must be cancelled unsent, never delivered to the
// other tenant, and not count against the new endpoint's circuit.
func TestDeliveryForAnotherTenantsEndpointIsCancelledUnsent(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, nil)
	ep := testEndpoint(t, db, "shared", rc.URL, func(ep *storage.Endpoint) { ep.Tenant = "globex" })
	foreign := accept(t, db, event{}, ep)[0] // written for tenant acme
	d := startDispatcher(t, db, Config{CircuitFailures: 1}, ep)
	d.Notify()
	waitFor(t, wait, "the foreign delivery to be cancelled", inState(t, db, foreign.ID, storage.StateCancelled))
	if n := rc.count(); n != 0 {
		t.Fatalf("globex's endpoint received %d requests for acme's event", n)
	}
	if c := circuitOf(d, ep.ID); c != circuitClosed {
		t.Fatalf("circuit %s after a cancelled foreign delivery", c)
	}
	if as := attempts(t, db, foreign.ID); len(as) != 1 || !strings.Contains(as[0].Error, "another tenant") {
		t.Fatalf("attempts %+v, want one saying why it was not sent", as)
	}
}
