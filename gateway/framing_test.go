package gateway

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// rawPipeline writes raw to the public listener and reads n answers.
func rawPipeline(t *testing.T, g *gw, raw string, n int) []int {
	t.Helper()
	c, err := net.Dial("tcp", g.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var sts []int
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		sts = append(sts, resp.StatusCode)
		resp.Body.Close()
	}
	return sts
}

func pipelinedPost(id, extra string) string {
	body := `{"id":"` + id + `","type":"a"}`
	return "POST /ingest/open HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// Framing checks that must not refuse ordinary requests: pipelined
// requests each with one Content-Length, a header whose value mentions
// Content-Length, and HTTP/1.0.
func TestFramingLeavesOrdinaryRequestsAlone(t *testing.T) {
	g := startGateway(t, gwOptions{})
	if sts := rawPipeline(t, g, pipelinedPost("p1", "")+pipelinedPost("p2", "")+pipelinedPost("p3", ""), 3); len(sts) != 3 || sts[0] != 202 || sts[1] != 202 || sts[2] != 202 {
		t.Fatalf("pipelined: %v", sts)
	}
	if sts := rawPipeline(t, g, pipelinedPost("v1", "X-Note: Content-Length: 5\r\n"), 1); len(sts) != 1 || sts[0] != 202 {
		t.Fatalf("value mentioning Content-Length: %v", sts)
	}
	r10 := strings.Replace(pipelinedPost("h10", ""), "HTTP/1.1", "HTTP/1.0", 1)
	if sts := rawPipeline(t, g, r10, 1); len(sts) != 1 || sts[0] != 202 {
		t.Fatalf("HTTP/1.0: %v", sts)
	}
	if sts := rawPipeline(t, g, pipelinedPost("d1", "content-length: 23\r\n"), 1); len(sts) != 1 || sts[0] != 400 {
		t.Fatalf("duplicate lowercase Content-Length: %v", sts)
	}
}

// TestEmptyTransferEncodingIsRefused: a Transfer-Encoding line with no
// coding in it (an empty value, blanks, or only commas: an empty list,
// RFC 9110 section 5.6.1) is present without chunked as its final coding,
// which RFC 9112 section 6.3 makes a 400: the body's length cannot be
// known. fasthttp reads any Transfer-Encoding value but "identity" as
// chunked, an empty one too, while readFraming lists no coding for it, so
// checkFraming let it through and the chunk-decoded body was stored and
// answered 202. A proxy in front that takes the empty field for no
// Transfer-Encoding frames the same bytes by Content-Length (or refuses
// them): the two disagree on where the body ends, which is what the
// other framing checks refuse.
func TestEmptyTransferEncodingIsRefused(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for i, te := range []string{"", "  ", ",", " , ,"} {
		body := fmt.Sprintf(`{"id":"te-empty-%d","type":"a"}`, i)
		chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
		before := len(eventsIn(t, g.Store()))
		a := rawExchange(t, g.PublicAddr(), rawPost("Content-Type: application/json\r\nTransfer-Encoding:"+te+"\r\n", chunked))
		if n := len(eventsIn(t, g.Store())); a.status != 400 || n != before {
			t.Errorf("Transfer-Encoding:%q: answered %d %s, %d event(s) stored; want 400 and nothing stored", te, a.status, a.body, n-before)
		}
	}
}

// FuzzFramingAgreesWithFasthttp: a header block checkFraming lets through
// (its rules restated here on readFraming's answer, for an HTTP/1.1
// request) is framed by fasthttp as RFC 9112 section 6.3 says: as chunked
// exactly when Transfer-Encoding is present and its codings are just
// "chunked", else by Content-Length. A block on which the two disagree is
// one whose body a proxy in front reads with other bounds.
func FuzzFramingAgreesWithFasthttp(f *testing.F) {
	for _, s := range []string{
		"Host: x\r\nContent-Length: 2\r\n",
		"Host: x\r\nTransfer-Encoding: chunked\r\n",
		"Host: x\r\nTransfer-Encoding: Chunked\r\nContent-Length: 3\r\n",
		"Host: x\r\nTransfer-Encoding: identity\r\n",
		"Host: x\r\nTransfer-Encoding: gzip, chunked\r\n",
		"Host: x\r\nTransfer-Encoding:\r\n",
		"Host: x\r\nTransfer-Encoding: ,\r\nContent-Length: 2\r\n",
		"Host: x\r\ntransfer-encoding: chunked\r\ncontent-length: 2\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, block string) {
		raw := "POST /ingest/open HTTP/1.1\r\n" + block + "\r\n"
		var h fasthttp.RequestHeader
		if err := h.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			return // fasthttp answers 400 itself
		}
		fr := readFraming(h.RawHeaders())
		n := len(fr.codings)
		if fr.malformed || fr.hosts != 1 || fr.contentLengths > 1 || n > 1 ||
			fr.transferEncodings > 0 && (n == 0 || fr.codings[n-1] != "chunked") {
			return // refused by checkFraming
		}
		// Count in the header block fasthttp read, not in the whole
		// input: a line after the blank line that ends the block is body.
		teLines := 0
		for line := range strings.Lines(string(h.RawHeaders())) {
			if name, _, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "Transfer-Encoding") {
				teLines++
			}
		}
		if teLines > 0 && n == 0 {
			t.Fatalf("%q: let through with %d Transfer-Encoding line(s) naming no coding; RFC 9112 section 6.3: 400 (chunked is not the final coding), and fasthttp reads the body as chunked: %v",
				block, teLines, h.ContentLength() == -1)
		}
		wantChunked := teLines > 0 // and then its codings are ["chunked"]
		if gotChunked := h.ContentLength() == -1; gotChunked != wantChunked {
			t.Fatalf("%q: let through, fasthttp reads the body as chunked: %v; RFC 9112 (%d Transfer-Encoding line(s), codings %q): %v",
				block, gotChunked, teLines, fr.codings, wantChunked)
		}
	})
}

// TestUnknownMethodWithAmbiguousFramingClosesTheConnection: checkFraming
// closes the connection of a request whose framing a proxy in front may
// read otherwise, so that bytes a proxy took for its body are never read
// as a request of their own. A request with a method Fiber does not know
// (PROPFIND, which proxies forward) is answered by refuseUnknownMethods
// before any middleware, its framing unchecked: its connection is closed
// too. (It stayed open: a proxy that takes the first Content-Length
// forwarded a second POST as the PROPFIND's body, hookgate took the last
// (0), answered 400, then read that POST as a request and stored it.)
func TestUnknownMethodWithAmbiguousFramingClosesTheConnection(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for _, method := range []string{"PUT", "PROPFIND"} {
		smuggled := pipelinedPost("smuggled-"+method, "")
		raw := method + " /ingest/open HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(smuggled)) +
			"\r\nContent-Length: 0\r\n\r\n" + smuggled
		c, err := net.Dial("tcp", g.PublicAddr())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte(raw)); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		var sts []int
		for range 2 {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				break
			}
			sts = append(sts, resp.StatusCode)
			resp.Body.Close()
		}
		c.Close()
		if len(sts) != 1 || sts[0] != 400 {
			t.Errorf("%s with Content-Length twice: answers %v; want one 400 and the connection closed", method, sts)
		}
	}
	for _, e := range eventsIn(t, g.Store()) {
		t.Errorf("event %q stored from the bytes a proxy took for a body", e.EventID)
	}
}
