package gateway

import (
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// refusalTotal sums every series of hookgate_ingest_requests_total and
// hookgate_http_refused_total: wherever the gateway chooses to count a
// refused ingest request, it shows here.
func refusalTotal(text string) int {
	total := 0
	for _, m := range regexp.MustCompile(`(?m)^hookgate_(?:ingest_requests|http_refused)_total\{[^}]*\} (\d+)$`).FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		total += n
	}
	return total
}

// TestMetricsCountRequestsRefusedByTheHTTPParser: a provider's webhook
// that the HTTP server refuses before any handler runs was counted nowhere
// in /metrics, unlike the 413 and 415 refusals and the framing 400s that
// reach checkFraming. Each request below is a POST to an existing source,
// answered 4xx; each is counted under hookgate_http_refused_total:
//   - 431 (headers): a header block over the 16 KiB read buffer;
//   - 408 (timeout): a body that does not arrive within the read timeout;
//   - 400 (framing): a Content-Length that is not a number, and a
//     Transfer-Encoding whose body is not chunked.
func TestMetricsCountRequestsRefusedByTheHTTPParser(t *testing.T) {
	const timeout = 300 * time.Millisecond
	g := startCustom(t, withTestConfig(""), func(g *Gateway) { g.public.Server().ReadTimeout = timeout })
	before := refusalTotal(scrapeMetrics(t, g))

	refused := 0
	for _, c := range []struct {
		name, raw string
		want      int
	}{
		{"headers over the read buffer", rawPost("X-Pad: "+strings.Repeat("a", 20<<10)+"\r\nContent-Length: 2\r\n", "{}"), 431},
		{"non-numeric Content-Length", rawPost("Content-Length: abc\r\n", "{}"), 400},
		{"a transfer coding other than chunked", rawPost("Transfer-Encoding: gzip\r\n", "{}"), 400},
	} {
		a := rawExchange(t, g.PublicAddr(), c.raw)
		if a.status != c.want {
			t.Fatalf("%s: %d %s, want %d", c.name, a.status, a.body, c.want)
		}
		refused++
	}

	// A body that stops arriving: the read timeout answers 408.
	conn, err := net.Dial("tcp", g.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(conn, rawPost(fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", 100), `{"id":"slow"`))
	a := readAnswer(t, conn)
	conn.Close()
	if a.status != 408 {
		t.Fatalf("stalled body: %d %s, want 408", a.status, a.body)
	}
	refused++

	text := scrapeMetrics(t, g)
	if got := refusalTotal(text) - before; got != refused {
		var lines []string
		for _, l := range regexp.MustCompile(`(?m)^hookgate_(?:ingest_requests|http_refused)_total.*$`).FindAllString(text, -1) {
			lines = append(lines, l)
		}
		t.Fatalf("%d ingest requests to source %q were refused (431, 400, 400, 408); hookgate_ingest_requests_total and hookgate_http_refused_total moved by %d:\n%s",
			refused, "open", got, strings.Join(lines, "\n"))
	}
}
