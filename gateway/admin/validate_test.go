package admin

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"hookgate/gateway/config"
)

// FuzzEndpointURL: config.yaml and the admin API accept the same endpoint
// URLs, and a URL they accept is one the delivery client can send to: a
// POST built as the sender builds it, through a transport that dials a
// local receiver whatever the host, gets the receiver's 200. (The
// alternative is an endpoint answered 201 whose every delivery fails.)
// outbound.BlockedURL's verdict on a literal address is the dial guard's.
func FuzzEndpointURL(f *testing.F) {
	for _, s := range []string{"https://billing.example.com/hooks", "http://127.0.0.1:9/x?token=abc", "http://[::1]:80/",
		"http://[fe80::1%25eth0]/", "https://h:65536/", "http://h:0/", "http://a b/", "http://%41/", "http://h/%zz",
		"HTTP://H/", "http:///x", "http://user:pw@h/", "http://h/#frag", "http://h?x", "http://h:/", "https://xn--nxasmq6b.com/",
		"http://[::ffff:127.0.0.1]/", "http://0x7f000001/", "http://h\u3002com/", "http://-h-/", "http://h_/",
		"http://xn--т"} { // the last was accepted, and net/http refuses to send to it
		f.Add(s)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	plain := httptest.NewServer(handler)
	f.Cleanup(plain.Close)
	secure := httptest.NewTLSServer(handler)
	f.Cleanup(secure.Close)
	client := &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", plain.Listener.Addr().String())
			},
			DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", secure.Listener.Addr().String())
				if err != nil {
					return nil, err
				}
				tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
				return tc, tc.HandshakeContext(ctx)
			},
			DisableKeepAlives: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       10 * time.Second,
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if !utf8.ValidString(raw) {
			return // JSON and YAML decode to valid UTF-8: no endpoint URL is anything else
		}
		apiErr := checkURL(raw)
		// config.yaml's rule for an endpoint's url (config's decoder.url).
		cfgProblem := config.URLProblem(raw)
		if raw == "" {
			cfgProblem = "required"
		}
		if (apiErr == nil) != (cfgProblem == "") {
			t.Fatalf("%q: admin API says %v, config.yaml says %q", raw, apiErr, cfgProblem)
		}
		if apiErr != nil {
			return
		}
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, raw, strings.NewReader(`{"id":"evt_1"}`))
		if err != nil {
			t.Fatalf("%q accepted as an endpoint URL, but the sender cannot build a request: %v", raw, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%q accepted as an endpoint URL, but every delivery fails: %v", raw, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%q: the receiver answered %d", raw, resp.StatusCode)
		}
	})
}
