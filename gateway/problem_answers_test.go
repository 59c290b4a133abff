package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Odd requests to both listeners get errors, and every error answer with
// a body is problem+json.
func TestEveryErrorAnswerIsProblemJSON(t *testing.T) {
	g := startGateway(t, gwOptions{})
	big := strings.Repeat("a", 5000)
	reqs := []struct{ addr, raw string }{
		{g.PublicAddr(), "GET /ingest/open HTTP/1.1\r\nHost: x\r\n\r\n"},
		{g.PublicAddr(), "OPTIONS /ingest/open HTTP/1.1\r\nHost: x\r\n\r\n"},
		{g.PublicAddr(), "TRACE /ingest/open HTTP/1.1\r\nHost: x\r\n\r\n"},
		{g.PublicAddr(), "PUT /ingest/open HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"},
		{g.PublicAddr(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
		{g.PublicAddr(), "POST /ingest/open HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n" + big},
		{g.PublicAddr(), "POST /ingest/open HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 3\r\n\r\n{x}"},
		{g.PublicAddr(), "POST /ingest/sw HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"},
		{g.AdminAddr(), "OPTIONS /api/v1/events HTTP/1.1\r\nHost: x\r\n\r\n"},
		{g.AdminAddr(), "HEAD /api/v1/events HTTP/1.1\r\nHost: x\r\n\r\n"},
		{g.AdminAddr(), "DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n"},
		{g.AdminAddr(), "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"},
		{g.AdminAddr(), "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"},
		{g.AdminAddr(), "PUT /api/v1/openapi.json HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"},
		{g.AdminAddr(), "GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Basic b3A6b3A=\r\n\r\n"},
		{g.AdminAddr(), "GET /api/v1/nope HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + opToken + "\r\n\r\n"},
		{g.AdminAddr(), "PUT /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + opToken + "\r\nContent-Length: 0\r\n\r\n"},
		{g.AdminAddr(), "GET /api/v1/events?limit=x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + opToken + "\r\n\r\n"},
		{g.AdminAddr(), "POST /api/v1/endpoints HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + opToken + "\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabc"},
	}
	for _, r := range reqs {
		conn, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, r.raw)
		req, _ := http.ReadRequest(bufio.NewReader(strings.NewReader(r.raw)))
		resp, err := http.ReadResponse(bufio.NewReader(conn), req)
		if err != nil {
			conn.Close()
			t.Errorf("%q: %v", firstLine(r.raw), err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		conn.Close()
		ct := resp.Header.Get("Content-Type")
		t.Logf("%q -> %d %s", firstLine(r.raw), resp.StatusCode, ct)
		if resp.StatusCode >= 400 && (len(body) > 0 || req.Method != "HEAD") && !strings.HasPrefix(ct, "application/problem+json") {
			t.Errorf("%q: %d %q %s: not problem+json", firstLine(r.raw), resp.StatusCode, ct, body)
		}
	}
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\r\n"); return fmt.Sprint(l) }
