package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"hookgate/gateway/config"
	"hookgate/internal/testsupport"
	"hookgate/storage"
)

// Bad input: malformed HTTP sent over raw connections to the real
// listeners. Each request gets a clear 4xx (or, for a body that is
// complete and merely unusual, a 202 with the body stored byte for byte),
// never a crash, and never a stored partial event.

// startCustom runs a gateway like startGateway does, on the config that
// yaml returns for a fresh storage directory, calling tune (when not
// nil) between New and Start: the place to shorten a listener's timeouts.
func startCustom(t *testing.T, yaml func(dir string) string, tune func(*Gateway)) *gw {
	t.Helper()
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(yaml(dir)), "custom.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	g, err := New(context.Background(), cfg, Options{
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Grace: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(g)
	}
	if err := g.Start(context.Background()); err != nil {
		_ = g.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Shutdown() })
	return &gw{Gateway: g, t: t, dir: dir, logs: logs}
}

// withTestConfig is testConfig with extra YAML, for startCustom.
func withTestConfig(extra string) func(dir string) string {
	return func(dir string) string { return fmt.Sprintf(testConfig, dir, "72h", testSecret, extra) }
}

// rawAnswer is what a raw exchange got back.
type rawAnswer struct {
	status int // 0 = the connection ended without an answer
	header http.Header
	body   []byte
}

// rawExchange writes raw on a fresh connection to addr, half-closes it
// (the client has nothing more to say) and reads one answer.
func rawExchange(t *testing.T, addr, raw string) rawAnswer {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	return readAnswer(t, conn)
}

func readAnswer(t *testing.T, conn net.Conn) rawAnswer {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return rawAnswer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rawAnswer{status: resp.StatusCode, header: resp.Header, body: b}
}

// wantNoEvents asserts that nothing was stored: no event, no delivery.
func wantNoEvents(t *testing.T, g *gw, what string) {
	t.Helper()
	if evs := eventsIn(t, g.Store()); len(evs) != 0 {
		t.Fatalf("%s: %d events stored, e.g. body %q", what, len(evs), evs[0].Body)
	}
	if ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{}); err != nil || len(ds) != 0 {
		t.Fatalf("%s: %d deliveries stored (%v)", what, len(ds), err)
	}
}

// rawPost builds a raw POST /ingest/open with the given headers and body.
func rawPost(headers, body string) string {
	return "POST /ingest/open HTTP/1.1\r\nHost: hookgate\r\n" + headers + "\r\n" + body
}

