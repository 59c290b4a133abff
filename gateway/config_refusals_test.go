package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
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
)

// TestTokenTenantFromUnsetVariableIsRefused: a tenant-scoped admin token whose
// tenant comes from the environment becomes an operator token (all tenants)
// when the variable is not set: ${ACME_TENANT} expands to "", and "" is the
// operator. The gateway starts with a privilege it was not given (fail open);
// like every other field an unset variable empties, it must be an error
// naming the key, the line and the variable.
func TestTokenTenantFromUnsetVariableIsRefused(t *testing.T) {
	y := "admin:\n  tokens:\n    - token: operator-token-0123456789\n    - token: acme-token-0123456789\n      tenant: ${ACME_TENANT}\n"
	cfg, err := ParseConfig([]byte(y), "test.yaml", env(nil))
	if err == nil {
		t.Fatalf("config accepted: admin.tokens[1] (meant for one tenant) is now scoped to %q, i.e. the operator: %+v",
			cfg.Admin.Tokens[1].Tenant, cfg.Admin.Tokens)
	}
	errs := configErrors(t, err)
	if len(errs) != 1 || errs[0].Key != "admin.tokens[1].tenant" || errs[0].Line != 5 || !strings.Contains(errs[0].Msg, "ACME_TENANT") {
		t.Fatalf("got %v, want one error at admin.tokens[1].tenant, line 5, naming ACME_TENANT", err)
	}
}

// TestPartlyUnsetSecretIsRefused: a secret that only partly comes from an unset
// variable ("prefix-${VAR}") expands to its constant part and is accepted,
// so the gateway starts guarded by a secret written in the file: an admin
// token "hg_" and a Stripe signing secret "whsec_" anyone can read in the
// repository. An unset reference only counts as an error when the whole
// value ends up empty.
func TestPartlyUnsetSecretIsRefused(t *testing.T) {
	y := "admin:\n  tokens:\n    - token: hg_${ADMIN_TOKEN}\n" +
		"sources:\n  - id: stripe\n    verify:\n      scheme: stripe\n      secrets: [\"whsec_${STRIPE_KEY}\"]\n"
	cfg, err := ParseConfig([]byte(y), "test.yaml", env(nil))
	if err == nil {
		t.Fatalf("config accepted with unset ADMIN_TOKEN and STRIPE_KEY: admin token %q, stripe secret %q",
			cfg.Admin.Tokens[0].Token, cfg.Sources[0].Verify.Secrets[0])
	}
	msg := err.Error()
	for _, want := range []string{"admin.tokens[0].token", "ADMIN_TOKEN", "sources[0] (id stripe).verify.secrets[0]", "STRIPE_KEY"} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors do not mention %s:\n%s", want, msg)
		}
	}
}

// `hookgate check-config other.yaml` (the file given without -config)
// checked ./config.yaml instead and said "config OK", exit 0, about a file
// it never read. The file is taken as meant; any other argument is an
// error (exit 2), for every command.
func TestCheckConfigTakesAPositionalFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(base), 0o600); err != nil {
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

// check-config passed a config that serve refused: the trial token on a
// non-loopback admin listener was checked only at start, with no line.
// It is a config error now, so check-config refuses it too, naming the
// key and line.
func TestCheckConfigRefusesWhatServeRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "exposed.yaml")
	y := fmt.Sprintf("server: {listen: \"127.0.0.1:0\"}\nadmin:\n  listen: \"0.0.0.0:0\"\n  tokens: [{token: %s}]\nstorage: {path: %q}\n", devAdminToken, filepath.Join(dir, "data"))
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := CheckConfig(path, io.Discard, &out); code != 1 || !strings.Contains(out.String(), "exposed.yaml:4: admin.tokens[0].token: the trial token") {
		t.Fatalf("check-config: exit %d, %q", code, out.String())
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
	cfg, err := ParseConfig([]byte(y.String()), "test.yaml", nil)
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
	waitFor(t, 5*time.Second, "the delivery to be in flight", func() bool { return got.Load() > 0 })

	done := make(chan error, 1)
	go func() { done <- g.Shutdown() }()
	waitFor(t, 5*time.Second, "the public listener to close", func() bool {
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
	_, err := ParseConfig([]byte(fmt.Sprintf(testConfig, t.TempDir(), "72h", testSecret, extra)), "test.yaml", nil)
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
		if _, err := ParseConfig([]byte(y), "test.yaml", env(nil)); err == nil || !strings.Contains(err.Error(), "tenant: must be 1-64 letters") {
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
		config: func(c *Config) { c.Retention = Duration(30 * time.Second) }, // below delivery.retry.max_elapsed (1m)
	})
	must[endpointView](t, 200)(g.api("PATCH", "/endpoints/e", opToken, jsonMap{"disabled": true}))
	wantProblem(t, "a PATCH setting a retry past the retention", 422, "retry.max_elapsed")(
		g.api("PATCH", "/endpoints/e", opToken, jsonMap{"retry": jsonMap{"max_elapsed": "1m"}}))
}

// A short admin token guards only a loopback admin listener: on one
// reachable from other hosts it is a config error naming the key and line
// (and its length, never the token), as the trial token is; 16 bytes pass.
func TestShortAdminTokenIsRefusedOnAnExposedListener(t *testing.T) {
	cfg := func(listen, token string) string {
		return fmt.Sprintf("server: {listen: \"127.0.0.1:0\"}\nadmin:\n  listen: %q\n  tokens: [{token: %s}]\n", listen, token)
	}
	for _, c := range []struct {
		listen, token, want string
	}{
		{"0.0.0.0:8081", "s3cr3t", "test.yaml:4: admin.tokens[0].token: a token of 6 bytes is refused on a non-loopback admin.listen: at least 16 are required"},
		{":8081", "0123456789abcde", "test.yaml:4: admin.tokens[0].token: a token of 15 bytes is refused"},
		{"[::]:8081", "0123456789abcde", "a token of 15 bytes is refused"},
		{":8081", "0123456789abcdef", ""},
		{"127.0.0.1:8081", "s3cr3t", ""},
		{"[::1]:8081", "s3cr3t", ""},
		{"localhost:8081", "s3cr3t", ""},
	} {
		_, err := ParseConfig([]byte(cfg(c.listen, c.token)), "test.yaml", nil)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("listen %s, token of %d bytes: %v; want it accepted", c.listen, len(c.token), err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("listen %s, token of %d bytes: %v; want %q", c.listen, len(c.token), err, c.want)
		case err != nil && strings.Contains(err.Error(), c.token):
			t.Errorf("the error quotes the token: %v", err)
		}
	}
	// The last line of defence, for a Config built without ParseConfig.
	c := &Config{Admin: AdminConfig{Listen: ":8081", Tokens: []TokenConfig{{Token: "short"}}}}
	if err := checkAdminExposure(c); err == nil || strings.Contains(err.Error(), "short") {
		t.Errorf("checkAdminExposure: %v; want a refusal that does not quote the token", err)
	}
}
