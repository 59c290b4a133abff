//go:build linux

package crashtest

// Tests of the commands and the config loader, run against the real
// binary: what an operator types, what they see on stdout and stderr, and
// the exit code.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cliResult is what one finished run of the binary printed and returned.
type cliResult struct {
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// cliEnv is the environment of a run: the test's, without any HOOKGATE_
// variable (the review must not depend on the shell it runs in), plus extra.
func cliEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOOKGATE_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// runCLI runs the binary in dir to its end (at most a minute).
func runCLI(t *testing.T, bin, dir string, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env, cmd.SysProcAttr = dir, env, childAttr()
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errOut.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("hookgate %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("hookgate %v still running after a minute\n%s", args, r)
	}
	return r
}

// cliProc is a running gateway whose stdout and stderr (its log) go to
// files of their own.
type cliProc struct {
	*process
	stdout string
}

// startCLI starts the binary in dir; it is killed and waited for at the end
// of the test.
func startCLI(t *testing.T, bin, dir string, env []string, attr *syscall.SysProcAttr, args ...string) *cliProc {
	t.Helper()
	logs := t.TempDir()
	stdout, stderr := filepath.Join(logs, "stdout"), filepath.Join(logs, "stderr")
	so, err := os.Create(stdout)
	if err != nil {
		t.Fatal(err)
	}
	se, err := os.Create(stderr)
	if err != nil {
		t.Fatal(err)
	}
	if attr == nil {
		attr = childAttr()
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr, cmd.SysProcAttr = dir, env, so, se, attr
	proc, err := startProcess(cmd, stderr, so, se)
	if err != nil {
		t.Fatal(err)
	}
	p := &cliProc{process: proc, stdout: stdout}
	t.Cleanup(func() {
		if p.alive() {
			_ = p.cmd.Process.Kill()
		}
		<-p.exited
	})
	return p
}

// waitCLIHealthy polls the admin listener's /healthz until it answers 200.
func waitCLIHealthy(t *testing.T, p *cliProc, adminAddr string) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	if err := p.waitHealthy(c, "http://"+adminAddr+"/healthz"); err != nil {
		t.Fatalf("%v\n%s", err, p.output())
	}
}

// stopCLI sends sig and returns the exit code (within stopTimeout).
func stopCLI(t *testing.T, p *cliProc, sig syscall.Signal) int {
	t.Helper()
	if err := p.signalAndWait(sig); err != nil {
		t.Fatalf("%v\n%s", err, p.output())
	}
	return p.state.ExitCode()
}

// waitCLIExit waits for a process that must end on its own (a refused start).
func waitCLIExit(t *testing.T, p *cliProc) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(startTimeout):
		t.Fatalf("a start that must be refused is still running after %v\n%s", startTimeout, p.output())
	}
	return p.state.ExitCode()
}

// cliConfig is a config.yaml on the given listeners and data directory,
// with the operator token, the test's standard-webhooks source and extra
// appended (endpoints: …).
func cliConfig(ingest, admin, data, extra string) string {
	return fmt.Sprintf(`server: {listen: %q}
admin:
  listen: %q
  tokens:
    - {token: %q, tenant: ""}
storage: {driver: badger, path: %q}
delivery:
  allow_private_targets: true
  retry: {initial_interval: 50ms, max_interval: 200ms, max_attempts: 3, max_elapsed: 1h}
sources:
  - id: %s
    verify: {scheme: standard-webhooks, secrets: [%q]}
%s`, ingest, admin, operatorToken, data, sourceID, sourceSecret, extra)
}

func writeCLIFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// cliEndpointSecret reads an endpoint's signing secret through the admin API.
func cliEndpointSecret(t *testing.T, c *http.Client, adminAddr, id string) string {
	t.Helper()
	st, b, _, err := adminCall(c, http.MethodGet, "http://"+adminAddr+"/api/v1/endpoints/"+id, nil, nil)
	if err != nil || st != http.StatusOK {
		t.Fatalf("GET /endpoints/%s: %d %v %s", id, st, err, b)
	}
	var ep struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(b, &ep); err != nil || ep.Secret == "" {
		t.Fatalf("GET /endpoints/%s: no secret in %s (%v)", id, b, err)
	}
	return ep.Secret
}

