package gateway

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// The grace period bounds the whole stop (README: "finish in-flight
// ingests and delivery attempts (8 s grace ..."; SPEC 1: "bounded by a
// grace period"). Shutdown spent it
// twice, one after the other: first on the listeners (a client stalled
// halfway through a request holds them for all of it), then again on the
// delivery attempts in flight. With the default of then, 10 s, that was 20 s: past
// docker stop's default 10 s (and a -t sized after the README), so the
// process is SIGKILLed instead of exiting 0.
func TestShutdownIsBoundedByOneGracePeriod(t *testing.T) {
	slow := newHeldReceiver(t) // slower than the grace period

	const grace = 1 * time.Second
	g := startGateway(t, gwOptions{grace: grace,
		extra: fmt.Sprintf("endpoints:\n  - {id: slow, tenant: acme, url: %q, timeout: 10s}\n", slow.URL)})
	if st, _, b := g.post("open", []byte(`{"id":"g1","type":"a"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	slow.waitHit(t)
	// A client stalled halfway through a request.
	c, err := net.Dial("tcp", g.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("POST /ingest/open HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"id\":")); err != nil {
		t.Fatal(err)
	}
	// Wait until the server holds the connection (a request in flight).
	waitFor(t, 5*time.Second, "the stalled connection", func() bool {
		g.publicLn.mu.Lock()
		defer g.publicLn.mu.Unlock()
		return len(g.publicLn.conns) > 0
	})

	t0 := time.Now()
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	t.Logf("Shutdown took %v with a grace period of %v", took.Round(time.Millisecond), grace)
	if took > grace+grace/2 {
		t.Fatalf("Shutdown took %v: more than its grace period of %v (each stage waits the whole grace in turn)", took.Round(time.Millisecond), grace)
	}
}

// dockerStopTimeout is how long `docker stop` waits after SIGTERM before
// SIGKILL (Kubernetes waits 30 s).
const dockerStopTimeout = 10 * time.Second

// A shutdown that needs all its default grace period (a receiver that
// hangs, with the default delivery timeout of 15 s longer than the grace)
// still flushes and closes the store before docker stop's SIGKILL. With a
// default grace of 10 s, the store was closed after the SIGKILL: exit 137
// instead of SPEC section 1's "flush, exit 0".
func TestDefaultShutdownFitsDockerStop(t *testing.T) {
	held := newHeldReceiver(t)
	g := startGateway(t, gwOptions{grace: DefaultGrace,
		extra: fmt.Sprintf("endpoints:\n  - {id: hangs, tenant: acme, url: %q, timeout: 15s}\n", held.URL)})
	if code, _, b := g.post("open", []byte(`{"id":"d1","type":"a"}`), nil); code != 202 {
		t.Fatalf("ingest: %d %s", code, b)
	}
	held.waitHit(t)
	t0 := time.Now()
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took >= dockerStopTimeout-time.Second {
		t.Fatalf("Shutdown took %v: within a second of docker stop's SIGKILL at %v", took.Round(time.Millisecond), dockerStopTimeout)
	}
}
