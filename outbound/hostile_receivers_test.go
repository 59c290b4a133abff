package outbound

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
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
	waitFor(t, 3*time.Second, "the first request", func() bool { return rc.count() >= 1 })
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
	waitFor(t, 3*time.Second, "the first request", func() bool { return rc.count() >= 1 })
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
	waitFor(t, wait, "the endless 200 to count as delivered", inState(t, db, da.ID, storage.StateSucceeded))
	waitFor(t, wait, "the endless 500 to fail after max_attempts", inState(t, db, db2.ID, storage.StateFailed))
	waitFor(t, wait, "the dribbled status line to fail after max_attempts", inState(t, db, dc.ID, storage.StateFailed))
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