// TestFailedStartOnAPortInUseChangesNothing: a start that is refused
// because a listen address is in use must leave the data directory as it
// was. The operator rolls out a config.yaml without endpoint "e", the
// start fails ("address already in use", exit 1), they roll back to the
// config.yaml they had: endpoint "e" must be the endpoint it was, with the
// signing secret its subscriber verifies.
func TestFailedStartOnAPortInUseChangesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	ingest, admin, data := freeAddr(t), freeAddr(t), filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "config.yaml")
	withEndpoint := cliConfig(ingest, admin, data, "endpoints:\n  - {id: e, url: \"https://billing.example.com/hooks\"}\n")
	without := cliConfig(ingest, admin, data, "")
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()

	writeCLIFile(t, cfg, withEndpoint)
	p := startCLI(t, bin, dir, cliEnv(), nil, "serve", "-config", cfg)
	waitCLIHealthy(t, p, admin)
	before := cliEndpointSecret(t, c, admin, "e")
	if code := stopCLI(t, p, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p.output())
	}

	hold, err := net.Listen("tcp", ingest) // another service took the port
	if err != nil {
		t.Fatal(err)
	}
	writeCLIFile(t, cfg, without)
	r := runCLI(t, bin, dir, cliEnv(), "serve", "-config", cfg)
	_ = hold.Close()
	if r.code == 0 || !strings.Contains(r.stderr, "address already in use") {
		t.Fatalf("a start on an ingest port in use: want exit 1 saying the address is in use\n%s", r)
	}

	writeCLIFile(t, cfg, withEndpoint)
	p = startCLI(t, bin, dir, cliEnv(), nil, "serve", "-config", cfg)
	waitCLIHealthy(t, p, admin)
	after := cliEndpointSecret(t, c, admin, "e")
	if after != before {
		t.Errorf("a start refused for a port in use (exit %d, %q) still applied its config.yaml to the store: "+
			"endpoint e, absent from it, was deleted, and the restart on the config.yaml of before made e anew "+
			"with a new generated signing secret (was %.12s…, now %.12s…): every subscriber verifying the old "+
			"secret now rejects hookgate's deliveries; a refused start must not change the data directory "+
			"(bind the listeners before applying the config)", r.code, lastLine(r.stderr), before, after)
	}
	if code := stopCLI(t, p, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p.output())
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestYAMLSyntaxErrorsNameTheirLine: check-config promises every error
// "with its line". For a YAML syntax error, the line it prints must be the
// one to fix (or, for a construct left open, the line it starts on), not
// the line above it.
func TestYAMLSyntaxErrorsNameTheirLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	const head = "admin:\n  tokens:\n    - {token: operator-token, tenant: \"\"}\n\n" // lines 1-4
	for _, c := range []struct {
		name     string
		yaml     string
		min, max int // the lines the error may name
	}{
		{"flow mapping not closed", head + "sources:\n  - id: s\n    verify: {scheme: none\n\nendpoints: []\n", 7, 7},
		{"flow list not closed", head + "sources:\n  - id: s\n    verify:\n      scheme: stripe\n      secrets: [\"whsec_a\", \"whsec_b\"\n\n\nendpoints: []\n", 9, 9},
		{"key indented out of its list entry", head + "sources:\n  - id: s\n    verify: {scheme: none}\n  event_id: \"json:/id\"\n", 6, 8},
	} {
		path := filepath.Join(dir, "config.yaml")
		writeCLIFile(t, path, c.yaml)
		r := runCLI(t, bin, dir, cliEnv(), "check-config", path)
		var line int
		if _, err := fmt.Sscanf(strings.TrimPrefix(r.stderr, path+":"), "%d:", &line); err != nil || r.code != 1 {
			t.Errorf("%s: want exit 1 and %s:LINE: …\n%s", c.name, path, r)
			continue
		}
		if line < c.min || line > c.max {
			lines := strings.Split(c.yaml, "\n")
			t.Errorf("%s: check-config names line %d (%q), the mistake is on line %d (%q):\n%s"+
				"(gopkg.in/yaml.v3 gives a parser error's line 0-based: config_decode.go syntaxError takes it as it is)",
				c.name, line, lines[line-1], c.max, lines[c.max-1], r.stderr)
		}
	}
}

