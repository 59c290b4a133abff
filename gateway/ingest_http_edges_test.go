package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/problem"
)

// POST /ingest/{source} at the HTTP level. testConfig's server.max_body
// is 4KiB.

const testMaxBody = 4 << 10

// bodyOfSize is a JSON body of exactly n bytes whose json:/id is id.
func bodyOfSize(id string, n int) string {
	head := fmt.Sprintf(`{"id":%q,"pad":"`, id)
	return head + strings.Repeat("x", n-len(head)-2) + `"}`
}

// chunkedAs frames body as chunks of at most size bytes.
func chunkedAs(body string, size int) string {
	var b strings.Builder
	for len(body) > 0 {
		n := min(size, len(body))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

// rawPostWithLength is a complete raw POST /ingest/open of body, with Content-Length.
func rawPostWithLength(body string) string {
	return rawPost("Content-Type: application/json\r\nContent-Length: "+itoa(len(body))+"\r\n", body)
}

// A provider that posts a body over server.max_body gets the 413 (SPEC
// section 3), not a reset. The 413 is written once the headers are read,
// with the rest of the body unread: closed at once, the socket answered
// the client's next bytes with a TCP RST, which reached the client while
// it was still uploading, and it threw the 413 away (a stock Go client
// posting 8 MiB got "connection reset by peer" 7 times in 10). The
// connection is now closed as net/http's and nginx's are (lingering
// close, gateway/listener.go).
func TestIngestOversizedBodyIsAnsweredNotReset(t *testing.T) {
	g := startGateway(t, gwOptions{})

	// Deterministic: the client sends the head and 64 KiB of an 8 MiB
	// body (more than the server reads ahead), then only reads.
	c, err := net.Dial("tcp", g.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, rawPost("Content-Type: application/json\r\nContent-Length: 8388608\r\n", strings.Repeat("a", 64<<10))); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if !strings.HasPrefix(string(got), "HTTP/1.1 413 ") {
		t.Fatalf("answer %.80q (err %v), want a 413", got, err)
	}
	if errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("after the 413 the connection was reset (RST), not closed (FIN): a client still sending loses the answer")
	}

	// What a provider sees: a plain net/http client posting 8 MiB.
	failed := 0
	var last error
	for i := 0; i < 5; i++ {
		req, _ := http.NewRequest(http.MethodPost, "http://"+g.PublicAddr()+"/ingest/open", strings.NewReader(bodyOfSize("big", 8<<20)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			failed++
			last = err
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Errorf("8 MiB body: %d %s, want 413", resp.StatusCode, b)
		}
	}
	if failed > 0 {
		t.Errorf("8 MiB body: %d of 5 posts got no answer but an error (last: %v), want a 413 each time", failed, last)
	}
	wantNoEvents(t, g, "after oversized bodies")
}

// A client that sends "Expect: 100-continue" with a Content-Length over
// server.max_body (curl does it for every large POST) gets the final 413
// problem without sending the body. fasthttp (v1.51) writes "100
// Continue" first: a server can refuse before it only with a bare 417,
// which curl answers by sending the whole body without the Expect header.
// So the 413 follows the 100 at once, and the connection is closed
// gently (see TestIngestOversizedBodyIsAnsweredNotReset) for a client that
// starts uploading anyway.
func TestIngestExpectContinueOverLimitGets413WithoutTheBody(t *testing.T) {
	g := startGateway(t, gwOptions{})
	c, err := net.Dial("tcp", g.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// The head only: the client waits for the server's word.
	if _, err := io.WriteString(c, rawPost("Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 8388608\r\n", "")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == 100 {
		if resp, err = http.ReadResponse(br, nil); err != nil {
			t.Fatalf("after 100 Continue: %v, want the 413", err)
		}
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("final answer to an over-limit Expect: 100-continue: %d %s, want 413", resp.StatusCode, b)
	}
	if p := decodeProblem(t, resp.Header, b); p.Status != 413 {
		t.Fatalf("problem %+v", p)
	}
	wantNoEvents(t, g, "after an over-limit 100-continue")
}

// The gateway keeps a provider's request headers with the event, but not
// credentials: Authorization, Cookie, Proxy-Authorization, and the custom
// headers senders whose only authentication is a static key use
// (X-Api-Key above all). They were stored and shown by GET /events/{id}
// and GET /events to every token of the tenant, for the whole retention.
func TestIngestCredentialHeadersAreNotShown(t *testing.T) {
	g := startGateway(t, gwOptions{})
	const key = "sk_live_probe_api_key_0123456789"
	body := `{"id":"cred-1","type":"t"}`
	a := rawExchange(t, g.PublicAddr(), rawPost("Content-Type: application/json\r\nContent-Length: "+itoa(len(body))+"\r\n"+
		"X-Api-Key: "+key+"\r\nAuthorization: Bearer "+key+"\r\nCookie: s="+key+"\r\nProxy-Authorization: Basic "+key+"\r\n", body))
	id := must[jsonMap](t, 202)(a.status, nil, a.body)["id"].(string)
	for _, path := range []string{"/events/" + id, "/events?source=open"} {
		st, _, b := g.api("GET", path, acmeToken, nil)
		if st != 200 {
			t.Fatalf("GET %s: %d %s", path, st, b)
		}
		if strings.Contains(string(b), key) {
			t.Errorf("GET %s shows the provider's credential to a tenant token: %s", path, b)
		}
	}
}

// A chunked request may end with trailer fields, which a recipient must
// not merge into the header section (RFC 9110 section 6.5.1). fasthttp
// does, and the gateway took them as headers: a standard-webhooks request
// whose webhook-* fields came only as trailers was verified and accepted,
// its event ID taken from a trailer, unseen by a proxy in front that
// checked the headers, and trailers were stored as request headers. Such
// a request is now a 400, and nothing is stored.
func TestIngestTrailerFieldsAreNotHeaders(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := `{"id":"trailer-1","type":"t"}`
	var tr strings.Builder
	for k, v := range signSW("msg_trailer", time.Now(), []byte(body)) {
		tr.WriteString(k + ": " + v + "\r\n")
	}
	chunkedBody := fmt.Sprintf("%x\r\n%s\r\n0\r\n%s\r\n", len(body), body, tr.String())
	raw := strings.Replace(rawPost("Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n", chunkedBody), "/ingest/open", "/ingest/sw", 1)
	if a := rawExchange(t, g.PublicAddr(), raw); a.status != 400 {
		t.Errorf("signature only in trailers: %d %s, want 400, nothing stored", a.status, a.body)
	}

	// A trailer must not show up among the stored request headers either.
	body2 := `{"id":"trailer-2","type":"t"}`
	a := rawExchange(t, g.PublicAddr(), rawPost("X-Over: header\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n",
		fmt.Sprintf("%x\r\n%s\r\n0\r\nX-Over: trailer\r\nX-Only-Trailer: t\r\n\r\n", len(body2), body2)))
	if a.status != 400 {
		t.Errorf("trailer fields: %d %s, want 400", a.status, a.body)
	}
	wantNoEvents(t, g, "after requests with trailer fields")
	// Without trailers a chunked request is accepted, its headers stored.
	body3 := `{"id":"no-trailer","type":"t"}`
	a = rawExchange(t, g.PublicAddr(), rawPost("X-Over: header\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n",
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body3), body3)))
	if a.status != 202 {
		t.Fatalf("chunked without trailers: %d %s, want 202", a.status, a.body)
	}
	if evs := eventsIn(t, g.Store()); len(evs) != 1 || evs[0].Headers["X-Over"] != "header" {
		t.Fatalf("events %+v, want the one chunked event with X-Over: header", evs)
	}
}

// One under and exactly server.max_body
// are accepted and stored byte for byte, with Content-Length, chunked, and
// Expect: 100-continue; one byte over is a 413 problem and nothing is
// stored. (Existing tests check only far over the limit, or exactly at it
// with Content-Length.)
func TestIngestBodyLimitBoundary(t *testing.T) {
	g := startGateway(t, gwOptions{})
	frames := map[string]func(body string) string{
		"length": rawPostWithLength,
		"chunked": func(b string) string {
			return rawPost("Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n", chunkedAs(b, 1000))
		},
		"continue": func(b string) string {
			return rawPost("Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: "+itoa(len(b))+"\r\n", b)
		},
	}
	want := map[string]string{}
	for name, frame := range frames {
		for _, n := range []int{testMaxBody - 1, testMaxBody, testMaxBody + 1} {
			id := fmt.Sprintf("%s-%d", name, n)
			body := bodyOfSize(id, n)
			got := pipelineAnswers(t, g.PublicAddr(), frame(body), 1)
			wantAnswer := "202 " + id
			if n > testMaxBody {
				wantAnswer = "413"
			} else {
				want[id] = body
			}
			if len(got) != 1 || got[0] != wantAnswer {
				t.Errorf("%s body of %d bytes: answers %q, want %q", name, n, got, wantAnswer)
			}
		}
	}
	evs := eventsIn(t, g.Store())
	for _, e := range evs {
		if w, ok := want[e.EventID]; !ok || string(e.Body) != w {
			t.Errorf("stored %s (%d bytes): not an accepted body as sent", e.EventID, len(e.Body))
		}
	}
	if len(evs) != len(want) {
		t.Errorf("%d events stored, want %d", len(evs), len(want))
	}
}

// The unread bytes of a
// body refused with 413 (Content-Length, chunked, 100-continue) are never
// parsed as a next request on the connection: a complete ingest request
// hidden in them is not stored, and the 413 says the connection closes.
// After a 401 or a 422 the connection stays usable for the next request.
func TestIngestOversizedBodyIsNeverReadAsARequest(t *testing.T) {
	g := startGateway(t, gwOptions{})
	hidden := rawPostWithLength(`{"id":"smuggled"}`)
	over := hidden + strings.Repeat(" ", testMaxBody+1-len(hidden))
	for name, raw := range map[string]string{
		"length":   rawPost("Content-Length: "+itoa(len(over))+"\r\n", over),
		"chunked":  rawPost("Transfer-Encoding: chunked\r\n", chunkedAs(over, len(over))),
		"continue": rawPost("Expect: 100-continue\r\nContent-Length: "+itoa(len(over))+"\r\n", over),
	} {
		c, err := net.Dial("tcp", g.PublicAddr())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		_, _ = io.WriteString(c, raw+rawPostWithLength(`{"id":"after-`+name+`"}`))
		resp, err := http.ReadResponse(br, nil)
		for err == nil && resp.StatusCode == 100 {
			resp, err = http.ReadResponse(br, nil)
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 || !resp.Close {
			t.Errorf("%s: %d close=%v %s, want 413 with Connection: close", name, resp.StatusCode, resp.Close, b)
		}
		if p := decodeProblem(t, resp.Header, b); p.Status != 413 || p.Detail == "" {
			t.Errorf("%s: problem %+v", name, p)
		}
		c.Close()
	}
	wantNoEvents(t, g, "after over-limit bodies hiding a request")

	dup := `{"id":"dup" }`
	raw := rawPostWithLength(`{"id":"dup"}`) + rawPostWithLength(dup) + strings.Replace(rawPostWithLength(`{"id":"x"}`), "/ingest/open", "/ingest/sw", 1) + rawPostWithLength(`{"id":"after-errors"}`)
	got := pipelineAnswers(t, g.PublicAddr(), raw, 4)
	if strings.Join(got, "|") != "202 dup|422|401|202 after-errors" {
		t.Fatalf("answers on one connection: %q", got)
	}
}

// The ingest route's edges. A trailing
// slash or a query string still reaches the source; a source id is
// case-sensitive; /ingest/ without a source, and extra segments, are 404;
// other methods are 405 with Allow: POST. Every refusal is a complete
// problem+json that does not echo the path.
func TestIngestPathsAndMethods(t *testing.T) {
	g := startGateway(t, gwOptions{})
	n := 0
	for _, tc := range []struct {
		target string
		want   int
	}{
		{"/ingest/open/", 202},
		{"/ingest/open?from=probe&x=%2F", 202},
		{"/ingest/OPEN", 404},
		{"/ingest/", 404},
		{"/ingest", 404},
		{"/ingest/open/extra", 404},
		{"/ingest//open", 404},
		{"/ingest/no-such-probe-source", 404},
	} {
		n++
		raw := strings.Replace(rawPostWithLength(fmt.Sprintf(`{"id":"path-%d"}`, n)), "/ingest/open", tc.target, 1)
		a := rawExchange(t, g.PublicAddr(), raw)
		if a.status != tc.want {
			t.Errorf("POST %s: %d %s, want %d", tc.target, a.status, a.body, tc.want)
			continue
		}
		if tc.want != 202 {
			if p := decodeProblem(t, a.header, a.body); p.Status != tc.want || p.Title == "" || p.Detail == "" || !strings.HasPrefix(p.Type, problem.Base) {
				t.Errorf("POST %s: problem %+v", tc.target, p)
			}
			if strings.Contains(string(a.body), "no-such-probe-source") || strings.Contains(string(a.body), "/ingest") {
				t.Errorf("POST %s: the problem echoes the path: %s", tc.target, a.body)
			}
		}
	}
	for _, m := range []string{"GET", "PUT", "HEAD", "DELETE", "PATCH", "OPTIONS"} {
		a := rawExchange(t, g.PublicAddr(), m+" /ingest/open HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
		if a.status != 405 || a.header.Get("Allow") != "POST" || a.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s /ingest/open: %d Allow=%q %s", m, a.status, a.header.Get("Allow"), a.header.Get("Content-Type"))
		}
	}
	if evs := eventsIn(t, g.Store()); len(evs) != 2 {
		t.Errorf("%d events stored, want the two accepted", len(evs))
	}
}

// Connections stalled halfway
// through their headers or their body (slowloris) hold only themselves:
// an ordinary ingest on another connection is answered at once.
func TestIngestSlowClientsDoNotBlockOthers(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for i := 0; i < 32; i++ {
		c, err := net.Dial("tcp", g.PublicAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		stall := "POST /ingest/open HTTP/1.1\r\nHost: x\r\nX-Pa"
		if i%2 == 1 {
			stall = rawPost("Content-Length: 100\r\n", `{"id":"stalled`)
		}
		if _, err := io.WriteString(c, stall); err != nil {
			t.Fatal(err)
		}
	}
	// Blocked, it would wait for the stalled requests' read timeout (30s).
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post("http://"+g.PublicAddr()+"/ingest/open", "application/json", strings.NewReader(`{"id":"not-blocked"}`))
	if err != nil {
		t.Fatalf("an ingest with stalled clients around: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Fatalf("with stalled clients: %d", resp.StatusCode)
	}
}

// The trailer check counts, per name, the raw header lines and the fields
// fasthttp parsed. fasthttp holds User-Agent (like Cookie) once, and not
// when empty: an empty or a repeated User-Agent once left room for a
// User-Agent trailer, accepted and stored as the event's User-Agent.
func TestIngestTrailerFieldBehindAnEmptyHeader(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := `{"id":"ua-trailer","type":"t"}`
	a := rawExchange(t, g.PublicAddr(), rawPost("User-Agent:\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n",
		fmt.Sprintf("%x\r\n%s\r\n0\r\nUser-Agent: from-the-trailer\r\n\r\n", len(body), body)))
	if a.status != 400 {
		evs := eventsIn(t, g.Store())
		ua := ""
		if len(evs) == 1 {
			ua = evs[0].Headers["User-Agent"]
		}
		t.Errorf("a User-Agent trailer after an empty User-Agent header: %d, stored User-Agent %q; want 400 and nothing stored", a.status, ua)
	}
}

// The same with User-Agent sent twice in the header section.
func TestIngestTrailerFieldBehindADuplicateHeader(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := `{"id":"ua-trailer-2","type":"t"}`
	a := rawExchange(t, g.PublicAddr(), rawPost("User-Agent: a\r\nUser-Agent: b\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n",
		fmt.Sprintf("%x\r\n%s\r\n0\r\nUser-Agent: from-the-trailer\r\n\r\n", len(body), body)))
	if a.status != 400 {
		t.Errorf("a User-Agent trailer after a User-Agent sent twice: %d %s; want 400", a.status, a.body)
	}
}

// Chunked requests without trailer fields are accepted, whatever their
// headers: the trailer check must not mistake fasthttp's own bookkeeping
// of a field for a trailer.
func TestIngestChunkedWithoutTrailersIsAccepted(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for i, hdr := range []string{
		"User-Agent:\r\n",
		"User-Agent: a\r\nUser-Agent: b\r\n",
		"Cookie: a=1\r\nCookie: b=2\r\n",
		"Cookie:\r\n",
		"Cookie: a=1; b=2\r\n",
		"Trailer: X-Later\r\n",
		"x-odd-CASE: 1\r\nX-Odd-Case: 2\r\n",
		"X-Empty:\r\n",
		"Connection: keep-alive\r\n",
	} {
		body := fmt.Sprintf(`{"id":"plain-%d","type":"t"}`, i)
		a := rawExchange(t, g.PublicAddr(), rawPost(hdr+"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n",
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)))
		if a.status != 202 {
			t.Errorf("chunked, no trailers, with %q: %d %s, want 202", hdr, a.status, a.body)
		}
	}
}

// TestIngestTokenAndSecretHeadersAreNotShown: GitLab webhooks
// authenticate with nothing but the secret token in X-Gitlab-Token (the
// "static key" kind of sender the unstored list is for). Received on a
// source, the token must not be stored with the event and shown by
// GET /events/{id}, as Authorization and X-Api-Key are not. Asana's
// handshake sends the webhook's shared secret itself in X-Hook-Secret
// (later events are signed with it in X-Hook-Signature): stored, anyone
// who reads the event can sign events of their own.
func TestIngestTokenAndSecretHeadersAreNotShown(t *testing.T) {
	g := startGateway(t, gwOptions{})
	const token = "glpat-SecretWebhookToken0123456789"
	st, _, b := g.post("open", []byte(`{"id":"gl1","type":"push"}`), map[string]string{
		"X-Gitlab-Token": token, "X-Gitlab-Event": "Push Hook", "X-Api-Key": token,
		"X-Hook-Secret": token,
	})
	id := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+id, acmeToken, nil))
	if ev.Headers["X-Gitlab-Event"] == "" {
		t.Fatalf("headers %v: the event kept no provider header at all", ev.Headers)
	}
	for name, v := range ev.Headers {
		if strings.Contains(v, token) {
			t.Errorf("the event stored the provider's secret token in %s: GET /events/{id} shows it", name)
		}
	}
}
