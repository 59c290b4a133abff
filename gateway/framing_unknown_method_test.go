package gateway

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

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
