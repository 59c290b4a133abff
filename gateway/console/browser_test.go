package console_test

// Browser tests of the console: the real gateway binary, a real receiving
// endpoint, and headless Chromium driven by chromedp. Without Chromium
// they skip (fail under CI=true).

import (
	"bytes"
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
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

const (
	adminToken = "console-test-admin-token-0123456789"
	acmeToken  = "console-test-acme-token-0123456789"
	chromium   = "/usr/bin/chromium"
)

var binary string // the gateway, built once by TestMain

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "hookgate-console-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, "go list -m:", err)
			return 1
		}
		binary = filepath.Join(dir, "hookgate")
		build := exec.Command("go", "build", "-o", binary, ".")
		build.Dir = strings.TrimSpace(string(out))
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "go build:", err)
			return 1
		}
		return m.Run()
	}())
}

// gateway is one running gateway process and its receiving endpoint.
type gateway struct {
	t              *testing.T
	public, admin  string // base URLs
	received       atomic.Int64
	receiverAnswer string // the receiver's answer body
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startGateway runs the binary with two sources (demo of tenant acme,
// other of tenant globex), an endpoint for each at an httptest receiver,
// an operator token and one scoped to acme.
func startGateway(t *testing.T, receiverAnswer string) *gateway {
	t.Helper()
	g := &gateway{t: t, receiverAnswer: receiverAnswer}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		g.received.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, g.receiverAnswer)
	}))
	t.Cleanup(recv.Close)
	dir := t.TempDir()
	pub, adm := freeAddr(t), freeAddr(t)
	cfg := fmt.Sprintf(`server:
  listen: %q
admin:
  listen: %q
  tokens:
    - token: %q
      tenant: ""
    - token: %q
      tenant: acme
storage:
  driver: badger
  path: %q
delivery:
  allow_private_targets: true
  retry: {initial_interval: 1s, max_attempts: 3}
sources:
  - id: demo
    tenant: acme
    verify: {scheme: none}
    event_id: "json:/id"
    event_type: "json:/type"
  - id: other
    tenant: globex
    verify: {scheme: none}
    event_id: "json:/id"
    event_type: "json:/type"
endpoints:
  - id: acme-sink
    tenant: acme
    url: %q
  - id: globex-sink
    tenant: globex
    url: %q
`, pub, adm, adminToken, acmeToken, filepath.Join(dir, "data"), recv.URL+"/acme", recv.URL+"/globex")
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(binary, "serve", "-config", path)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	g.public, g.admin = "http://"+pub, "http://"+adm
	waitFor(t, 10*time.Second, "the gateway ready", func() bool {
		select {
		case <-done:
			t.Fatalf("the gateway exited: %s", logs.String())
		default:
		}
		resp, err := http.Get(g.admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return g
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// ingest posts body to the public listener; extra headers go with it.
// It returns the gateway event id.
func (g *gateway) ingest(source, body string, headers map[string]string) string {
	g.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.public+"/ingest/"+source, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct{ ID string }
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 || json.Unmarshal(raw, &a) != nil || a.ID == "" {
		g.t.Fatalf("ingest %s: %d %s", source, resp.StatusCode, raw)
	}
	return a.ID
}

// api GETs an admin API path with the operator token into v.
func (g *gateway) api(path string, v any) int {
	g.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.admin+"/api/v1"+path, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil {
		json.NewDecoder(resp.Body).Decode(v)
	}
	return resp.StatusCode
}

// delivered waits until the event's deliveries have all succeeded and
// returns the first one's id.
func (g *gateway) delivered(eventID string) string {
	g.t.Helper()
	var id string
	waitFor(g.t, 10*time.Second, "delivery of "+eventID, func() bool {
		var ev struct {
			Deliveries []struct{ ID, State string } `json:"deliveries"`
		}
		if g.api("/events/"+eventID, &ev) != http.StatusOK || len(ev.Deliveries) == 0 {
			return false
		}
		for _, d := range ev.Deliveries {
			if d.State != "succeeded" {
				return false
			}
		}
		id = ev.Deliveries[0].ID
		return true
	})
	return id
}

// browser starts headless Chromium for one test; its actions' context
// ends with the test or after limit.
func browser(t *testing.T, g *gateway, limit time.Duration) *tab {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no Chromium at %s: the console's browser tests need it", chromium)
		}
		t.Skipf("no Chromium at %s", chromium)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	// The first run starts the browser; it must have no deadline (one
	// would stop the browser), the actions after it do.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, limit)
	t.Cleanup(cancel)
	watchConsole(t, ctx)
	return &tab{t: t, ctx: ctx, g: g}
}

// watchConsole fails the test for an uncaught exception or an error the
// page logged (a refusal by the Content-Security-Policy is one), seen
// until the test ends. An answer of the API with an error status is the
// console's to show, not a fault: the browser's "Failed to load
// resource" lines are left out.
func watchConsole(t *testing.T, ctx context.Context) {
	cctx, stop := context.WithCancel(ctx)
	messages := chromedp.Console(cctx)
	done := make(chan []string)
	go func() {
		var bad []string
		for m, err := range messages {
			if err != nil {
				break
			}
			if (m.Type == chromedp.ConsoleError || m.IsException()) && !strings.Contains(m.Text, "Failed to load resource") {
				bad = append(bad, m.String())
			}
		}
		done <- bad
	}()
	t.Cleanup(func() {
		stop()
		for _, m := range <-done {
			t.Errorf("browser console: %s", m)
		}
	})
}

// tab is the browser tab of one test.
type tab struct {
	t   *testing.T
	ctx context.Context
	g   *gateway
}

func (b *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](b *tab, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// text is the text content of the first element matching css.
func (b *tab) text(css string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.TextContent(chromedp.CSS(css)))
	if err != nil {
		b.t.Fatalf("reading %s: %v", css, err)
	}
	return v
}

func visible(css string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(css))
}
func click(css string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(css)) }

