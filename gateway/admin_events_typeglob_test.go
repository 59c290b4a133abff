package gateway

import (
	"strings"
	"testing"
)

// GET /events?type=: a lone backslash, an open class or a glob over 128
// bytes (each costs its length times a type's per event scanned) is a 400
// naming "type"; a glob of escapes only and a literal type with "/" list.
func TestAdminEventsTypeGlobEdges(t *testing.T) {
	g := startGateway(t, gwOptions{})
	ingestN(t, g, "e", 4)
	for _, q := range []string{"type=%5C", "type=%5B", "type=a%5C", "type=%5B%5D", "type=*" + strings.Repeat("a", 128) + "b"} {
		wantProblem(t, q, 400, "type")(g.api("GET", "/events?"+q, acmeToken, nil))
	}
	for q, want := range map[string]int{"type=%5Ca": 2, "type=%5C%2A": 0, "type=orders/create": 0, "type=orders%2F*": 0, "type=": 4, "type=" + strings.Repeat("a", 300): 0} {
		if l := must[apiList[eventView]](t, 200)(g.api("GET", "/events?"+q, acmeToken, nil)); len(l.Data) != want {
			t.Fatalf("%s: %d events, want %d", q, len(l.Data), want)
		}
	}
}