// TestConfigErrorsDoNotPrintASecretInAMalformedLine: a token or secret
// written with "=" or a blank instead of ": " (an env-file habit, a
// typo) makes YAML read the whole "token=S3cret" as an unknown key. The
// error must name the line and the key without the secret, in
// check-config's output and in serve's (which goes to the journal, to log
// shipping).
func TestConfigErrorsDoNotPrintASecretInAMalformedLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	const secret = "Zq7SECRETxx91"
	const tail = "storage: {path: ./data}\n"
	for _, c := range []struct{ name, yaml string }{
		{"token=", "admin:\n  tokens:\n    - {tenant: \"\", token=" + secret + "}\nsources:\n  - {id: s, verify: {scheme: none}}\n"},
		{"token and a blank", "admin:\n  tokens:\n    - {tenant: \"\", token " + secret + "}\nsources:\n  - {id: s, verify: {scheme: none}}\n"},
		{"secrets and a blank", "admin:\n  tokens:\n    - {token: operator-token, tenant: \"\"}\nsources:\n  - id: s\n    verify: {scheme: stripe, secrets whsec_" + secret + "}\n"},
		{"endpoint secret=", "admin:\n  tokens:\n    - {token: operator-token, tenant: \"\"}\nsources:\n  - {id: s, verify: {scheme: none}}\nendpoints:\n  - {id: e, url: \"https://a.example.com/\", secret=whsec_" + secret + "}\n"},
		{"static header=", "admin:\n  tokens:\n    - {token: operator-token, tenant: \"\"}\nsources:\n  - {id: s, verify: {scheme: none}}\nendpoints:\n  - {id: e, url: \"https://a.example.com/\", headers: {Authorization=Bearer " + secret + "}}\n"},
	} {
		path := filepath.Join(dir, "config.yaml")
		writeCLIFile(t, path, c.yaml+tail)
		for _, args := range [][]string{{"check-config", path}, {"serve", "-config", path}} {
			r := runCLI(t, bin, dir, cliEnv(), args...)
			if r.code != 1 {
				t.Errorf("%s: hookgate %s: want exit 1\n%s", c.name, args[0], r)
			}
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("%s: hookgate %s prints the secret %q in its error:\n%s(config_decode.go joinKey cuts a key at ':' only)",
					c.name, args[0], secret, r.stderr)
			}
		}
	}
}

// TestExplicitYAMLTagsAreNotIgnored: a strict config does not silently
// drop what the file says. "!!binary" means the bytes the base64 stands
// for, "!!int" a number; hookgate takes the text as written instead, so a
// secret written as !!binary is not the one the provider signs with, and
// nothing says so.
func TestExplicitYAMLTagsAreNotIgnored(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	for _, v := range []string{"!!binary c2VjcmV0LXNpZ25pbmcta2V5", "!!int operator-token", "!!map operator-token"} {
		writeCLIFile(t, path, "admin:\n  tokens:\n    - {tenant: \"\", token: "+v+"}\nsources:\n  - {id: s, verify: {scheme: none}}\n")
		r := runCLI(t, bin, dir, cliEnv(), "check-config", path)
		if r.code != 1 || !strings.Contains(r.stderr, "admin.tokens[0].token") {
			t.Errorf("token: %s: want exit 1 naming admin.tokens[0].token (a tag it does not take), got %s", v, r)
		}
	}
}

// TestDashHOfEveryCommandExitsZero: README: "hookgate help, -h: print
// the commands or a command's flags (exit 0)". "hookgate version -h" is a
// usage error (exit 2) with a message about a config file.
func TestDashHOfEveryCommandExitsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	for _, args := range [][]string{{"version", "-h"}, {"version", "-help"}} {
		r := runCLI(t, bin, dir, cliEnv(), args...)
		if r.code != 0 || strings.Contains(r.stderr, "-config FILE") {
			t.Errorf("hookgate %s: want exit 0 and the command's usage, got %s", strings.Join(args, " "), r)
		}
	}
}

