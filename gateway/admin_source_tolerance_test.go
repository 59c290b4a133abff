package gateway

import "testing"

// TestSourceViewRoundTripsOnSchemeWithoutTimestamp: since tolerance is
// refused on schemes that sign no timestamp, a github source must not be
// shown with one, from config.yaml or the API, nor keep the one of a
// scheme it was changed from; else a client that PATCHes back the verify
// block it read is refused 422. A change back to a timestamp scheme gets
// the default again.
func TestSourceViewRoundTripsOnSchemeWithoutTimestamp(t *testing.T) {
	g := startGateway(t, gwOptions{})
	src := must[sourceView](t, 201)(g.api("POST", "/sources", acmeToken, jsonMap{"id": "gh", "verify": jsonMap{"scheme": "github", "secrets": []string{"gh-secret"}}}))
	if src.Verify.Tolerance != "" {
		t.Errorf("a github source is shown with tolerance %q, which the API refuses for github", src.Verify.Tolerance)
	}
	back := jsonMap{"scheme": src.Verify.Scheme}
	if src.Verify.Tolerance != "" {
		back["tolerance"] = src.Verify.Tolerance
	}
	if st, _, b := g.api("PATCH", "/sources/gh", acmeToken, jsonMap{"verify": back}); st != 200 {
		t.Errorf("PATCH of the verify block as read: %d %s", st, b)
	}

	// A stripe source with a tolerance moved to github keeps it.
	must[sourceView](t, 201)(g.api("POST", "/sources", acmeToken, jsonMap{"id": "st", "verify": jsonMap{"scheme": "stripe", "secrets": []string{"whsec_x"}, "tolerance": "10m"}}))
	moved := must[sourceView](t, 200)(g.api("PATCH", "/sources/st", acmeToken, jsonMap{"verify": jsonMap{"scheme": "github"}}))
	if moved.Verify.Tolerance != "" {
		t.Errorf("after a change to github the source still shows tolerance %q", moved.Verify.Tolerance)
	}
	back2 := must[sourceView](t, 200)(g.api("PATCH", "/sources/st", acmeToken, jsonMap{"verify": jsonMap{"scheme": "slack"}}))
	if back2.Verify.Tolerance != "5m0s" {
		t.Errorf("after a change to slack the source shows tolerance %q, want the default 5m0s", back2.Verify.Tolerance)
	}
	// Config sources: "open" (scheme none) and "sw" (standard-webhooks).
	if v := must[sourceView](t, 200)(g.api("GET", "/sources/open", acmeToken, nil)).Verify.Tolerance; v != "" {
		t.Errorf("config source of scheme none shows tolerance %q", v)
	}
	if v := must[sourceView](t, 200)(g.api("GET", "/sources/sw", acmeToken, nil)).Verify.Tolerance; v != "5m0s" {
		t.Errorf("config source of scheme standard-webhooks shows tolerance %q, want 5m0s", v)
	}
}
