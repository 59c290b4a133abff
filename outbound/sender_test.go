package outbound

import (
	"context"
	"errors"
	"hookgate/internal/testsupport"
	"hookgate/storage"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// hijackAnswer starts a receiver that reads the request and writes raw
// bytes back on the connection, then keeps the connection open (without
// a word) until the test ends.
// The returned release lets go of held connections; call it (or register
// it with t.Cleanup after the dispatcher's) so that a stuck Stop ends.
func hijackAnswer(t *testing.T, raw string) (*receiver, func()) {
	t.Helper()
	done := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(done) }) }
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			panic(err)
		}
		defer conn.Close()
		_, _ = buf.WriteString(raw)
		_ = buf.Flush()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	})
	t.Cleanup(release)
	return rc, release
}

// A receiver answering "101 Switching Protocols" with an Upgrade header
// (which nothing asked for) and then holding the connection open must be
// one failed attempt bounded by the endpoint's timeout, like any other
// answer. net/http hands such a connection to the caller as the body, out
// of reach of the request's context: the attempt's read of the response
// excerpt blocked for as long as the receiver liked, the delivery stayed
// "delivering", its max_in_flight slot was never given back (the endpoint
// claimed nothing more), and Stop never returned.
func TestSwitchingProtocolsAnswerIsBoundedByTheTimeout(t *testing.T) {
	db, _ := openDB(t)
	rc, release := hijackAnswer(t, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: evil\r\n\r\n")
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) {
		ep.Timeout = 200 * time.Millisecond
		ep.MaxInFlight = 1
	})
	ds := accept(t, db, event{}, ep)
	startDispatcher(t, db, Config{}, ep)
	t.Cleanup(release) // before Stop, which waits for the attempt
	testsupport.WaitFor(t, 3*time.Second, "the first request", func() bool { return rc.count() >= 1 })
	// The timeout is 200ms and the retry policy milliseconds: within a few
	// seconds the attempt must be recorded and the delivery retried.
	deadline := time.Now().Add(3 * time.Second)
	for {
		if as := attempts(t, db, ds[0].ID); len(as) > 0 {
			if as[0].StatusCode >= 200 && as[0].StatusCode < 300 {
				t.Fatalf("101 recorded as success: %+v", as[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no attempt recorded 3s after a 101 answer with a 200ms timeout: delivery %s, receiver saw %d request(s)",
				delivery(t, db, ds[0].ID).State, rc.count())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The same receiver must not hold up a shutdown past its grace period
// (SPEC section 1: in-flight deliveries are bounded by the grace period, then the
// process exits 0): Stop cancels the attempts still running once the
// grace is over, and the attempt reading the 101's connection must see
// that cancel too, or Stop (and with it Gateway.Shutdown) waits for as
// long as the receiver keeps the connection open.
func TestStopIsBoundedWhenAReceiverSwitchesProtocols(t *testing.T) {
	db, _ := openDB(t)
	rc, release := hijackAnswer(t, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: evil\r\n\r\n")
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) { ep.Timeout = 200 * time.Millisecond })
	accept(t, db, event{}, ep)
	d := startDispatcher(t, db, Config{}, ep)
	t.Cleanup(release)
	testsupport.WaitFor(t, 3*time.Second, "the first request", func() bool { return rc.count() >= 1 })
	stopped := make(chan struct{})
	go func() {
		d.Stop(100 * time.Millisecond)
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(3 * time.Second):
		release() // let the attempt end so the test's cleanup can stop
		<-stopped
		t.Fatal("Stop(100ms) did not return within 3s: an attempt that got a 101 ignores the shutdown")
	}
}

// dribble starts a receiver that hijacks each request's connection and
// writes head at once, then one byte of tail every 20ms (tail repeats for
// ever), until the test ends or the client goes away.
func dribble(t *testing.T, head, tail string) *receiver {
	t.Helper()
	done := make(chan struct{})
	var once sync.Once
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			panic(err)
		}
		defer conn.Close()
		_, _ = buf.WriteString(head)
		if buf.Flush() != nil {
			return
		}
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte{tail[i%len(tail)]}); err != nil {
				return
			}
		}
	})
	t.Cleanup(func() { once.Do(func() { close(done) }) })
	return rc
}

