package gateway

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"testing"
)

// Transfer codings other than chunked (RFC 9112 section 6.1, 7). fasthttp
// reads any Transfer-Encoding value but "identity" as plain "chunked": it
// removes the chunk framing and ignores every other coding named, so a
// gzip transfer-coded body was stored (and delivered) as its compressed
// bytes, and answered 202, and the stored headers said only "chunked". The
// same body sent with Content-Encoding: gzip is refused with 415 (RELIABILITY
// section 6); a transfer coding hookgate does not implement must be refused
// too (501, RFC 9112 section 6.1), and a chunked that is not the final
// coding is a 400 (section 6.3), never a stored event.
func TestUnsupportedTransferCodingsAreNotStored(t *testing.T) {
	g := startGateway(t, gwOptions{})
	gz := func(s string) []byte {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return b.Bytes()
	}
	chunk := func(b []byte) string { return fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(b), b) }
	for _, c := range []struct {
		name, te, content string
		body              []byte // the bytes inside the chunk framing
	}{
		{"gzip, chunked", "gzip, chunked", `{"id":"te-gzip-chunked","type":"a"}`, gz(`{"id":"te-gzip-chunked","type":"a"}`)},
		{"gzip alone (chunked not final)", "gzip", `{"id":"te-gzip-only","type":"a"}`, []byte(`{"id":"te-gzip-only","type":"a"}`)},
		{"chunked, gzip (chunked not final)", "chunked, gzip", `{"id":"te-chunked-gzip","type":"a"}`, []byte(`{"id":"te-chunked-gzip","type":"a"}`)},
		{"unknown coding", "x-custom, chunked", `{"id":"te-custom","type":"a"}`, []byte(`{"id":"te-custom","type":"a"}`)},
	} {
		before := len(eventsIn(t, g.Store()))
		a := rawExchange(t, g.PublicAddr(), rawPost("Content-Type: application/json\r\nTransfer-Encoding: "+c.te+"\r\n", chunk(c.body)))
		evs := eventsIn(t, g.Store())
		if a.status >= 200 && a.status < 300 {
			// Accepted: right only for a coding that was undone, with the
			// content stored.
			if len(evs) != before+1 || !bytes.Equal(c.body, []byte(c.content)) && bytes.Equal(evs[0].Body, []byte(c.content)) {
				continue
			}
			t.Errorf("Transfer-Encoding: %s: answered %d %s and stored %q; want 400/501 and nothing stored", c.te, a.status, a.body, evs[0].Body)
			continue
		}
		if len(evs) != before {
			t.Errorf("Transfer-Encoding: %s: answered %d but stored an event", c.te, a.status)
		}
		if a.status != 400 && a.status != 501 {
			t.Errorf("Transfer-Encoding: %s: answered %d %s, want 400 or 501", c.te, a.status, a.body)
		}
	}
}