// TestBadInputMalformedRequests: garbage request lines, broken framing,
// oversized heads and over-long chunked bodies, on both listeners. Each
// gets a 4xx (a problem+json one wherever the gateway writes the answer;
// fasthttp itself answers an HTTP/2 preface), nothing is stored, and the
// gateway keeps serving.
func TestBadInputMalformedRequests(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q}\n", rcv.url("ep"))})
	cases := []struct {
		name, raw string
		want      int // 0 = any 4xx
	}{
		{"garbage request line", "GARBAGE\r\n\r\n", 400},
		{"method only", "POST\r\n\r\n", 400},
		{"binary", "\x00\x01\x02\xff\xfe\r\n\r\n", 400},
		{"http2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400},
		{"header without colon", rawPost("Bad Header\r\nContent-Length: 2\r\n", "{}"), 400},
		{"space before colon", "POST /ingest/open HTTP/1.1\r\nHost : x\r\nContent-Length: 2\r\n\r\n{}", 400},
		{"negative length", rawPost("Content-Length: -1\r\n", ""), 400},
		{"non-numeric length", rawPost("Content-Length: abc\r\n", "{}"), 400},
		{"two lengths", rawPost("Content-Length: 2\r\nContent-Length: 3\r\n", "{}"), 400},
		{"unknown transfer coding", rawPost("Transfer-Encoding: gzip\r\n", "{}"), 400},
		{"bad chunk size", rawPost("Transfer-Encoding: chunked\r\n", "zz\r\n{}\r\n0\r\n\r\n"), 400},
		{"truncated chunk", rawPost("Transfer-Encoding: chunked\r\n", "10\r\n{\"id\":\"tr"), 400},
		{"length larger than the body", rawPost("Content-Length: 100\r\n", `{"id":"short"}`), 400},
		{"huge header", rawPost("X-Pad: "+strings.Repeat("a", 64<<10)+"\r\nContent-Length: 2\r\n", "{}"), 431},
		{"many headers", rawPost(strings.Repeat("X-A: b\r\n", 3000)+"Content-Length: 2\r\n", "{}"), 431},
		{"huge request line", "POST /ingest/" + strings.Repeat("a", 100<<10) + " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 431},
		{"bad percent-encoding", "POST /ingest/%zz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 404},
		{"NUL in path", "POST /ingest/op\x00en HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 404},
		{"chunked over max_body", rawPost("Transfer-Encoding: chunked\r\n",
			strings.Repeat("400\r\n"+strings.Repeat("a", 1024)+"\r\n", 8)+"0\r\n\r\n"), 413},
		{"length over max_body", rawPost("Content-Length: 8192\r\n", strings.Repeat("a", 8192)), 413},
	}
	for _, addr := range []struct{ name, addr string }{{"public", g.PublicAddr()}, {"admin", g.AdminAddr()}} {
		for _, c := range cases {
			raw := c.raw
			if addr.name == "admin" {
				raw = strings.Replace(raw, "/ingest/open", "/api/v1/events", 1)
			}
			a := rawExchange(t, addr.addr, raw)
			want := c.want
			if addr.name == "admin" && want == 413 {
				want = 401 // the admin body limit is larger; the request is refused for its missing token
			}
			if a.status < 400 || a.status > 499 || (want != 0 && a.status != want) {
				t.Errorf("%s %s: %d %s, want %d", addr.name, c.name, a.status, a.body, want)
				continue
			}
			if c.name != "http2 preface" {
				if p := decodeProblem(t, a.header, a.body); p.Status != a.status {
					t.Errorf("%s %s: problem %+v", addr.name, c.name, p)
				}
			}
		}
	}
	wantNoEvents(t, g, "after malformed requests")

	// Still serving, on a connection of its own.
	if st, _, b := g.post("open", []byte(`{"id":"after-garbage"}`), nil); st != 202 {
		t.Fatalf("after the garbage: %d %s", st, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() == 1 })
	if evs := eventsIn(t, g.Store()); len(evs) != 1 {
		t.Fatalf("%d events, want only the valid one", len(evs))
	}
}

// TestBadInputNoRequestSmuggling: a request with both Content-Length and
// Transfer-Encoding is refused, or read as chunked and its connection
// closed (RFC 9112 section 6.1: the server MUST close it): the bytes after
// the chunked body, which a proxy honouring Content-Length sent as part of
// the same request, must never become a second event.
func TestBadInputNoRequestSmuggling(t *testing.T) {
	g := startGateway(t, gwOptions{})
	smuggled := rawPost("Content-Length: 17\r\n", `{"id":"smuggled"}`)
	chunk := `{"id":"outer"}`
	body := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(chunk), chunk)
	raw := rawPost(fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n", len(body)+len(smuggled)), body+smuggled)
	a := rawExchange(t, g.PublicAddr(), raw)
	var got []string
	for _, e := range eventsIn(t, g.Store()) {
		got = append(got, string(e.Body))
	}
	switch {
	case a.status == 400 && len(got) == 0:
	case a.status == 202 && len(got) == 1 && got[0] == chunk:
	default:
		t.Fatalf("CL+TE: answered %d %s, stored %q; want 400 and nothing, or 202 and only the chunked body", a.status, a.body, got)
	}
}

// TestBadInputSlowClient: a client that trickles its headers or its body
// (slowloris) is cut off by the listener's read timeout, which bounds the
// whole request, not each read. The product's timeout is 30s; the test
// shortens it on the real listener to 300ms. The handler never sees the
// partial body: nothing is stored.
func TestBadInputSlowClient(t *testing.T) {
	const timeout = 300 * time.Millisecond
	g := startCustom(t, withTestConfig(""), func(g *Gateway) { g.public.Server().ReadTimeout = timeout })
	body := `{"id":"slow","type":"t"}`
	for _, tc := range []struct{ name, head, trickle string }{
		{"body", rawPost(fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", len(body)), ""), body},
		{"headers", "", rawPost(fmt.Sprintf("Content-Length: %d\r\n", len(body)), body)},
	} {
		conn, err := net.Dial("tcp", g.PublicAddr())
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		_, _ = io.WriteString(conn, tc.head)
		// One byte per 50ms: the whole request would take far longer than
		// the timeout. Stop when the server hangs up.
		for i := 0; i < len(tc.trickle); i++ {
			if _, err := conn.Write([]byte{tc.trickle[i]}); err != nil {
				break
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s: still writing after 5s: no timeout", tc.name)
			}
			time.Sleep(50 * time.Millisecond) // the trickle's pace, not a wait for a result
		}
		a := readAnswer(t, conn)
		elapsed := time.Since(start)
		_ = conn.Close()
		if a.status != 0 && a.status != http.StatusRequestTimeout && a.status != http.StatusBadRequest {
			t.Fatalf("slow %s: %d %s; want the connection closed, 408 or 400", tc.name, a.status, a.body)
		}
		if a.status == 202 || elapsed > 3*time.Second {
			t.Fatalf("slow %s: answered %d after %s", tc.name, a.status, elapsed)
		}
		wantNoEvents(t, g, "slow "+tc.name)
	}
}

// TestBadInputBodiesStoredByteForByte: bodies that are not what a JSON
// webhook looks like are still webhooks. A body with invalid UTF-8 is
// stored and forwarded byte for byte with its Content-Type, and the admin
// API shows it as body_base64 (no body field); a request without a
// Content-Type is stored and forwarded without one; an event ID with
// invalid UTF-8 still gets a valid JSON answer.
func TestBadInputBodiesStoredByteForByte(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q}\n", rcv.url("ep"))})
	binary := []byte("\xff\xfe\x00 not utf-8 \xc3\x28 {\"id\":\"x\"} \x80\r\n")
	cases := []struct {
		name, contentType string
		body              []byte
		idemKey           string
	}{
		{"invalid utf-8", "application/octet-stream", binary, "bin-1"},
		{"invalid utf-8 in json", "application/json", []byte("{\"id\":\"utf\",\"name\":\"caf\xe9\"}"), ""},
		{"no content type", "", []byte(`{"id":"no-ct"}`), ""},
		{"empty body", "text/plain", []byte{}, "empty-1"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(http.MethodPost, "http://"+g.PublicAddr()+"/ingest/open", bytes.NewReader(c.body))
		if c.contentType != "" {
			req.Header.Set("Content-Type", c.contentType)
		}
		if c.idemKey != "" {
			req.Header.Set("Idempotency-Key", c.idemKey)
		}
		st, _, b := do(t, req)
		if st != 202 || !json.Valid(b) {
			t.Fatalf("%s: %d %s", c.name, st, b)
		}
		id := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
		ev, err := g.Store().GetEvent(context.Background(), id)
		if err != nil || !bytes.Equal(ev.Body, c.body) || ev.ContentType != c.contentType {
			t.Fatalf("%s: stored %q (%q), %v; want %q (%q)", c.name, ev.Body, ev.ContentType, err, c.body, c.contentType)
		}
		_, _, vb := g.api("GET", "/events/"+id, opToken, nil)
		view := must[map[string]json.RawMessage](t, 200)(g.api("GET", "/events/"+id, opToken, nil))
		_, hasBody := view["body"]
		if utf8.Valid(c.body) {
			var s string
			if err := json.Unmarshal(view["body"], &s); err != nil || s != string(c.body) || view["body_base64"] != nil {
				t.Fatalf("%s: admin shows %s", c.name, vb)
			}
		} else {
			var s string
			if err := json.Unmarshal(view["body_base64"], &s); err != nil || s != base64.StdEncoding.EncodeToString(c.body) || hasBody {
				t.Fatalf("%s: admin shows %s; want body_base64 and no body", c.name, vb)
			}
		}
	}
	testsupport.WaitFor(t, 10*time.Second, "every delivery", func() bool { return rcv.count() == len(cases) })
	for _, r := range rcv.all() {
		found := false
		for _, c := range cases {
			if bytes.Equal(r.body, c.body) && r.header.Get("Content-Type") == c.contentType {
				found = true
			}
		}
		if !found {
			t.Fatalf("receiver got %q with Content-Type %q: not one of the bodies sent, byte for byte", r.body, r.header.Get("Content-Type"))
		}
	}

}

// TestBadInputNonUTF8EventID: an event ID taken from a header (here the
// Idempotency-Key fallback) with bytes that are not UTF-8 still gets a
// 202 whose body is valid JSON (RFC 8259 requires UTF-8), the same on a
// retry.
func TestBadInputNonUTF8EventID(t *testing.T) {
	g := startGateway(t, gwOptions{})
	hdr := map[string]string{"Idempotency-Key": "key-\xff\xfe"}
	st, _, first := g.post("open", []byte("not json"), hdr)
	if st != 202 || !json.Valid(first) || !utf8.Valid(first) {
		t.Fatalf("non-UTF-8 event id: %d %q; want 202 with valid UTF-8 JSON", st, first)
	}
	if st, _, again := g.post("open", []byte("not json"), hdr); st != 202 || !bytes.Equal(again, first) {
		t.Fatalf("retry: %d %q, want %q", st, again, first)
	}
}

// A Content-Length sent more than once is 400 on both listeners, and the
// connection closed (RFC 9112 section 6.3). fasthttp keeps the last value:
// when it matched the body the request was accepted, and when the first
// one did, the tail of the body was read as a second request on the same
// connection (smuggling past a proxy that honours the first value).
func TestConflictingContentLengthsAreRefused(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for _, c := range []struct {
		name   string
		header func(n int) string // the Content-Length lines for a body of n bytes
	}{
		{"short first, body's length last", func(n int) string { return fmt.Sprintf("Content-Length: 3\r\nContent-Length: %d\r\n", n) }},
		{"body's length first, short last", func(n int) string { return fmt.Sprintf("Content-Length: %d\r\nContent-Length: 3\r\n", n) }},
	} {
		for _, addr := range []struct{ name, addr string }{{"public", g.PublicAddr()}, {"admin", g.AdminAddr()}} {
			body := `{"id":"conflicting-lengths"}`
			raw := rawPost(c.header(len(body)), body)
			if addr.name == "admin" {
				body = `{"source":"open","payload":{"id":"conflicting-lengths-admin"}}`
				raw = "POST /api/v1/events HTTP/1.1\r\nHost: hookgate\r\nAuthorization: Bearer operator-token\r\n" +
					c.header(len(body)) + "\r\n" + body
			}
			a := rawExchange(t, addr.addr, raw)
			if a.status != 400 {
				t.Errorf("%s, %s: answered %d %s, want 400 (conflicting Content-Length values)", addr.name, c.name, a.status, a.body)
			}
		}
	}
	wantNoEvents(t, g, "after requests with conflicting Content-Length values")
}
