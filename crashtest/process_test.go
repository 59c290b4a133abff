package crashtest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process timings.
const (
	// startTimeout bounds a start, from exec to /healthz answering (a
	// restart replays Badger's value log first).
	startTimeout = 30 * time.Second
	// stopTimeout bounds a graceful stop (SIGTERM) to the exit; the
	// gateway's own grace period is 10s.
	stopTimeout = 30 * time.Second
	// pollEvery is how often a starting process is asked for /healthz.
	pollEvery = 20 * time.Millisecond
)

// Credentials of the run: the ingest source's Standard Webhooks secret,
// the endpoint's signing secret and the operator token.
const (
	sourceSecret   = "whsec_Y3Jhc2h0ZXN0LXNvdXJjZS1zZWNyZXQtMzItYnl0ZXM="
	endpointID     = "receiver"
	endpointSecret = "whsec_Y3Jhc2h0ZXN0LWVuZHBvaW50LXNlY3JldC0zMmJ5dGU="
	operatorToken  = "crashtest-operator-token"
	sourceID       = "sw"
	tenantID       = "default"
)

// configTemplate is the gateway's config.yaml: a standard-webhooks source,
// both listeners on fixed loopback ports (so clients find a restarted
// process), short retries and one endpoint, the test's receiver. The
// settings tests vary are a gatewayConfig.
const configTemplate = `
server: {listen: %q}
admin:
  listen: %q
  tokens:
    - {token: %q, tenant: ""}
storage: {driver: badger, path: %q}
%sdelivery:
  timeout: %s
  allow_private_targets: true
  retry: {initial_interval: 50ms, multiplier: 2, max_interval: 500ms, randomization: 0.2, max_attempts: 1000, max_elapsed: %s}
sources:
  - id: %s
    tenant: %s
    verify: {scheme: standard-webhooks, secrets: [%q]}
endpoints:
  - id: %s
    tenant: %s
    url: %q
    secret: %q
    max_in_flight: %d
`

// gatewayConfig is what the crash tests' config.yaml varies.
type gatewayConfig struct {
	timeout, maxElapsed string
	retention           string // "" = the default
	maxInFlight         int
	endpoint, secret    string // the endpoint's id and signing secret; "" = endpointID, endpointSecret
}

// defaultConfig is the config newSupervisor writes.
var defaultConfig = gatewayConfig{timeout: "2s", maxElapsed: "1h", maxInFlight: 32}