// TestEmbeddedDefaultConfigRunsAsIs: "go run ." in a directory without
// a config.yaml runs the embedded default: the demo source takes an
// unsigned request, the trial token reads it back, logs go to stderr only,
// the data directory is ./data, and SIGTERM exits 0.
func TestEmbeddedDefaultConfigRunsAsIs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	ingest, admin := freeAddr(t), freeAddr(t)
	p := startCLI(t, bin, dir, cliEnv("HOOKGATE_LISTEN="+ingest, "HOOKGATE_ADMIN_LISTEN="+admin), nil)
	waitCLIHealthy(t, p, admin)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Post("http://"+ingest+"/ingest/demo", "application/json", strings.NewReader(`{"id":"evt_zz","type":"invoice.paid"}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /ingest/demo on the embedded config: %d, want 202", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/api/v1/events", nil)
	req.Header.Set("Authorization", "Bearer dev-admin-token")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "evt_zz") {
		t.Fatalf("GET /events with the trial token: %d %s", resp.StatusCode, b)
	}
	if code := stopCLI(t, p, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p.output())
	}
	if out, _ := os.ReadFile(p.stdout); len(out) != 0 {
		t.Errorf("serve wrote to stdout (logs belong on stderr): %q", out)
	}
	if !strings.Contains(p.output(), "embedded default config") {
		t.Errorf("the log does not say the embedded config runs:\n%s", p.output())
	}
	if st, err := os.Stat(filepath.Join(dir, "data")); err != nil || !st.IsDir() {
		t.Errorf("no ./data directory after a run on the embedded config: %v", err)
	}
}

// TestSIGINTStopsAndTheStoreReopensAtOnce: Ctrl-C stops gracefully
// (exit 0, "hookgate stopped"), the store is closed, so a start right
// after opens it (no "in use") and has the acknowledged event.
func TestSIGINTStopsAndTheStoreReopensAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	ingest, admin := freeAddr(t), freeAddr(t)
	cfg := filepath.Join(dir, "config.yaml")
	writeCLIFile(t, cfg, cliConfig(ingest, admin, filepath.Join(dir, "data"), ""))
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()

	p := startCLI(t, bin, dir, cliEnv(), nil, "serve", "-config", cfg)
	waitCLIHealthy(t, p, admin)
	req, err := signedIngest("http://"+ingest+"/ingest/"+sourceID, "msg_zz_sigint", "application/json", []byte(`{"type":"t"}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("signed ingest: %d", resp.StatusCode)
	}
	if code := stopCLI(t, p, syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d, want 0\n%s", code, p.output())
	}
	if !strings.Contains(p.output(), "hookgate stopped") {
		t.Errorf("no \"hookgate stopped\" after SIGINT:\n%s", p.output())
	}
	p = startCLI(t, bin, dir, cliEnv(), nil, "serve", "-config", cfg)
	waitCLIHealthy(t, p, admin)
	st, b, _, err := adminCall(c, http.MethodGet, "http://"+admin+"/api/v1/events", nil, nil)
	if err != nil || st != http.StatusOK || !strings.Contains(string(b), "msg_zz_sigint") {
		t.Errorf("after SIGINT and a restart, GET /events: %d %v %s; want the acknowledged event", st, err, b)
	}
	if code := stopCLI(t, p, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p.output())
	}
}

// TestSecondInstanceOnTheSameDataDirIsRefused: a second gateway on the
// data directory of a running one (other ports) does not start: exit 1,
// a message saying the directory is in use, and the first keeps serving.
func TestSecondInstanceOnTheSameDataDirIsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	ingest, admin := freeAddr(t), freeAddr(t)
	first, second := filepath.Join(dir, "first.yaml"), filepath.Join(dir, "second.yaml")
	writeCLIFile(t, first, cliConfig(ingest, admin, data, ""))
	writeCLIFile(t, second, cliConfig(freeAddr(t), freeAddr(t), data, ""))
	p := startCLI(t, bin, dir, cliEnv(), nil, "serve", "-config", first)
	waitCLIHealthy(t, p, admin)

	q := startCLI(t, bin, dir, cliEnv(), nil, "serve", "-config", second)
	if code := waitCLIExit(t, q); code != 1 || !strings.Contains(q.output(), "in use by another hookgate process") {
		t.Errorf("a second instance on the same data directory: exit %d, want 1 saying the directory is in use\n%s", code, q.output())
	}
	waitCLIHealthy(t, p, admin)
	if code := stopCLI(t, p, syscall.SIGTERM); code != 0 {
		t.Fatalf("the first instance, SIGTERM: exit %d\n%s", code, p.output())
	}
}

