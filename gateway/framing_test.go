package gateway

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
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
