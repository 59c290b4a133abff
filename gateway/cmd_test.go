package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/internal/testsupport"
)

// TestServeFallsBackToTheEmbeddedConfigOnlyWhenThereIsNone: serve without
// -config runs on the embedded default (the demo config, with an unsigned
// source and the trial token) only when no config.yaml is there at all.
// A config.yaml that is a dangling symlink (to a secret or a ConfigMap not
// mounted) is an error: it ran the demo config.
func TestServeFallsBackToTheEmbeddedConfigOnlyWhenThereIsNone(t *testing.T) {
	embedded, err := os.ReadFile("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()

	none := filepath.Join(dir, "config.yaml")
	cfg, err := loadServeConfig(none, false, embedded, log)
	if err != nil || len(cfg.Sources) == 0 {
		t.Fatalf("no config.yaml: %v; want the embedded config", err)
	}
	if _, err := loadServeConfig(none, true, embedded, log); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("-config naming a missing file: %v; want an error", err)
	}

	sub := filepath.Join(dir, "mounted")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(sub, "config.yaml")
	if err := os.Symlink(filepath.Join(dir, "secrets", "config.yaml"), dangling); err != nil {
		t.Fatal(err)
	}
	if cfg, err := loadServeConfig(dangling, false, embedded, log); err == nil {
		t.Fatalf("config.yaml a dangling symlink: ran on the embedded config (%d sources); want an error", len(cfg.Sources))
	}
}

// HOOKGATE_LOG_LEVEL: unset is info; a value that names no level is info
// too, and is handed back to be warned about (it was ignored in silence).
func TestLogLevel(t *testing.T) {
	for _, c := range []struct {
		env  string
		want slog.Level
		bad  string
	}{
		{"", slog.LevelInfo, ""},
		{"debug", slog.LevelDebug, ""},
		{"WARN", slog.LevelWarn, ""},
		{"error", slog.LevelError, ""},
		{"verbose", slog.LevelInfo, "verbose"},
	} {
		t.Setenv("HOOKGATE_LOG_LEVEL", c.env)
		if l, bad := logLevel(); l != c.want || bad != c.bad {
			t.Errorf("HOOKGATE_LOG_LEVEL=%q: %v %q, want %v %q", c.env, l, bad, c.want, c.bad)
		}
	}
}

// The commands and config.yaml as a user meets them (SPEC sections 1 and
// 2): settings that cannot work are config errors with their key and line,
// found by check-config, not failures at start.

// checkConfigOf runs `hookgate check-config -config <file>` (through Main, as
// the binary does) on yaml and returns the exit code and stderr.
func checkConfigOf(t *testing.T, yaml string) (int, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := Main([]string{"check-config", "-config", path}, Build{Version: "test"}, &out, &errOut)
	return code, errOut.String()
}