// go to a hash route of the console; a page's content is then awaited by
// its selector.
func (b *tab) hash(route string) chromedp.Action[chromedp.Void] {
	return chromedp.Navigate(b.g.admin + "/ui/" + route)
}

// signIn opens the console and signs in with token.
func (b *tab) signIn(token string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		b.hash("#/signin"),
		visible(`#token`),
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		click(`form.signin button[type=submit]`),
	)
}

// screenshot saves a full-page PNG as console-NAME.png into
// $HOOKGATE_CONSOLE_SCREENSHOTS, else into a temporary directory.
func (b *tab) screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv("HOOKGATE_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = b.t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "console-"+name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// TestConsoleRetryAndReplay: sign in, find an ingested event in the list,
// open it and its delivery, retry it and see the new attempt; replay the
// event and see the new delivery.
func TestConsoleRetryAndReplay(t *testing.T) {
	g := startGateway(t, `{"ok":true}`)
	id := g.ingest("demo", `{"id":"inv_1","type":"invoice.paid","amount":4200}`, nil)
	g.delivered(id)
	b := browser(t, g, 20*time.Second)
	b.do("opening the event's delivery",
		b.signIn(adminToken),
		visible(`#nav a[href="#/events"]`),
		click(`#nav a[href="#/events"]`),
		visible(`#events-result a[href="#/events/`+id+`"]`),
		click(`#events-result a[href="#/events/`+id+`"]`),
		visible(`#deliveries a`),
		click(`#deliveries a`),
		visible(`#attempts tbody tr`))
	if n := eval[int](b, `document.querySelectorAll('#attempts tbody tr').length`); n != 1 {
		t.Fatalf("attempts shown before the retry: %d, want 1", n)
	}
	b.do("retrying", click(`#retry`), visible(`#new-attempt`))
	msg := b.text(`#new-attempt`)
	if n := eval[int](b, `document.querySelectorAll('#attempts tbody tr').length`); n != 2 || !strings.Contains(msg, "#2") || !strings.Contains(msg, "200") {
		t.Fatalf("after the retry: %d attempts, message %q", n, msg)
	}
	b.do("replaying the event",
		b.hash("#/events/"+id),
		visible(`#replay`),
		click(`#replay`),
		visible(`#replay-result a[href^="#/deliveries/dlv_"]`))
	if s := b.text(`#replay-result`); !strings.Contains(s, "1 new delivery") {
		t.Fatalf("replay result: %q", s)
	}
	waitFor(t, 10*time.Second, "three requests at the receiver", func() bool { return g.received.Load() >= 3 })
}

// TestConsoleShowsAttackerTextLiterally: an event whose body, a header,
// its type and provider event ID and the receiver's answer hold markup
// and a javascript: URL is shown as text on every page; no script runs.
func TestConsoleShowsAttackerTextLiterally(t *testing.T) {
	const (
		script = `<script>window.__pwned=1</script>`
		img    = `<img src=x onerror="window.__pwned=1">`
		jsURL  = `javascript:window.__pwned=1`
	)
	g := startGateway(t, script+img+jsURL)
	body, _ := json.Marshal(map[string]string{"id": jsURL, "type": img, "note": script, "url": jsURL})
	id := g.ingest("demo", string(body), map[string]string{"X-Evil": script + img})
	g.delivered(id)
	b := browser(t, g, 20*time.Second)
	unharmed := func(page string) {
		t.Helper()
		type state struct {
			Pwned    string `json:"pwned"`
			Injected int    `json:"injected"`
			JSLinks  int    `json:"jsLinks"`
		}
		s := eval[state](b, `({
			pwned: typeof window.__pwned,
			injected: document.querySelectorAll('main script, main img, main iframe, [onerror]').length,
			jsLinks: Array.from(document.querySelectorAll('a')).filter(a => !a.getAttribute('href').startsWith('#')).length,
		})`)
		if s.Pwned != "undefined" || s.Injected != 0 || s.JSLinks != 0 {
			t.Fatalf("%s: window.__pwned %s, %d injected elements, %d links that are no hash route", page, s.Pwned, s.Injected, s.JSLinks)
		}
	}
	b.do("the events list", b.signIn(adminToken), visible(`#nav`),
		b.hash("#/events"), visible(`#events-result a[href="#/events/`+id+`"]`))
	unharmed("the events list")
	if s := b.text(`main`); !strings.Contains(s, img) || !strings.Contains(s, jsURL) {
		t.Fatalf("the events list does not show the type and event ID literally:\n%s", s)
	}
	b.do("the event page", b.hash("#/events/"+id), visible(`#body`), visible(`#deliveries a`))
	unharmed("the event page")
	pre, headers, typ := b.text(`#body`), b.text(`#headers`), b.text(`#event-type`)
	if !strings.Contains(pre, script) || !strings.Contains(pre, `"url": "`+jsURL+`"`) || !strings.Contains(headers, script+img) || typ != img {
		t.Fatalf("the event page: body %q, headers %q, type %q", pre, headers, typ)
	}
	b.do("the delivery page", click(`#deliveries a`), visible(`#attempts pre.excerpt`))
	unharmed("the delivery page")
	if s := b.text(`#attempts pre.excerpt`); s != script+img+jsURL {
		t.Fatalf("the response excerpt: %q", s)
	}
}

// TestConsoleTenantTokenSeesItsTenant: a token scoped to acme lists acme's
// event and not globex's, and globex's event page is not found.
func TestConsoleTenantTokenSeesItsTenant(t *testing.T) {
	g := startGateway(t, "ok")
	mine := g.ingest("demo", `{"id":"a1","type":"acme.thing"}`, nil)
	theirs := g.ingest("other", `{"id":"g1","type":"globex.thing"}`, nil)
	b := browser(t, g, 20*time.Second)
	b.do("the events list", b.signIn(acmeToken), visible(`#nav`),
		b.hash("#/events"), visible(`#events-result a[href="#/events/`+mine+`"]`))
	if s := b.text(`main`); strings.Contains(s, theirs) || strings.Contains(s, "globex") {
		t.Fatalf("acme's token sees globex's event:\n%s", s)
	}
	b.do("globex's event", b.hash("#/events/"+theirs), visible(`main .error`))
	if s := b.text(`main .error`); !strings.Contains(s, "Not found") {
		t.Fatalf("globex's event page for acme's token: %q", s)
	}
	b.do("the endpoints", b.hash("#/endpoints"), visible(`#endpoints table`))
	if s := b.text(`main`); !strings.Contains(s, "acme-sink") || strings.Contains(s, "globex") {
		t.Fatalf("acme's endpoints page:\n%s", s)
	}
}

// TestConsoleWrongToken: a token the gateway does not have gets the
// sign-in page back with a clear message, and nothing is kept.
func TestConsoleWrongToken(t *testing.T) {
	g := startGateway(t, "ok")
	b := browser(t, g, 20*time.Second)
	b.do("signing in with a wrong token", b.signIn("not-a-token-of-this-gateway-000"), visible(`#signin-message`))
	if msg, n := b.text(`#signin-message`), eval[int](b, `sessionStorage.length`); !strings.Contains(msg, "That token was not accepted") || n != 0 {
		t.Fatalf("message %q, %d items in sessionStorage", msg, n)
	}
	// Signed in, a token that stops working (here: replaced in storage)
	// returns to sign-in with the same message.
	b.do("a token that stops working", b.signIn(adminToken), visible(`#nav`),
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Run(ctx, chromedp.Evaluate[any](`sessionStorage.setItem('hookgate.token', 'revoked-token-0000000000000000')`))
			return err
		}),
		b.hash("#/sources"), visible(`#signin-message`))
	if msg := b.text(`#signin-message`); !strings.Contains(msg, "That token was not accepted") {
		t.Fatalf("message after a revoked token: %q", msg)
	}
}