// writeConfig (re)writes the supervisor's config.yaml: the same listeners
// and data directory, with c's settings and receiverURL's endpoint.
func (s *supervisor) writeConfig(t *testing.T, receiverURL string, c gatewayConfig) {
	t.Helper()
	retention := ""
	if c.retention != "" {
		retention = "retention: " + c.retention + "\n"
	}
	cfg := fmt.Sprintf(configTemplate, strings.TrimPrefix(s.ingestURL, "http://"), strings.TrimPrefix(s.adminURL, "http://"),
		operatorToken, s.dataDir, retention, c.timeout, c.maxElapsed,
		sourceID, tenantID, sourceSecret, cmp.Or(c.endpoint, endpointID), tenantID, receiverURL, cmp.Or(c.secret, endpointSecret), c.maxInFlight)
	if err := os.WriteFile(s.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// buildBinary builds hookgate (without -race: the process under test is
// the one users run) into a temp dir and returns its path. CRASHTEST_BIN
// names a binary to test instead (a release build, or one built once for
// several runs).
func buildBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("CRASHTEST_BIN"); bin != "" {
		t.Logf("testing %s (CRASHTEST_BIN)", bin)
		return bin
	}
	bin := filepath.Join(t.TempDir(), "hookgate")
	start := time.Now()
	out, err := exec.Command("go", "build", "-o", bin, "hookgate").CombinedOutput()
	if err != nil {
		t.Fatalf("go build hookgate: %v\n%s", err, out)
	}
	t.Logf("built %s in %v", bin, time.Since(start).Round(time.Millisecond))
	return bin
}

// freeAddr returns a loopback address that was free a moment ago. The
// gateway binds it itself; the same address is reused by every restart.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// process is one run of the binary.
type process struct {
	n      int // 1 for the first start (supervised runs only)
	cmd    *exec.Cmd
	log    string        // the file its stderr goes to
	exited chan struct{} // closed once Wait returned
	state  *os.ProcessState
}

// alive reports whether the process has not exited yet.
func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// startProcess starts cmd, whose log is the file log; the files in out
// (its output) are closed once it has exited.
func startProcess(cmd *exec.Cmd, log string, out ...*os.File) (*process, error) {
	closeOut := func() {
		for _, f := range out {
			_ = f.Close()
		}
	}
	if err := cmd.Start(); err != nil {
		closeOut()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &process{cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		closeOut()
		close(p.exited)
	}()
	return p, nil
}

// output returns what the process has logged so far.
func (p *process) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// waitHealthy polls healthz (an admin listener's /healthz) with c until it
// answers 200. It fails if the process exits first or nothing answers 200
// within startTimeout.
func (p *process) waitHealthy(c *http.Client, healthz string) error {
	deadline := time.Now().Add(startTimeout)
	for !answers200(c, healthz) {
		if !p.alive() {
			return fmt.Errorf("exited during startup (%s)", p.state)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/healthz did not answer within %v", startTimeout)
		}
		time.Sleep(pollEvery)
	}
	return nil
}

// answers200 reports whether a GET of url answers 200.
func answers200(c *http.Client, url string) bool {
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// signalAndWait sends sig and waits up to stopTimeout for the process to
// exit; p.state then tells how it ended.
func (p *process) signalAndWait(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return err
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-p.exited:
		return nil
	case <-timer.C:
		return fmt.Errorf("still running %v after %v", stopTimeout, sig)
	}
}

// supervisor runs the gateway binary on one config and data directory:
// it starts it, kills it, restarts it, and tells load clients when it is
// serving again.
type supervisor struct {
	bin, config, dataDir, logDir string
	ingestURL, adminURL          string
	client                       *http.Client

	mu    sync.Mutex
	proc  *process
	ready chan struct{} // closed while proc serves; replaced before a kill
	runs  int
}

// newSupervisor writes the config and returns a supervisor whose process
// is killed and waited for at the end of the test.
func newSupervisor(t *testing.T, bin, receiverURL string) *supervisor {
	t.Helper()
	dir := t.TempDir()
	if keep := os.Getenv("CRASHTEST_KEEP"); keep != "" {
		// Leave config, data and logs behind for a post-mortem.
		var err error
		if dir, err = os.MkdirTemp(keep, "crashtest-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("config, data and logs kept in %s (CRASHTEST_KEEP)", dir)
	}
	s := &supervisor{
		bin:     bin,
		config:  filepath.Join(dir, "config.yaml"),
		dataDir: filepath.Join(dir, "data"),
		logDir:  filepath.Join(dir, "logs"),
		client:  &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}},
		ready:   make(chan struct{}),
	}
	ingest, admin := freeAddr(t), freeAddr(t)
	s.ingestURL, s.adminURL = "http://"+ingest, "http://"+admin
	s.writeConfig(t, receiverURL, defaultConfig)
	if err := os.MkdirAll(s.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cleanup)
	return s
}

// spawn execs the binary; its stderr (the log) goes to a file per run.
func (s *supervisor) spawn() (*process, error) {
	s.mu.Lock()
	s.runs++
	n := s.runs
	s.mu.Unlock()
	log := filepath.Join(s.logDir, fmt.Sprintf("run-%03d.log", n))
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(s.bin, "serve", "-config", s.config)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childAttr()
	p, err := startProcess(cmd, log, f)
	if err != nil {
		return nil, err
	}
	p.n = n
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return p, nil
}

// start runs a new process and returns once /healthz answers 200; then
// waiting clients resume.
func (s *supervisor) start() error {
	p, err := s.spawn()
	if err != nil {
		return err
	}
	if err := p.waitHealthy(s.client, s.adminURL+"/healthz"); err != nil {
		return fmt.Errorf("run %d: %w\n%s", p.n, err, tail(p.log, 40))
	}
	s.mu.Lock()
	close(s.ready)
	s.mu.Unlock()
	return nil
}

// healthy reports whether /healthz on the admin listener answers 200.
func (s *supervisor) healthy() bool { return answers200(s.client, s.adminURL+"/healthz") }

// kill SIGKILLs the running process and waits for it. Clients that fail
// from now on wait for the next start. It is an error if the process had
// already exited: nobody else may stop it.
func (s *supervisor) kill() error {
	s.mu.Lock()
	p := s.proc
	select {
	case <-s.ready:
		s.ready = make(chan struct{})
	default:
	}
	s.mu.Unlock()
	if !p.alive() {
		return fmt.Errorf("run %d exited on its own before the kill (%s)\n%s", p.n, p.state, tail(p.log, 40))
	}
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill run %d: %w", p.n, err)
	}
	<-p.exited
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && !(ws.Signaled() && ws.Signal() == syscall.SIGKILL) {
		return fmt.Errorf("run %d ended with %s, not by our SIGKILL\n%s", p.n, p.state, tail(p.log, 40))
	}
	return nil
}