// Two listeners on one port with overlapping hosts can never both bind.
// The check compared the two strings only, so ":8081" and
// "127.0.0.1:8081" passed check-config and serve failed at start with
// "bind: address already in use", naming no key or line: the root
// config.yaml with HOOKGATE_LISTEN=:8081 got there (the admin listener's
// default is 127.0.0.1:8081). Listeners that can both bind still pass.
func TestConfigListenersThatCannotBothBindAreRefused(t *testing.T) {
	root, err := os.ReadFile("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = config.Parse(root, "config.yaml", func(k string) (string, bool) { return ":8081", k == "HOOKGATE_LISTEN" })
	if err == nil || !strings.Contains(err.Error(), "admin.listen") {
		t.Errorf("root config.yaml with HOOKGATE_LISTEN=:8081 (admin listener on its default 127.0.0.1:8081): %v; "+
			"want an error at admin.listen (serve fails to bind the second listener)", err)
	}
	for _, c := range []struct{ server, admin string }{
		{":8080", "127.0.0.1:8080"},
		{"0.0.0.0:9000", "127.0.0.1:9000"},
		{"127.0.0.1:9000", "localhost:9000"},
		{"[::]:9000", "[::1]:9000"},
	} {
		y := fmt.Sprintf("server: {listen: %q}\nadmin:\n  listen: %q\n  tokens: [{token: admin-token-0123456789}]\n", c.server, c.admin)
		code, stderr := checkConfigOf(t, y)
		if code != 1 || !strings.Contains(stderr, ":3: admin.listen: ") {
			t.Errorf("server.listen %q, admin.listen %q: check-config exit %d, stderr %q; want exit 1 and an error at line 3, admin.listen",
				c.server, c.admin, code, stderr)
		}
	}
	for _, c := range []struct{ server, admin string }{
		{":8080", "127.0.0.1:8081"},
		{"127.0.0.1:9000", "127.0.0.2:9000"},
		{":0", ":0"},
		{"my_service.internal:8080", "[fe80::1%eth0]:8081"},
	} {
		y := fmt.Sprintf("server: {listen: %q}\nadmin:\n  listen: %q\n  tokens: [{token: admin-token-0123456789}]\nsources: [{id: s, verify: {scheme: none}}]\n", c.server, c.admin)
		if code, stderr := checkConfigOf(t, y); code != 0 {
			t.Errorf("server.listen %q, admin.listen %q: check-config exit %d, stderr %q; want OK", c.server, c.admin, code, stderr)
		}
	}
}

// A listen host that is neither an IP address nor a host name ("bad
// host", "example..com") is a config error; it passed check-config and
// failed at start with "no such host". Whether a name resolves is still
// the environment's, checked at start.
func TestConfigListenHostThatCannotBeSpeltIsRefused(t *testing.T) {
	for _, listen := range []string{"bad host:8080", "example..com:8080", "-x-:8080"} {
		y := fmt.Sprintf("server:\n  listen: %q\nadmin:\n  tokens: [{token: admin-token-0123456789}]\n", listen)
		code, stderr := checkConfigOf(t, y)
		if code != 1 || !strings.Contains(stderr, ":2: server.listen: ") {
			t.Errorf("server.listen %q: check-config exit %d, stderr %q; want exit 1 and an error at line 2, server.listen", listen, code, stderr)
		}
	}
}

// Go's net.Listen("tcp", "0.0.0.0:P") listens dual-stack ([::]:P, as
// gateway.go does for both listeners): it holds [::1]:P too, so
// "0.0.0.0:P" and "[::1]:P" are refused like any other pair that cannot
// both bind (checked against this host's own behaviour first).
func TestConfigIPv4WildcardClashesWithIPv6LoopbackOnOnePort(t *testing.T) {
	first, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skip(err)
	}
	defer first.Close()
	_, port, _ := net.SplitHostPort(first.Addr().String())
	second, err := net.Listen("tcp", "[::1]:"+port)
	if second != nil {
		second.Close()
	}
	if err == nil {
		t.Skip("this host listens IPv4-only on 0.0.0.0: both bind here")
	}
	// This machine cannot bind both; check-config must say so.
	y := fmt.Sprintf("server: {listen: %q}\nadmin:\n  listen: %q\n  tokens: [{token: admin-token-0123456789}]\nsources: [{id: s, verify: {scheme: none}}]\n",
		"0.0.0.0:"+port, "[::1]:"+port)
	code, stderr := checkConfigOf(t, y)
	if code != 1 || !strings.Contains(stderr, "admin.listen") {
		t.Errorf("server.listen 0.0.0.0:%s, admin.listen [::1]:%s: check-config exit %d, stderr %q; "+
			"want exit 1 at admin.listen (net.Listen of the second fails: %v)", port, port, code, stderr, err)
	}
}

