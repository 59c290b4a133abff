package crashtest

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSIGHUPIgnoredByTheLauncherStaysIgnored: a gateway started with
// SIGHUP ignored (`nohup hookgate &`, a supervisor or init script that
// ignores hangups, as nohup(1) is for) must keep running when the session
// that started it goes away. Go keeps an inherited SIG_IGN for SIGHUP
// unless the program asks signal.Notify for it, which then installs a
// handler: since SIGHUP became a graceful stop, a nohup'ed
// gateway stops at logout.
func TestSIGHUPIgnoredByTheLauncherStaysIgnored(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer rcv.Close()
	bin := buildBinary(t)
	// What nohup(1) does: ignore SIGHUP, then exec the command.
	wrapper := filepath.Join(t.TempDir(), "nohup-hookgate")
	script := "#!/bin/sh\ntrap '' HUP\nexec " + bin + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sup := newSupervisor(t, wrapper, rcv.URL)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	p := sup.current()
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The hangup must change nothing: watch for a stop for a while.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if !p.alive() || strings.Contains(p.output(), "signal received") {
			t.Fatalf("a SIGHUP the launcher ignored stopped the gateway (alive=%v)\n%s", p.alive(), tail(p.log, 20))
		}
		time.Sleep(pollEvery)
	}
	if !sup.healthy() {
		t.Fatalf("not serving after an ignored SIGHUP\n%s", tail(p.log, 20))
	}
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestHangupStopsGracefullyThoughSIGHUPComesTwice: a terminal or SSH
// session that goes away sends SIGHUP twice, a fraction of a millisecond
// apart: the kernel to the foreground process group, and the shell, which
// resends it to its jobs as it exits (measured here with a pty: 0.3 ms).
// The gateway takes the first as a graceful stop and then restores the
// default action for every stop signal, so the second, when it comes after
// that, ends the process at once: with a delivery in flight, 2 hangups in 3
// killed it mid-stop (no "hookgate stopped"), which is what SIGHUP's
// graceful stop was for. Here the second SIGHUP is sent once
// the first was taken up; a repeated hangup must not count as the
// operator's "second signal" (Ctrl-C twice, SIGTERM twice).
func TestHangupStopsGracefullyThoughSIGHUPComesTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	skipIfHangupIgnored(t)
	p, free := deliveryInFlight(t)
	signalStop(t, p, syscall.SIGHUP)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatalf("second SIGHUP: %v", err)
	}
	free() // the delivery in flight answers: the graceful stop can end
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		t.Fatalf("still running %v after the hangup\n%s", stopTimeout, tail(p.log, 20))
	}
	if !p.state.Success() {
		t.Fatalf("a repeated hangup ended the graceful stop with %s, want exit status 0\n%s", p.state, tail(p.log, 20))
	}
}

// skipIfHangupIgnored skips a test of SIGHUP's graceful stop when the
// tests themselves run with SIGHUP ignored (`nohup ./test.sh`): the binary
// inherits the SIG_IGN and rightly keeps ignoring it
// (TestSIGHUPIgnoredByTheLauncherStaysIgnored).
func skipIfHangupIgnored(t *testing.T) {
	t.Helper()
	if signal.Ignored(syscall.SIGHUP) {
		t.Skip("SIGHUP is ignored by whatever started the tests (nohup?); the gateway inherits that")
	}
}
