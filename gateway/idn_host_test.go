package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/internal/testsupport"
)

// TestIDNEndpointGetsTheHostItIsSentTo: for an endpoint URL whose host is
// an internationalized name that IDNA's lookup profile maps
// ("ＥＸＡＭＰＬＥ.com", "BÜCHER.example"), net/http dials (and, for https,
// verifies the certificate of) the mapped name but wrote a Host header made
// without that mapping (xn--ph7chab1aes7c.com): a receiver routing by Host
// answered 404 or 421 to every delivery. The request names the host it is
// sent to.
func TestIDNEndpointGetsTheHostItIsSentTo(t *testing.T) {
	var mu sync.Mutex
	var hosts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	g := startCustom(t, func(dir string) string {
		return fmt.Sprintf(`
server: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0", tokens: [{token: %s}]}
storage: {path: %q}
delivery:
  allow_private_targets: true
  timeout: 2s
  retry: {initial_interval: 10ms, max_interval: 20ms, max_attempts: 1}
sources:
  - {id: open, tenant: acme, verify: {scheme: none}, event_id: json:/id}
`, opToken, dir)
	}, nil)
	// Full-width "localhost": IDNA maps it to localhost, which is dialled.
	u := "http://ｌｏｃａｌｈｏｓｔ:" + port + "/hook"
	st, _, b := g.api("POST", "/endpoints", opToken, jsonMap{"id": "idn", "tenant": "acme", "url": u})
	if st == 422 {
		return // refused up front: fine
	}
	if st != 201 {
		t.Fatalf("POST /endpoints: %d %s", st, b)
	}
	if st, _, b := g.post("open", []byte(`{"id":"e1"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	testsupport.WaitFor(t, 10*time.Second, "the delivery to arrive", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(hosts) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if want := "localhost:" + port; !strings.EqualFold(hosts[0], want) {
		t.Fatalf("the delivery was dialled to localhost but carried Host %q; want %q (or the URL refused at creation)", hosts[0], want)
	}
}