// Asking for help is not a usage error: -h and -help of serve and
// check-config print the flags and exit 0, as "hookgate help" prints the
// commands; an unknown flag still exits 2.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"serve", "-help"}, {"check-config", "-h"}, {"help"}} {
		var out, errOut bytes.Buffer
		if code := Main(args, Build{Version: "test"}, &out, &errOut); code != 0 || !strings.Contains(out.String()+errOut.String(), "-config") {
			t.Errorf("hookgate %v: exit %d, output %q %q; want 0 and the flags", args, code, out.String(), errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := Main([]string{"check-config", "-bogus"}, Build{Version: "test"}, &out, &errOut); code != 2 {
		t.Errorf("an unknown flag: exit %d, want 2", code)
	}
}

// `hookgate check-config other.yaml` (the file given without -config)
// checked ./config.yaml instead and said "config OK", exit 0, about a file
// it never read. The file is taken as meant; any other argument is an
// error (exit 2), for every command.
func TestCheckConfigTakesAPositionalFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("admin:\n  tokens: [{token: admin-token-0123456789}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("servr: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, c := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"check-config", "broken.yaml"}, 1, "broken.yaml:1: servr"},
		{[]string{"check-config", "config.yaml"}, 0, "config OK"},
		{[]string{"check-config", "-config", "config.yaml", "broken.yaml"}, 2, "unexpected argument"},
		{[]string{"check-config", "a.yaml", "b.yaml"}, 2, "unexpected argument"},
		{[]string{"version", "extra"}, 2, "unexpected argument"},
		{[]string{"serve", "config.yaml"}, 2, "unexpected argument"},
	} {
		var out, errOut bytes.Buffer
		code := Main(c.args, Build{Version: "test"}, &out, &errOut)
		if code != c.code || !strings.Contains(out.String()+errOut.String(), c.out) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, out.String(), errOut.String(), c.code, c.out)
		}
	}
}

// TestSignalDuringStartExitsCleanly: a SIGINT/SIGTERM that arrives
// while the gateway is starting (Badger opening, config being applied) makes
// Run fail with "apply config: …: context canceled", so `hookgate serve`
// logs "hookgate failed" and exits 1. SPEC section 1: on SIGINT/SIGTERM,
// exit 0.
func TestSignalDuringStartExitsCleanly(t *testing.T) {
	var y strings.Builder
	fmt.Fprintf(&y, "server: {listen: \"127.0.0.1:0\"}\nadmin: {listen: \"127.0.0.1:0\", tokens: [{token: %s}]}\nstorage: {path: %q}\nsources:\n",
		opToken, t.TempDir())
	// Each store write races the cancelled context (a select): with 40
	// sources to apply, one of them loses it every time.
	for i := range 40 {
		fmt.Fprintf(&y, "  - {id: s%d, verify: {scheme: none}}\n", i)
	}
	cfg, err := config.Parse([]byte(y.String()), "test.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the signal came before Run got past New
	if err := Run(ctx, cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		t.Fatalf("Run stopped by a signal during start returned %v (serve exits 1)", err)
	}
}

// TestAdminStopsAcceptingAtShutdown: once a shutdown began (the public
// listener is closed) and while the dispatcher drains (up to the grace
// period), POST /api/v1/events is refused or answered non-2xx. (The bug:
// the admin listener kept accepting during the drain and answered 202, so
// the gateway took new events while it was stopping.) SPEC section 1:
// SIGINT/SIGTERM: stop accepting.
func TestAdminStopsAcceptingAtShutdown(t *testing.T) {
	release := make(chan struct{})
	var got atomic.Int32
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer slow.Close()
	var once atomic.Bool
	releaseOnce := func() {
		if once.CompareAndSwap(false, true) {
			close(release)
		}
	}
	defer releaseOnce()

	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: slow, tenant: acme, url: %q}\n", slow.URL)})
	if st, _, b := g.post("open", []byte(`{"id":"e1","type":"t"}`), nil); st != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", st, b)
	}
	testsupport.WaitFor(t, 5*time.Second, "the delivery to be in flight", func() bool { return got.Load() > 0 })

	done := make(chan error, 1)
	go func() { done <- g.Shutdown() }()
	testsupport.WaitFor(t, 5*time.Second, "the public listener to close", func() bool {
		c, err := net.DialTimeout("tcp", g.PublicAddr(), time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})

	var status int
	var body []byte
	func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+g.AdminAddr()+"/api/v1/events",
			strings.NewReader(`{"source":"open","type":"t","payload":{"late":true}}`))
		req.Header.Set("Authorization", "Bearer "+opToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return // refused: not accepting
		}
		defer resp.Body.Close()
		status = resp.StatusCode
		body, _ = io.ReadAll(resp.Body)
	}()
	releaseOnce()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("shutdown did not finish")
	}
	if status >= 200 && status < 300 {
		t.Fatalf("POST /api/v1/events during shutdown (public listener already closed): %d %s", status, body)
	}
}

