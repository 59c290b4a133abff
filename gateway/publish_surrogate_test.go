package gateway

import (
	"net/http"
	"testing"
)

// TestPublishPayloadWithLoneSurrogateIsForwarded: POST /events
// stores its payload byte for byte (a json.RawMessage: encoding/json never
// rewrites it), as ingest stores a body. A provider's JSON with a lone
// surrogate escape (JavaScript's JSON.stringify of a string cut inside an
// emoji writes "\ud83d") is accepted by POST /ingest/open; the same
// payload published through the admin API is accepted too, as nullField
// leaves the payload alone. (The lone-surrogate check refused it: 400.)
func TestPublishPayloadWithLoneSurrogateIsForwarded(t *testing.T) {
	g := startGateway(t, gwOptions{})
	payload := `{"id":"trunc-1","type":"note","text":"cut inside an emoji \ud83d"}`

	if st, _, b := g.post("open", []byte(payload), map[string]string{"Content-Type": "application/json"}); st != http.StatusAccepted {
		t.Fatalf("ingest of the payload: %d %s", st, b)
	}
	body := `{"source":"open","type":"note","event_id":"trunc-2","payload":` + payload + `}`
	st, _, b := g.api("POST", "/events", acmeToken, body)
	if st != http.StatusAccepted {
		t.Fatalf("POST /events with a lone surrogate escape inside its payload: %d %s, want 202 (the payload is forwarded byte for byte)", st, b)
	}
}
