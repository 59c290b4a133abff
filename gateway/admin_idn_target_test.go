package gateway

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestIDNSpellingsOfBlockedHostsAreRefusedUpFront: the admin API refuses,
// with 422, an endpoint URL whose host is a blocked address or localhost,
// because every delivery to it would be refused at dial time. A host
// written with Unicode characters that IDNA maps to such a host (full-width
// digits and dots, an enclosed letter) is dialled by net/http as the mapped
// host, and gets the same 422 (it got a 201, and a delivery that failed for
// its whole retry window).
func TestIDNSpellingsOfBlockedHostsAreRefusedUpFront(t *testing.T) {
	rcv := newReceiver(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(rcv.srv.URL, "http://"))
	g := startCustom(t, func(dir string) string {
		return fmt.Sprintf(`
server: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0", tokens: [{token: %s}]}
storage: {path: %q}
delivery:
  allow_private_targets: false
sources:
  - {id: open, tenant: acme, verify: {scheme: none}, event_id: json:/id}
endpoints:
  - {id: public, tenant: acme, url: "https://example.com/hooks"}
`, opToken, dir)
	}, nil)
	for _, host := range []string{
		"１２７．０．０．１",       // full-width digits and dots: 127.0.0.1
		"127。0。0。1",       // ideographic full stops: 127.0.0.1
		"ⓛocalhost",       // enclosed small l: localhost
		"ｌｏｃａｌｈｏｓｔ",       // full-width: localhost
		"１６９．２５４．１６９．２５４", // cloud metadata
	} {
		u := "http://" + host + ":" + port + "/api"
		st, _, b := g.api("POST", "/endpoints", opToken, jsonMap{"id": "api", "tenant": "acme", "url": u})
		if st != 422 || !strings.Contains(string(b), "allow_private_targets") {
			t.Errorf("POST /endpoints with %s: %d %s; want 422 naming allow_private_targets, as for the ASCII spelling", u, st, b)
			if st == 201 {
				g.api("DELETE", "/endpoints/api", opToken, nil)
			}
		}
		if st, _, b := g.api("PATCH", "/endpoints/public", opToken, jsonMap{"url": u}); st != 422 {
			t.Errorf("PATCH to %s: %d %s; want 422", u, st, b)
		}
	}
}