// A retention shorter than a retry window made the retention sweep delete
// deliveries still retrying (events go with all their deliveries): they
// vanished without reaching the replayable failed state. Such a config is
// refused, and so is an admin endpoint whose retry outlasts the retention.
func TestRetentionShorterThanRetryWindowIsRefused(t *testing.T) {
	extra := "retention: 30s\nendpoints:\n  - id: down\n    tenant: acme\n    url: \"https://example.com/hook\"\n" +
		"    retry: {max_elapsed: 48h}\n"
	_, err := config.Parse([]byte(fmt.Sprintf(testConfig, t.TempDir(), "72h", testSecret, extra)), "test.yaml", nil)
	if err == nil {
		t.Fatal("retention 30s with retries for 1m (delivery) and 48h (an endpoint) accepted")
	}
	for _, want := range []string{"retention: must be at least delivery.retry.max_elapsed (1m0s)", "endpoints[0] (id down).retry.max_elapsed: must not exceed retention (30s)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors %q do not say %q", err, want)
		}
	}
	g := startGateway(t, gwOptions{})
	wantProblem(t, "endpoint retrying longer than the retention", 422, "retry.max_elapsed")(g.api("POST", "/endpoints", opToken,
		jsonMap{"id": "long", "tenant": "acme", "url": "https://example.com/hook", "retry": jsonMap{"max_elapsed": "1000h"}}))
}

// Tenants had no rule but "not empty", while the store joins the parts of
// its keys with NUL bytes: a tenant holding one (or a newline, or 2 KB of
// text) was accepted from config and from the admin API. Tenants now
// follow the rule of ids.
func TestTenantsFollowTheIDRule(t *testing.T) {
	for _, y := range []string{
		"admin:\n  tokens:\n    - token: t0123456789abcdef\n      tenant: \"ac\\0me\"\n",
		"admin:\n  tokens: [{token: t0123456789abcdef}]\nsources:\n  - {id: s, tenant: \"ac me\", verify: {scheme: none}}\n",
	} {
		if _, err := config.Parse([]byte(y), "test.yaml", nil); err == nil || !strings.Contains(err.Error(), "tenant: must be 1-64 letters") {
			t.Errorf("config %q: %v", y, err)
		}
	}
	g := startGateway(t, gwOptions{})
	wantProblem(t, "a source for a tenant with a NUL", 422, "tenant")(g.api("POST", "/sources", opToken,
		jsonMap{"id": "nul", "tenant": "acme\x00evil", "verify": jsonMap{"scheme": "none"}}))
}

// After the retention is lowered below an endpoint's retry window (here:
// set past validation), a PATCH of other fields must still work; only one
// that sets the retry is checked against the retention.
func TestPatchAfterRetentionWasLowered(t *testing.T) {
	g := startGateway(t, gwOptions{
		extra:  "endpoints:\n  - {id: e, tenant: acme, url: \"https://example.com/hook\"}\n",
		config: func(c *config.Config) { c.Retention = config.Duration(30 * time.Second) }, // below delivery.retry.max_elapsed (1m)
	})
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/e", opToken, jsonMap{"disabled": true}))
	wantProblem(t, "a PATCH setting a retry past the retention", 422, "retry.max_elapsed")(
		g.api("PATCH", "/endpoints/e", opToken, jsonMap{"retry": jsonMap{"max_elapsed": "1m"}}))
}
