package gateway

import (
	"bufio"
	"fmt"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

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
