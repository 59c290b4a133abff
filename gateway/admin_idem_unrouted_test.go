package gateway

import (
	"strings"
	"testing"
)

// TestAdminIdempotencyKeyFreeAfterUnroutedPost: a POST under an
// Idempotency-Key that no handler ran (a path the API does not have)
// stores nothing, so the key is still free. SPEC section 5: "the first
// request with a key is executed; its status and body are stored"; the
// 422 is for a key whose (executed) request differs. A typo'd path must
// not burn the key for dedupe.ttl.
func TestAdminIdempotencyKeyFreeAfterUnroutedPost(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := `{"url":"http://receiver.test/a"}`
	st, _, b := g.api("POST", "/endpoint", acmeToken, body, "Idempotency-Key", "unrouted-typo")
	if st != 404 {
		t.Fatalf("POST to an unknown route: %d %s, want 404", st, b)
	}
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "unrouted-typo")
	if st != 201 {
		t.Errorf("POST /endpoints under a key whose only earlier use ran no handler (404): %d %s (Idempotent-Replayed=%q); want 201 (the key was never used by an executed request)",
			st, strings.TrimSpace(string(b)), hdr.Get(headerReplayed))
	}

	// The same with a 405: POST to a route that takes no POST, then the
	// POST meant (rotate-secret) under the same key.
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, `{"id":"unrouted-ep","url":"http://receiver.test/b"}`))
	if st, _, b := g.api("POST", "/endpoints/unrouted-ep", acmeToken, `{}`, "Idempotency-Key", "unrouted-405"); st != 405 {
		t.Fatalf("POST /endpoints/{id}: %d %s, want 405", st, b)
	}
	st, hdr, b = g.api("POST", "/endpoints/unrouted-ep/rotate-secret", acmeToken, `{}`, "Idempotency-Key", "unrouted-405")
	if st != 200 {
		t.Errorf("POST rotate-secret under a key whose only earlier use ran no handler (405): %d %s (Idempotent-Replayed=%q); want 200",
			st, strings.TrimSpace(string(b)), hdr.Get(headerReplayed))
	}
}