// killDuringStartup starts a process and SIGKILLs it after delay, whether
// or not it is serving yet: recovery itself gets interrupted.
func (s *supervisor) killDuringStartup(delay time.Duration) error {
	p, err := s.spawn()
	if err != nil {
		return err
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-p.exited:
		return fmt.Errorf("run %d exited during startup (%s)\n%s", p.n, p.state, tail(p.log, 40))
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	return nil
}

// stop sends SIGTERM and expects a clean exit (status 0) within
// stopTimeout, as SPEC section 1 promises.
func (s *supervisor) stop() error { return s.stopWith(syscall.SIGTERM) }

// stopWith sends sig and expects a graceful stop: exit status 0 within
// stopTimeout.
func (s *supervisor) stopWith(sig syscall.Signal) error {
	s.mu.Lock()
	p := s.proc
	select { // clients wait for the next start, as after a kill
	case <-s.ready:
		s.ready = make(chan struct{})
	default:
	}
	s.mu.Unlock()
	if !p.alive() {
		return fmt.Errorf("run %d exited on its own before %v (%s)\n%s", p.n, sig, p.state, tail(p.log, 40))
	}
	if err := p.signalAndWait(sig); err != nil {
		return fmt.Errorf("run %d: %w\n%s", p.n, err, tail(p.log, 40))
	}
	if !p.state.Success() {
		return fmt.Errorf("run %d: %v ended with %s, want exit status 0\n%s", p.n, sig, p.state, tail(p.log, 40))
	}
	return nil
}

// current is the latest process.
func (s *supervisor) current() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// waitReady blocks until a process serves (at once when one does) or ctx
// ends.
func (s *supervisor) waitReady(ctx context.Context) {
	s.mu.Lock()
	ready := s.ready
	s.mu.Unlock()
	select {
	case <-ready:
	case <-ctx.Done():
	}
}

// cleanup kills a process still running and waits for it, and closes the
// supervisor's connections.
func (s *supervisor) cleanup() {
	if p := s.current(); p != nil && p.alive() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	s.client.CloseIdleConnections()
}

// logProblems scans every run's log for what must never appear: a panic, a
// Go runtime fatal error. It returns them with their file.
func (s *supervisor) logProblems() []string {
	files, _ := filepath.Glob(filepath.Join(s.logDir, "*.log"))
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		for _, marker := range []string{"panic:", "fatal error:", "DATA RACE"} {
			if i := bytes.Index(b, []byte(marker)); i >= 0 {
				out = append(out, fmt.Sprintf("%s: %s", filepath.Base(f), excerpt(b[i:], 2000)))
			}
		}
	}
	return out
}

// errorLines returns the log lines at level ERROR of every run.
func (s *supervisor) errorLines() []string {
	files, _ := filepath.Glob(filepath.Join(s.logDir, "*.log"))
	var out []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, "level=ERROR") {
				out = append(out, filepath.Base(f)+": "+strings.TrimSpace(line))
			}
		}
	}
	return out
}

// tail returns the last n lines of a log file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func excerpt(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}