// TestStartFailsClosedOnTheEnvironment: what check-config cannot see
// stops serve: a config.yaml it may not read (it must not fall back to the
// embedded demo config), a data directory it may not write, an admin port
// in use. Each: exit 1, a message naming the cause, nothing left listening.
func TestStartFailsClosedOnTheEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	nobody := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}

	t.Run("admin port in use", func(t *testing.T) {
		dir := t.TempDir()
		ingest, admin := freeAddr(t), freeAddr(t)
		cfg := filepath.Join(dir, "config.yaml")
		writeCLIFile(t, cfg, cliConfig(ingest, admin, filepath.Join(dir, "data"), ""))
		hold, err := net.Listen("tcp", admin)
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Close()
		r := runCLI(t, bin, dir, cliEnv(), "serve", "-config", cfg)
		if r.code != 1 || !strings.Contains(r.stderr, "admin listener") || !strings.Contains(r.stderr, "address already in use") {
			t.Errorf("admin port in use: want exit 1 naming the admin listener\n%s", r)
		}
		if l, err := net.Listen("tcp", ingest); err != nil {
			t.Errorf("after the refused start the ingest port is still taken: %v", err)
		} else {
			_ = l.Close()
		}
	})

	if os.Geteuid() != 0 {
		t.Skip("the permission cases run the gateway as nobody, which needs root")
	}
	// nobody must reach the binary and the directories: t.TempDir's are 0700.
	shared := cliSharedDir(t)
	nbin := filepath.Join(shared, "hookgate")
	if b, err := os.ReadFile(bin); err != nil || os.WriteFile(nbin, b, 0o755) != nil {
		t.Fatalf("copy the binary for nobody: %v", err)
	}
	bin = nbin
	t.Run("unreadable ./config.yaml", func(t *testing.T) {
		dir := filepath.Join(shared, "unreadable")
		if err := os.Mkdir(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		ingest, admin := freeAddr(t), freeAddr(t)
		writeCLIFile(t, filepath.Join(dir, "config.yaml"), cliConfig(ingest, admin, filepath.Join(dir, "data"), ""))
		// Without -config: the embedded default would listen on
		// HOOKGATE_LISTEN with its unsigned demo source.
		p := startCLI(t, bin, dir, cliEnv("HOOKGATE_LISTEN="+ingest, "HOOKGATE_ADMIN_LISTEN="+admin), nobody)
		if code := waitCLIExit(t, p); code != 1 || !strings.Contains(p.output(), "permission denied") || strings.Contains(p.output(), "embedded") {
			t.Errorf("./config.yaml unreadable: exit %d, want 1 saying permission denied, not the embedded config\n%s", code, p.output())
		}
	})
	t.Run("data directory not writable", func(t *testing.T) {
		dir := filepath.Join(shared, "readonly")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		ingest, admin := freeAddr(t), freeAddr(t)
		cfg := filepath.Join(dir, "config.yaml")
		writeCLIFile(t, cfg, cliConfig(ingest, admin, filepath.Join(dir, "data"), ""))
		if err := os.Chmod(cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		p := startCLI(t, bin, dir, cliEnv(), nobody, "serve", "-config", cfg)
		if code := waitCLIExit(t, p); code != 1 || !strings.Contains(p.output(), "permission denied") {
			t.Errorf("data directory not writable: exit %d, want 1 saying permission denied\n%s", code, p.output())
		}
	})
}

// cliSharedDir is a directory other users may enter, removed at the end.
func cliSharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "zz-review-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLogsCarryNoSecrets: a gateway run with a source secret, an
// operator and a tenant token, an endpoint signing secret and a static
// Authorization header, at debug level, through good and bad requests and
// failing deliveries: none of these values appears anywhere in its stderr.
func TestLogsCarryNoSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "receiver down: "+r.Header.Get("Authorization"), http.StatusInternalServerError)
	}))
	defer rcv.Close()
	const (
		tenantToken = "zz-tenant-token-Qm8vYk"
		hmacSecret  = "zz-hmac-secret-Hh31Lp"
		headerCred  = "zz-header-cred-Wn42Ux"
		urlCred     = "zz-url-cred-Kk07Ra"
		epSecret    = "whsec_enotZW5kcG9pbnQtc2lnbmluZy1zZWNyZXQ="
	)
	ingest, admin := freeAddr(t), freeAddr(t)
	cfg := filepath.Join(dir, "config.yaml")
	writeCLIFile(t, cfg, fmt.Sprintf(`server: {listen: %q}
admin:
  listen: %q
  tokens:
    - {token: "${ZZ_OP}", tenant: ""}
    - {token: "${ZZ_TT}", tenant: "acme"}
storage: {path: %q}
delivery:
  allow_private_targets: true
  retry: {initial_interval: 20ms, max_interval: 50ms, max_attempts: 3, max_elapsed: 1h}
sources:
  - id: %s
    verify: {scheme: standard-webhooks, secrets: ["${ZZ_SW}"]}
  - id: h
    verify: {scheme: hmac, secrets: ["${ZZ_H}"], header: X-Sig}
endpoints:
  - id: e
    url: "%s/hook?key=${ZZ_U}"
    secret: "${ZZ_ES}"
    headers: {Authorization: "Bearer ${ZZ_HC}"}
`, ingest, admin, filepath.Join(dir, "data"), sourceID, rcv.URL))
	env := cliEnv("HOOKGATE_LOG_LEVEL=debug", "ZZ_OP="+operatorToken, "ZZ_TT="+tenantToken, "ZZ_SW="+sourceSecret,
		"ZZ_H="+hmacSecret, "ZZ_U="+urlCred, "ZZ_ES="+epSecret, "ZZ_HC="+headerCred)
	p := startCLI(t, bin, dir, env, nil, "serve", "-config", cfg)
	waitCLIHealthy(t, p, admin)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	do := func(method, url string, hdr map[string]string, body string) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	in := "http://" + ingest + "/ingest/"
	do("POST", in+sourceID, map[string]string{"Webhook-Id": "m1", "Webhook-Timestamp": fmt.Sprint(time.Now().Unix()), "Webhook-Signature": "v1,AAAA"}, `{"type":"x"}`)
	do("POST", in+"h", map[string]string{"X-Sig": hmacSecret}, `{"type":"x"}`) // the secret itself as the signature
	do("POST", in+"h", map[string]string{"X-Sig": "deadbeef", "Authorization": "Bearer " + headerCred}, `{"type":"x"}`)
	do("GET", "http://"+admin+"/api/v1/events", map[string]string{"Authorization": "Bearer " + operatorToken + "x"}, "")
	do("GET", "http://"+admin+"/api/v1/events", map[string]string{"Authorization": "Basic " + tenantToken}, "")
	do("GET", "http://"+admin+"/api/v1/endpoints/e", map[string]string{"Authorization": "Bearer " + tenantToken}, "")
	req, err := signedIngest(in+sourceID, "msg_zz_logs", "application/json", []byte(`{"type":"t"}`), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	waitUntil(t, 20*time.Second, "the delivery to the failing receiver to give up", func() bool {
		return strings.Contains(p.output(), "delivery failed")
	})
	if code := stopCLI(t, p, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p.output())
	}
	log := p.output()
	for name, v := range map[string]string{"operator token": operatorToken, "tenant token": tenantToken,
		"source secret": sourceSecret, "source secret's key": strings.TrimPrefix(sourceSecret, "whsec_")[:16],
		"hmac secret": hmacSecret, "endpoint secret": strings.TrimPrefix(epSecret, "whsec_")[:16],
		"static header credential": headerCred, "URL credential": urlCred} {
		if strings.Contains(log, v) {
			t.Errorf("the log holds the %s %q:\n%s", name, v, log)
		}
	}
}
