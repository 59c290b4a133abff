package gateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/gateway/config"
	"hookgate/storage"
)

// testSecret is the standard-webhooks secret of the test source "sw".
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// testConfig is a config with a verified source, an unsigned one, and
// room for endpoints; %s is replaced by extra YAML (endpoints, overrides).
const testConfig = `
server: {listen: "127.0.0.1:0", max_body: 4KiB}
admin:
  listen: "127.0.0.1:0"
  tokens:
    - {token: operator-token}
    - {token: acme-token, tenant: acme}
storage: {path: %q}
dedupe: {ttl: %s}
delivery:
  allow_private_targets: true
  timeout: 2s
  retry: {initial_interval: 20ms, max_interval: 100ms, multiplier: 2, max_attempts: 5, max_elapsed: 1m}
sources:
  - id: sw
    tenant: acme
    verify: {scheme: standard-webhooks, secrets: [%q]}
  - id: open
    tenant: acme
    verify: {scheme: none}
    event_id: json:/id
    event_type: json:/type
  - id: other
    tenant: globex
    verify: {scheme: none}
%s`

// gw is a gateway under test, with helpers to talk to it.
type gw struct {
	*Gateway
	t    *testing.T
	dir  string
	logs *syncBuffer
}

type gwOptions struct {
	dir       string
	ttl       string
	extra     string
	wrapStore func(storage.Store) storage.Store
	grace     time.Duration // shutdown grace period (default 5s)
	// postgres runs the gateway on Postgres whatever the test engine: a
	// gateway that shares its dir (its schema) with another shares its
	// data, as several gateways on one database do.
	postgres bool
	// config changes the parsed config, past its validation: values a
	// config file may not have but a test needs (a retention of seconds).
	config func(*config.Config)
	// poll is the dispatcher's idle poll (Options.DeliveryPoll).
	poll time.Duration
}

// startGateway runs a gateway on loopback ports with a Badger store in a
// temp dir (or opts.dir, for restarts), stopped at the end of the test.
func startGateway(t *testing.T, o gwOptions) *gw {
	t.Helper()
	h, err := tryStartGateway(t, o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// tryStartGateway is startGateway for a start that may be refused: it
// returns New's error.
func tryStartGateway(t *testing.T, o gwOptions) (*gw, error) {
	t.Helper()
	if o.dir == "" {
		o.dir = t.TempDir()
	}
	if o.ttl == "" {
		o.ttl = "72h"
	}
	yml := onEngine(t, fmt.Sprintf(testConfig, o.dir, o.ttl, testSecret, o.extra), o.dir, o.postgres)
	cfg, err := config.Parse([]byte(yml), "test.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.config != nil {
		o.config(cfg)
	}
	logs := &syncBuffer{}
	opts := Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Grace: cmp.Or(o.grace, 5*time.Second), DeliveryPoll: o.poll}
	if o.wrapStore != nil {
		g0, err := openStore(context.Background(), cfg, opts.Logger)
		if err != nil {
			t.Fatal(err)
		}
		opts.Store = o.wrapStore(g0)
	}
	g, err := New(context.Background(), cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := &gw{Gateway: g, t: t, dir: o.dir, logs: logs}
	t.Cleanup(func() { _ = g.Shutdown() })
	return h, nil
}

// restart stops the gateway and starts a new one on the same data.
func (h *gw) restart(o gwOptions) *gw {
	h.t.Helper()
	if err := h.Shutdown(); err != nil {
		h.t.Fatal(err)
	}
	o.dir = h.dir
	return startGateway(h.t, o)
}

// post sends body to /ingest/{source} with headers, and returns status,
// headers and body.
func (h *gw) post(source string, body []byte, hdr map[string]string) (int, http.Header, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+h.PublicAddr()+"/ingest/"+source, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return do(h.t, req)
}

func do(t *testing.T, req *http.Request) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// signSW signs body as a Standard Webhooks sender would, computed here with
// crypto/hmac independently of the gateway's code.
func signSW(id string, ts time.Time, body []byte) map[string]string {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(testSecret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.%s", id, ts.Unix(), body)
	return map[string]string{
		"webhook-id":        id,
		"webhook-timestamp": fmt.Sprint(ts.Unix()),
		"webhook-signature": "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)),
	}
}

// syncBuffer collects logs from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newIdleGateway is a gateway on testConfig with extra, not started (no
// listener, no dispatcher): fuzz targets call its apps directly.
func newIdleGateway(tb testing.TB, extra string) *Gateway {
	tb.Helper()
	cfg, err := config.Parse(fmt.Appendf(nil, testConfig, tb.TempDir(), "72h", testSecret, extra), "fuzz.yaml", nil)
	if err != nil {
		tb.Fatal(err)
	}
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = g.Shutdown() })
	return g
}

// untilStopped starts n load workers, counted in wg. Worker w calls
// step(w, i) for i = 0, 1, 2, ... until stop is closed or step returns
// false.
func untilStopped(wg *sync.WaitGroup, stop <-chan struct{}, n int, step func(w, i int) bool) {
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if !step(w, i) {
					return
				}
			}
		}()
	}
}