// TestConsoleScreenshots takes a full-page screenshot of every page (see
// screenshot for where they go) and checks each page renders its content.
func TestConsoleScreenshots(t *testing.T) {
	g := startGateway(t, `{"received":true}`)
	var id string
	for i, typ := range []string{"invoice.created", "invoice.paid", "customer.updated", "invoice.finalized", "charge.succeeded"} {
		id = g.ingest("demo", fmt.Sprintf(`{"id":"evt_%d","type":%q,"data":{"object":{"id":"in_%d","amount_due":%d,"currency":"eur","customer":"cus_42"}}}`, 1000+i, typ, 77+i, 1200*(i+1)),
			map[string]string{"User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)", "Stripe-Signature": "t=1765000000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd"})
	}
	g.ingest("other", `{"id":"gx_1","type":"order.created"}`, nil)
	dlv := g.delivered(id)
	b := browser(t, g, 25*time.Second)
	b.do("signing in", chromedp.EmulateViewport(1280, 800), b.signIn(adminToken), visible(`#nav`))
	pages := []struct{ name, route, ready string }{
		{"overview", "#/", `#chart canvas`},
		{"events", "#/events", `#events-result table`},
		{"event", "#/events/" + id, `#deliveries table`},
		{"delivery", "#/deliveries/" + dlv, `#attempts table`},
		{"endpoints", "#/endpoints", `#endpoints table`},
		{"sources", "#/sources", `#sources table`},
		{"replays", "#/replays", `#my-replays p, #my-replays table`},
		{"signin", "#/signin", `#token`},
	}
	for _, p := range pages {
		if p.name == "signin" {
			b.do("signing out", click(`#signout`))
		}
		b.do(p.name, b.hash(p.route), visible(p.ready))
		if p.name == "endpoints" { // its stats cells fill in after the table
			b.do("endpoint stats", chromedp.Poll[chromedp.Void](`!document.querySelector('#endpoints').textContent.includes('…')`, chromedp.WithPollingTimeout(5*time.Second)))
		}
		b.screenshot(p.name)
	}
}

