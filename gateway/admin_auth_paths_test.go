package gateway

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// rawAdminRequest sends one raw HTTP/1.1 request line (method, request-target)
// to the admin listener with an optional token, and returns the status.
func rawAdminRequest(t *testing.T, g *gw, method, target, token, body string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", g.AdminAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var auth string
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: a\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		method, target, auth, len(body), body)
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	n := 0
	for {
		m, err := conn.Read(buf[n:])
		n += m
		if err != nil || n == len(buf) {
			break
		}
	}
	resp := string(buf[:n])
	var st int
	fmt.Sscanf(resp, "HTTP/1.1 %d", &st)
	return st, resp
}

// TestAdminRoutesNeedATokenInEverySpelling: no spelling of an /api/v1 route reaches it
// without a token.
func TestAdminRoutesNeedATokenInEverySpelling(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for _, target := range []string{
		"/API/V1/events", "/api/v1//events", "//api/v1/events", "/api//v1/events", "/api/v1/events/",
		"/api/v1/./events", "/api/v1/x/../events", "/api/v1/%65vents", "/api/v1%2Fevents", "/api/%76%31/events",
		"/api/v1/sources", "/Api/v1/sources", "/api/v1/sources/open", "/api/v1/sources/open/",
		"http://a/api/v1/events", "/api/v1/openapi.json/../events", "/api/v1/events;x", "/api/v1/events%00",
		"/api/v1/openapi.json/../../api/v1/events", "/api/v1/openapi.json%2F..%2Fevents", "/api/v1/events#", "/api/v1/events?x=1",
	} {
		st, resp := rawAdminRequest(t, g, "GET", target, "", "")
		if st != 401 && st != 404 && st != 400 {
			i := strings.Index(resp, "\r\n\r\n")
			t.Errorf("GET %s without a token: %d %s", target, st, resp[i:])
		}
	}
	for _, target := range []string{"/API/V1/endpoints", "/api/v1//endpoints", "/api/v1/endpoints/", "//api/v1/endpoints", "/api/v1/%65ndpoints"} {
		st, resp := rawAdminRequest(t, g, "POST", target, "", `{"id":"pathx","tenant":"acme","url":"http://x.test/"}`)
		if st != 401 && st != 404 && st != 400 && st != 405 {
			t.Errorf("POST %s without a token: %d %s", target, st, resp)
		}
	}
	wantProblem(t, "not created", 404, "")(g.api("GET", "/endpoints/pathx", opToken, nil))
}
