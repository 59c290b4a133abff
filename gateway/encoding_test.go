package gateway

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"hookgate/gateway/admin"
)

// Fiber's Ctx.Body() inflates gzip, deflate and br bodies, without a
// limit and before the signature check, and returns the decoder's error
// text when that fails. In an earlier version, ingest used it: a 2 KiB gzip
// request (max_body 4 KiB here) was stored as a 2 MiB event, and two
// different non-gzip bodies sent as gzip were both stored as
// "gzip: invalid header", so the second was answered as a replay of the
// first and dropped. Compressed bodies are now refused with 415 before
// anything is read or stored, on both listeners; identity is accepted and
// the raw bytes are stored.
func TestCompressedBodiesAreRefused(t *testing.T) {
	g := startGateway(t, gwOptions{})
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	fmt.Fprintf(zw, `{"id":"bomb-1","type":"x","pad":"%s"}`, strings.Repeat("a", 2<<20))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, encoding string
		body           []byte
	}{
		{"gzip bomb", "gzip", zb.Bytes()},
		{"not really gzip", "gzip", []byte(`order 1: ship 10 widgets`)},
		{"deflate", "deflate", []byte(`order 2`)},
		{"br", " BR ", []byte(`order 3`)},
		{"two codings", "identity, gzip", []byte(`order 4`)},
	} {
		p := wantProblem(t, tc.name, 415, "-")(
			g.post("open", tc.body, map[string]string{"Content-Encoding": tc.encoding}))
		if !strings.HasSuffix(p.Type, "/unsupported-content-encoding") {
			t.Fatalf("%s: problem type %q", tc.name, p.Type)
		}
	}
	if evs := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events", opToken, nil)); len(evs.Data) != 0 {
		t.Fatalf("%d events stored from refused requests", len(evs.Data))
	}

	raw := []byte(`{"id":"plain-1","type":"x"}`)
	st, _, b := g.post("open", raw, map[string]string{"Content-Encoding": "Identity"})
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	if got := storedBody(t, g, evt); !bytes.Equal(got, raw) {
		t.Fatalf("stored body %q, sent %q", got, raw)
	}

	var ep bytes.Buffer
	zw = gzip.NewWriter(&ep)
	fmt.Fprint(zw, `{"url":"https://example.com/hook"}`)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, "admin POST", 415, "-")(
		g.api("POST", "/endpoints", opToken, ep.Bytes(), "Content-Encoding", "gzip"))
}

// storedBody returns the raw body of an event as the admin API shows it
// (body, or body_base64 for non-UTF-8 bodies).
func storedBody(t *testing.T, g *gw, evt string) []byte {
	t.Helper()
	ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+evt, opToken, nil))
	if ev.Body != nil {
		return []byte(*ev.Body)
	}
	b, err := base64.StdEncoding.DecodeString(ev.BodyBase64)
	if err != nil {
		t.Fatalf("body_base64 %q: %v", ev.BodyBase64, err)
	}
	return b
}

// Errors Fiber raises before any handler (no route, wrong method) are
// problem+json too, with every field SPEC 3 names, detail included, and
// without echoing the request's path.
func TestRouteErrorsAreCompleteProblems(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for _, tc := range []struct {
		what   string
		status int
		call   func() (int, http.Header, []byte)
	}{
		{"unknown admin route", 404, func() (int, http.Header, []byte) {
			return g.api("GET", "/no-such-thing-xyz", opToken, nil)
		}},
		{"wrong method on ingest", 405, func() (int, http.Header, []byte) {
			resp, err := http.Get("http://" + g.PublicAddr() + "/ingest/open")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, resp.Header, b
		}},
	} {
		st, hdr, b := tc.call()
		p := wantProblem(t, tc.what, tc.status, "-")(st, hdr, b)
		if p.Detail == "" {
			t.Errorf("%s: problem without detail: %s", tc.what, b)
		}
		if strings.Contains(string(b), "no-such-thing-xyz") || strings.Contains(string(b), "/ingest/open") {
			t.Errorf("%s: problem echoes the path: %s", tc.what, b)
		}
	}
}