// Receivers that answer slowly, byte by byte, or never finish their body:
// every attempt is still bounded by the endpoint's timeout and ends in a
// recorded outcome. A 2xx whose body never ends is delivered (the endpoint
// answered); a 5xx with an endless body, or a status line dribbled slower
// than the timeout, is a failed attempt, retried.
func TestDribblingReceiversAreBoundedByTheTimeout(t *testing.T) {
	db, _ := openDB(t)
	okEndless := dribble(t, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nstart", "x")
	errEndless := dribble(t, "HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n", "1\r\nx\r\n")
	slowHead := dribble(t, "", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	mk := func(id, url string) storage.Endpoint {
		return testEndpoint(t, db, id, url, func(ep *storage.Endpoint) {
			ep.Timeout = 300 * time.Millisecond
			ep.MaxInFlight = 1
			ep.Retry.MaxAttempts = 2
		})
	}
	a, b, c := mk("ok-endless", okEndless.URL), mk("err-endless", errEndless.URL), mk("slow-head", slowHead.URL)
	da, db2, dc := accept(t, db, event{}, a)[0], accept(t, db, event{}, b)[0], accept(t, db, event{}, c)[0]
	startDispatcher(t, db, faultsConfig, a, b, c).Notify()
	testsupport.WaitFor(t, wait, "the endless 200 to count as delivered", inState(t, db, da.ID, storage.StateSucceeded))
	testsupport.WaitFor(t, wait, "the endless 500 to fail after max_attempts", inState(t, db, db2.ID, storage.StateFailed))
	testsupport.WaitFor(t, wait, "the dribbled status line to fail after max_attempts", inState(t, db, dc.ID, storage.StateFailed))
	for _, as := range [][]storage.Attempt{attempts(t, db, db2.ID), attempts(t, db, dc.ID)} {
		if len(as) != 2 {
			t.Fatalf("attempts %+v; want 2", as)
		}
		for _, at := range as {
			if at.Latency > 2*time.Second {
				t.Errorf("attempt took %s with a 300ms timeout", at.Latency)
			}
		}
	}
	if as := attempts(t, db, db2.ID); as[0].StatusCode != 500 || !strings.Contains(as[0].Error, "HTTP 500") {
		t.Errorf("endless 500 recorded as %+v", as[0])
	}
	if as := attempts(t, db, dc.ID); as[0].StatusCode != 0 || !strings.Contains(as[0].Error, "timeout") {
		t.Errorf("dribbled status line recorded as %+v", as[0])
	}
}

// An endpoint stored with a timeout over storage.MaxAttemptTimeout (an
// earlier build let the admin API store 2h) has its attempts cut at that
// bound: its lease (at most storage.MaxLease) ends a minute later, and an
// attempt that ran on past it would have been sent again beside itself.
func TestAttemptTimeoutIsCutToItsLeaseBound(t *testing.T) {
	var deadline time.Time
	s := &sender{timeout: time.Second, now: time.Now, client: &http.Client{
		Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
			deadline, _ = r.Context().Deadline()
			return nil, errors.New("not sent")
		}),
	}}
	ep := &storage.Endpoint{ID: "long", URL: "http://203.0.113.1/", Timeout: 2 * time.Hour}
	start := time.Now()
	s.send(context.Background(), ep, &storage.Job{}, nil)
	if got := deadline.Sub(start); got > storage.MaxAttemptTimeout+time.Second || got < storage.MaxAttemptTimeout-time.Second {
		t.Fatalf("the attempt's deadline is %v away, want %v", got, storage.MaxAttemptTimeout)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// An event type is provider data (json:/type, or the "type" of POST
// /events): a JSON string may decode to one holding a newline or another
// control byte. The delivery must still reach the endpoint (SPEC §4: every
// accepted event becomes a delivery). Copied raw into hookgate-event-type
// (as  in an earlier version), net/http refused the request before sending it,
// and every attempt failed until the delivery was dead-lettered.
func TestEventTypeWithControlCharacterIsDelivered(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, nil)
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) { ep.Retry.MaxAttempts = 3 })
	ds := accept(t, db, event{typ: "invoice.paid\n", body: []byte(`{"id":"evt_1","type":"invoice.paid\n"}`)}, ep)
	startDispatcher(t, db, Config{CircuitFailures: 100}, ep).Notify()
	testsupport.WaitFor(t, wait, "the delivery to end", func() bool { return delivery(t, db, ds[0].ID).State.Terminal() })

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
	testsupport.WaitFor(t, wait, "the ordinary delivery to be settled or the circuit to open", func() bool {
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
	testsupport.WaitFor(t, wait, "delivery", inState(t, db, ds[0].ID, storage.StateSucceeded))

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
	testsupport.WaitFor(t, wait, "the foreign delivery to be cancelled", inState(t, db, foreign.ID, storage.StateCancelled))
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
