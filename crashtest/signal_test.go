package crashtest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestSecondSignalStopsAtOnce: SIGTERM starts a graceful stop, which waits
// for a delivery in flight (here to a receiver that never answers, so up
// to the attempt's timeout); a second SIGTERM ends the process at once, by
// the signal, instead of being swallowed (as in an earlier version, when only
// SIGKILL could end a stop that hung).
func TestSecondSignalStopsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	p, _ := deliveryInFlight(t)
	signalStop(t, p, syscall.SIGTERM)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("second SIGTERM: %v (the process ended before it: the stop did not wait for the delivery)", err)
	}
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		t.Fatalf("still running 5s after the second SIGTERM\n%s", tail(p.log, 20))
	}
	ws, ok := p.state.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("ended with %s, want killed by the second SIGTERM\n%s", p.state, tail(p.log, 20))
	}
}

// TestSIGHUPStopsGracefully: a hangup (the terminal or SSH session that
// started the gateway went away) stops it like SIGTERM, exit 0 with the
// store closed, instead of Go's default for SIGHUP: ending the process at
// once, cutting every request in flight.
func TestSIGHUPStopsGracefully(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	skipIfHangupIgnored(t)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer rcv.Close()
	sup := newSupervisor(t, buildBinary(t), rcv.URL)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	if err := sup.stopWith(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sup.current().output(), "stopping gracefully") {
		t.Fatalf("no graceful stop in the log\n%s", tail(sup.current().log, 20))
	}
}

// deliveryInFlight starts the binary on a receiver that holds every
// delivery until release is called (at the end of the test at the
// latest), publishes one event and returns once its delivery is in
// flight.
func deliveryInFlight(t *testing.T) (p *process, release func()) {
	t.Helper()
	hit := make(chan struct{}, 1)
	done := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(done) }) }
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case hit <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(rcv.Close)
	t.Cleanup(release) // before rcv.Close: cleanups run last first
	sup := newSupervisor(t, buildBinary(t), rcv.URL)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, sup.adminURL+"/api/v1/events",
		strings.NewReader(`{"source":"`+sourceID+`","type":"t","payload":{"n":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := sup.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("publish: %d", resp.StatusCode)
	}
	select {
	case <-hit:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery never reached the receiver")
	}
	return sup.current(), release
}

// signalStop sends sig and waits until the log says a graceful stop began.
func signalStop(t *testing.T, p *process, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if strings.Contains(p.output(), "stopping gracefully; a second signal stops at once") {
			return
		}
		if time.Now().After(deadline) || !p.alive() {
			t.Fatalf("the first %v was not taken up as a graceful stop\n%s", sig, tail(p.log, 20))
		}
		time.Sleep(pollEvery)
	}
}
