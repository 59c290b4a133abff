package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestUnknownMethodIsAProblem: SPEC section 3 says errors, on both
// listeners, are application/problem+json. A request whose method Fiber
// does not know (a lower-case "post", a WebDAV or made-up method) was
// answered by Fiber's router itself, before any middleware or the error
// handler: 400 text/plain "Invalid http method". It is a problem (400).
func TestUnknownMethodIsAProblem(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for _, l := range []struct{ name, addr, path string }{
		{"public", g.PublicAddr(), "/ingest/open"},
		{"admin", g.AdminAddr(), "/api/v1/events"},
	} {
		for _, method := range []string{"post", "PROPFIND", "FOO"} {
			raw := method + " " + l.path + " HTTP/1.1\r\nHost: hookgate\r\nContent-Length: 2\r\n\r\n{}"
			a := rawExchange(t, l.addr, raw)
			if a.status != 400 && a.status != 501 {
				t.Errorf("%s %s: answered %d, want 400 or 501", l.name, method, a.status)
				continue
			}
			if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
				t.Errorf("%s %s: answered %d %s %q, want a problem+json", l.name, method, a.status, ct, a.body)
				continue
			}
			if p := decodeProblem(t, a.header, a.body); p.Status != a.status || p.Detail == "" {
				t.Errorf("%s %s: problem %+v", l.name, method, p)
			}
		}
	}
	wantNoEvents(t, g, "after requests with unknown methods")
}

// TestPipelinedRequestsWithErrorsStayInStep: several requests written at
// once on one connection, some refused (415, 405, 404, 401), one a resend,
// one with Expect: 100-continue whose body follows at once, then HTTP/1.0
// keep-alive requests on a connection of their own: each gets its own
// answer, in order, and each event is stored exactly once.
func TestPipelinedRequestsWithErrorsStayInStep(t *testing.T) {
	g := startGateway(t, gwOptions{})
	raw := pipelinedPost("pl-a", "") +
		pipelinedPost("pl-gz", "Content-Encoding: gzip\r\n") +
		"GET /ingest/open HTTP/1.1\r\nHost: x\r\n\r\n" +
		"POST /ingest/no-such-source HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" +
		"POST /ingest/sw HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" +
		pipelinedPost("pl-a", "") +
		pipelinedPost("pl-exp", "Expect: 100-continue\r\n") +
		pipelinedPost("pl-b", "")
	got := pipelineAnswers(t, g.PublicAddr(), raw, 8)
	want := []string{"202 pl-a", "415", "405", "404", "401", "202 pl-a", "202 pl-exp", "202 pl-b"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("pipelined answers:\n got %q\nwant %q", got, want)
	}
	h10 := func(id string) string {
		return strings.Replace(pipelinedPost(id, "Connection: keep-alive\r\n"), "HTTP/1.1", "HTTP/1.0", 1)
	}
	if got := pipelineAnswers(t, g.PublicAddr(), h10("pl-10a")+h10("pl-10b"), 2); strings.Join(got, "|") != "202 pl-10a|202 pl-10b" {
		t.Fatalf("HTTP/1.0 keep-alive: %q", got)
	}
	count := map[string]int{}
	for _, e := range eventsIn(t, g.Store()) {
		count[e.EventID]++
	}
	for _, id := range []string{"pl-a", "pl-exp", "pl-b", "pl-10a", "pl-10b"} {
		if count[id] != 1 {
			t.Errorf("event %s stored %d times, want once (all: %v)", id, count[id], count)
		}
	}
	if len(count) != 5 {
		t.Errorf("stored events %v, want exactly the five accepted", count)
	}
}

// pipelineAnswers writes raw at once and reads up to n final answers
// (skipping 100 Continue), each as "status" or "status event_id" for a
// 2xx; refused answers must be problem+json.
func pipelineAnswers(t *testing.T, addr, raw string, n int) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []string
	for len(out) < n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Logf("after %d answers: %v", len(out), err)
			break
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == 100:
			continue
		case resp.StatusCode/100 == 2:
			out = append(out, resp.Status[:3]+" "+must[jsonMap](t, resp.StatusCode)(resp.StatusCode, nil, b)["event_id"].(string))
		default:
			if p := decodeProblem(t, resp.Header, b); p.Status != resp.StatusCode {
				t.Errorf("answer %d: problem %+v", len(out)+1, p)
			}
			out = append(out, resp.Status[:3])
		}
	}
	return out
}

// TestEventViewWithRawHeaderBytesIsValidJSON: header values and names with
// bytes that are not UTF-8, and control bytes, are stored with the event;
// GET /events/{id} and GET /events still answer valid UTF-8 JSON (RFC
// 8259). (The view
// shows such bytes as U+FFFD.)
func TestEventViewWithRawHeaderBytesIsValidJSON(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := `{"id":"raw-header-bytes"}`
	raw := rawPost("X-Latin1: caf\xe9 \xff\xfe\r\nX-\xffName: v\r\nX-Ctl: a\x01b\x7fc\tz\r\nContent-Length: "+itoa(len(body))+"\r\n", body)
	a := rawExchange(t, g.PublicAddr(), raw)
	if a.status != 202 {
		t.Fatalf("ingest: %d %s", a.status, a.body)
	}
	id := must[jsonMap](t, 202)(a.status, nil, a.body)["id"].(string)
	for _, path := range []string{"/events/" + id, "/events?source=open"} {
		st, _, b := g.api("GET", path, opToken, nil)
		if st != 200 || !json.Valid(b) || !utf8.Valid(b) {
			t.Fatalf("GET %s: %d, valid JSON %v, UTF-8 %v: %q", path, st, json.Valid(b), utf8.Valid(b), b)
		}
	}
	view := must[jsonMap](t, 200)(g.api("GET", "/events/"+id, opToken, nil))
	hdr, _ := view["headers"].(map[string]any)
	if hdr["X-Ctl"] != "a\x01b\x7fc\tz" {
		t.Fatalf("X-Ctl shown as %q", hdr["X-Ctl"])
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
