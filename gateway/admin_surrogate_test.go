package gateway

import (
	"net/http"
	"testing"
)

// TestAdminBodiesWithLoneSurrogateEscapesAreRefused: a lone surrogate
// escape ("\udcff", which Python's json.dumps writes for a byte read with
// surrogateescape, and JavaScript's JSON.stringify for a lone surrogate) is
// no character, and encoding/json replaces it with U+FFFD without an
// error: an hmac source whose secret held one was answered 201 and stored
// with another key. It is a 400, as invalid UTF-8 is; a surrogate pair,
// and an escaped backslash before "u", are not lone surrogates.
func TestAdminBodiesWithLoneSurrogateEscapesAreRefused(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for i, c := range []struct {
		secret string
		status int
	}{
		{`k3y-\udcff-provider-secret`, http.StatusBadRequest},
		{`k3y-\ud83d-provider-secret`, http.StatusBadRequest},       // high without low
		{`k3y-\ud83d\u0041-provider-secret`, http.StatusBadRequest}, // high, then no low
		{`k3y-\ud83d\ude00-provider-secret`, http.StatusCreated},    // a pair: U+1F600
		{`k3y-\\udcff-provider-secret`, http.StatusCreated},         // a backslash, then "udcff"
		{`k3y-\u00e9\"-provider-secret`, http.StatusCreated},
	} {
		body := []byte(`{"id":"surr` + string(rune('a'+i)) + `","verify":{"scheme":"hmac","header":"X-Sig","secrets":["` + c.secret +
			`"]},"event_id":"json:/id"}`)
		st, _, b := g.api("POST", "/sources", acmeToken, body)
		if st != c.status {
			t.Errorf("secret %s: %d %s, want %d", c.secret, st, b, c.status)
		}
	}
}
