package gateway

import (
	"fmt"
	"testing"
)

// One Content-Type line, however spelt or valued, on HTTP/1.0 and 1.1, is
// accepted; two (any case) are 400 and counted as a framing refusal.
func TestContentTypeOnceAcceptedTwiceRefusedAndCounted(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := `{"id":"ct-%d","type":"a"}`
	for i, h := range []string{
		"content-type: application/json\r\n",
		"CONTENT-TYPE: application/json, text/plain\r\n",
		"Content-Type: multipart/form-data; boundary=x\r\n",
	} {
		b := fmt.Sprintf(body, i)
		for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
			raw := "POST /ingest/open " + proto + "\r\nHost: hookgate\r\n" + h + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(b)) + b
			if a := rawExchange(t, g.PublicAddr(), raw); a.status != 202 {
				t.Fatalf("%s %q: %d %s", proto, h, a.status, a.body)
			}
		}
	}
	before := refusalTotal(scrapeMetrics(t, g))
	b := fmt.Sprintf(body, 99)
	raw := rawPost(fmt.Sprintf("content-type: application/json\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", len(b)), b)
	if a := rawExchange(t, g.PublicAddr(), raw); a.status != 400 {
		t.Fatalf("twice: %d %s", a.status, a.body)
	}
	if d := refusalTotal(scrapeMetrics(t, g)) - before; d != 1 {
		t.Fatalf("refusals moved by %d, want 1", d)
	}
}