// TestConsoleFiltersEndpointsAndReplays: the events filter by provider
// event ID; disable, enable and rotate an endpoint's secret (shown once,
// never stored); start a bulk replay and see it complete.
func TestConsoleFiltersEndpointsAndReplays(t *testing.T) {
	g := startGateway(t, "ok")
	first := g.ingest("demo", `{"id":"needle","type":"invoice.paid"}`, nil)
	other := g.ingest("demo", `{"id":"hay","type":"invoice.paid"}`, nil)
	g.delivered(first)
	g.delivered(other)
	b := browser(t, g, 20*time.Second)
	b.do("filtering by provider event ID", b.signIn(adminToken), visible(`#nav`),
		b.hash("#/events"), visible(`#f-event_id`),
		chromedp.SendKeys(chromedp.CSS(`#f-event_id`), "needle"),
		click(`form.filters button[type=submit]`),
		visible(`#events-result a[href="#/events/`+first+`"]`))
	if s := b.text(`#events-result`); strings.Contains(s, other) {
		t.Fatalf("the filter event_id=needle lists %s too:\n%s", other, s)
	}
	if h := eval[string](b, `location.hash`); h != "#/events?event_id=needle" {
		t.Fatalf("the filter's route: %q", h)
	}
	b.do("a window with no events", b.hash("#/events?since=2099-01-02T03:04:00.000Z"), visible(`#events-result p:not(.loading)`))
	if s, since := b.text(`#events-result`), eval[string](b, `document.querySelector('#f-since').value`); s != "No events match." || !strings.HasPrefix(since, "2099-01-0") {
		t.Fatalf("since 2099: %q, the form's since %q", s, since)
	}
	for i := range 50 {
		g.ingest("demo", fmt.Sprintf(`{"id":"page_%d","type":"invoice.paid"}`, i), nil)
	}
	rows := `document.querySelectorAll('#events-result tbody tr').length`
	b.do("the first page", b.hash("#/events"), visible(`#next-page`))
	if n := eval[int](b, rows); n != 50 {
		t.Fatalf("the first page has %d rows, want 50", n)
	}
	b.do("the next page", click(`#next-page`), visible(`#events-result a[href="#/events/`+first+`"]`))
	if n := eval[int](b, rows); n != 2 {
		t.Fatalf("the second page has %d rows, want 2", n)
	}

	row := `#endpoints tr:has(td:first-child:is(.mono))`
	b.do("disabling acme-sink", b.hash("#/endpoints"), visible(`#endpoints table`),
		click(row+` button`), // the first button of the first row: Disable
		chromedp.Poll[chromedp.Void](`document.querySelector('#endpoints tbody tr').textContent.includes('disabled')`, chromedp.WithPollingTimeout(5*time.Second)))
	var ep struct {
		Disabled bool   `json:"disabled"`
		Secret   string `json:"secret"`
	}
	if g.api("/endpoints/acme-sink", &ep); !ep.Disabled {
		t.Fatal("Disable did not disable acme-sink")
	}
	b.do("enabling acme-sink", click(row+` button`),
		chromedp.Poll[chromedp.Void](`document.querySelector('#endpoints tbody tr').textContent.includes('enabled')`, chromedp.WithPollingTimeout(5*time.Second)))
	old := ep.Secret
	if g.api("/endpoints/acme-sink", &ep); ep.Disabled {
		t.Fatal("Enable did not enable acme-sink")
	}
	b.do("rotating acme-sink's secret", click(row+` button + button`), visible(`#new-secret`))
	shown := b.text(`#new-secret`)
	g.api("/endpoints/acme-sink", &ep)
	if shown == "" || shown == old || shown != ep.Secret {
		t.Fatalf("the secret shown %q, the endpoint's %q, the old one %q", shown, ep.Secret, old)
	}
	if stored := eval[string](b, `JSON.stringify(sessionStorage)`); strings.Contains(stored, shown) {
		t.Fatal("the new secret is in sessionStorage")
	}
	b.do("hiding the secret", click(`#secret-box button.primary`), chromedp.WaitNotPresent(chromedp.CSS(`#new-secret`)))

	b.do("a bulk replay", b.hash("#/replays"), visible(`#r-source`),
		chromedp.SendKeys(chromedp.CSS(`#r-source`), "demo"),
		click(`form.filters button[type=submit]`),
		visible(`#my-replays table`),
		chromedp.Poll[chromedp.Void](`document.querySelector('#my-replays tbody tr').textContent.includes('completed')`, chromedp.WithPollingTimeout(10*time.Second)))
	if s := b.text(`#my-replays tbody tr`); !strings.Contains(s, "rpl_") || !strings.Contains(s, "source=demo") {
		t.Fatalf("the replay job's row: %q", s)
	}
	if s := b.text(`#all-replays`); !strings.Contains(s, "Recent jobs") {
		t.Fatalf("GET /replays not shown: %q", s)
	}
}
