package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"hookgate/gateway/admin"
)

// signGitHub signs body as GitHub does: X-Hub-Signature-256.
func signGitHub(secret string, body []byte) map[string]string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return map[string]string{"X-Hub-Signature-256": "sha256=" + hex.EncodeToString(mac.Sum(nil))}
}

func TestAdminSourcesCRUD(t *testing.T) {
	g := startGateway(t, gwOptions{})
	const secret = "gh-s3cr3t-value"
	st, _, b := g.api("POST", "/sources", acmeToken, jsonMap{"id": "gh", "verify": jsonMap{"scheme": "github", "secrets": []string{secret}}})
	raw := must[jsonMap](t, 201)(st, nil, b)
	if strings.Contains(string(b), secret) || strings.Contains(string(b), "secrets") {
		t.Fatalf("a source answer shows its secrets: %s", b)
	}
	if raw["id"] != "gh" || raw["tenant"] != "acme" || raw["verify"].(jsonMap)["scheme"] != "github" {
		t.Fatalf("created %v", raw)
	}
	for _, path := range []string{"/sources/gh", "/sources", "/sources/sw"} {
		_, _, b := g.api("GET", path, opToken, nil)
		if strings.Contains(string(b), secret) || strings.Contains(string(b), "secrets") || strings.Contains(string(b), strings.TrimPrefix(testSecret, "whsec_")) {
			t.Fatalf("GET %s shows secrets: %s", path, b)
		}
	}
	wantProblem(t, "duplicate", 409, "id")(g.api("POST", "/sources", opToken, jsonMap{"id": "gh", "verify": jsonMap{"scheme": "none"}}))
	wantProblem(t, "config source id", 409, "id")(g.api("POST", "/sources", opToken, jsonMap{"id": "other", "verify": jsonMap{"scheme": "none"}}))

	// It is live at /ingest/gh, verified with its secret.
	body := []byte(`{"action":"opened"}`)
	hdr := signGitHub(secret, body)
	hdr["X-GitHub-Event"], hdr["X-GitHub-Hook-ID"], hdr["X-GitHub-Delivery"] = "issues", "1", "d-1"
	if st, _, b := g.post("gh", body, hdr); st != 202 {
		t.Fatalf("ingest to the new source: %d %s", st, b)
	}
	if st, _, _ := g.post("gh", body, signGitHub("wrong", body)); st != 401 {
		t.Fatalf("a wrong signature: %d", st)
	}

	// PATCH: new secrets (the old ones stop verifying); the rest stays.
	src := must[admin.Source](t, 200)(g.api("PATCH", "/sources/gh", acmeToken, jsonMap{"verify": jsonMap{"secrets": []string{"rotated-secret"}}}))
	if src.Verify.Scheme != "github" || src.Tenant != "acme" {
		t.Fatalf("patched %+v", src)
	}
	hdr["X-GitHub-Delivery"] = "d-2"
	if st, _, _ := g.post("gh", body, hdr); st != 401 {
		t.Fatalf("the replaced secret still verifies: %d", st)
	}
	maps2 := signGitHub("rotated-secret", body)
	maps2["X-GitHub-Delivery"], maps2["X-GitHub-Hook-ID"] = "d-3", "1"
	if st, _, b := g.post("gh", body, maps2); st != 202 {
		t.Fatalf("the new secret: %d %s", st, b)
	}
	// GitHub signs no timestamp: a tolerance would be ignored, so it is refused.
	wantProblem(t, "tolerance on github", 422, "verify.tolerance")(g.api("PATCH", "/sources/gh", acmeToken, jsonMap{"event_type": "json:/action", "verify": jsonMap{"tolerance": "1m"}}))
	src = must[admin.Source](t, 200)(g.api("PATCH", "/sources/gh", acmeToken, jsonMap{"event_type": "json:/action"}))
	if src.EventType != "json:/action" {
		t.Fatalf("patched %+v", src)
	}
	// A scheme change drops the old scheme's fields; secrets stay unless given.
	must[admin.Source](t, 200)(g.api("PATCH", "/sources/gh", acmeToken, jsonMap{"verify": jsonMap{"scheme": "hmac", "header": "X-Sig"}}))
	src = must[admin.Source](t, 200)(g.api("PATCH", "/sources/gh", acmeToken, jsonMap{"verify": jsonMap{"scheme": "shopify"}}))
	if src.Verify.Header != "" || src.Verify.Algorithm != "" {
		t.Fatalf("hmac fields survived a scheme change: %+v", src)
	}

	// Listing and paging.
	l := must[admin.List[admin.Source]](t, 200)(g.api("GET", "/sources?limit=2", acmeToken, nil))
	if len(l.Data) != 2 || l.Data[0].ID != "gh" || l.NextCursor == "" {
		t.Fatalf("page 1 %+v", l)
	}

	// DELETE: ingest knows it no more.
	must[jsonMap](t, 204)(g.api("DELETE", "/sources/gh", acmeToken, nil))
	if st, _, _ := g.post("gh", body, maps2); st != 404 {
		t.Fatalf("ingest to a deleted source: %d", st)
	}
	wantProblem(t, "deleted", 404, "")(g.api("GET", "/sources/gh", acmeToken, nil))
}

func TestAdminSourceValidation(t *testing.T) {
	g := startGateway(t, gwOptions{})
	cases := []struct {
		name   string
		body   any
		status int
		field  string
	}{
		{"no id", jsonMap{"verify": jsonMap{"scheme": "none"}}, 422, "id"},
		{"bad id", jsonMap{"id": "a/b", "verify": jsonMap{"scheme": "none"}}, 422, "id"},
		{"no verify", jsonMap{"id": "s"}, 422, "verify"},
		{"no scheme", jsonMap{"id": "s", "verify": jsonMap{}}, 422, "verify.scheme"},
		{"unknown scheme", jsonMap{"id": "s", "verify": jsonMap{"scheme": "magic"}}, 422, "verify.scheme"},
		{"no secrets", jsonMap{"id": "s", "verify": jsonMap{"scheme": "stripe"}}, 422, "verify.secrets"},
		{"empty secret", jsonMap{"id": "s", "verify": jsonMap{"scheme": "stripe", "secrets": []string{""}}}, 422, "verify.secrets[0]"},
		{"bad whsec", jsonMap{"id": "s", "verify": jsonMap{"scheme": "standard-webhooks", "secrets": []string{"whsec_!!not-base64-s3cr3t"}}}, 422, "verify.secrets[0]"},
		{"secret ending in a newline", jsonMap{"id": "s", "verify": jsonMap{"scheme": "github", "secrets": []string{"ok", "s3cr3t\n"}}}, 422, "verify.secrets[1]"},
		{"none with secrets", jsonMap{"id": "s", "verify": jsonMap{"scheme": "none", "secrets": []string{"x-s3cr3t"}}}, 422, "verify.secrets"},
		{"hmac without header", jsonMap{"id": "s", "verify": jsonMap{"scheme": "hmac", "secrets": []string{"k"}}}, 422, "verify.header"},
		{"hmac algorithm", jsonMap{"id": "s", "verify": jsonMap{"scheme": "hmac", "secrets": []string{"k"}, "header": "X-S", "algorithm": "md5"}}, 422, "verify.algorithm"},
		{"hmac field elsewhere", jsonMap{"id": "s", "verify": jsonMap{"scheme": "none", "header": "X-S"}}, 422, "verify.header"},
		{"bad tolerance", jsonMap{"id": "s", "verify": jsonMap{"scheme": "none", "tolerance": "0s"}}, 422, "verify.tolerance"},
		{"tolerance without timestamp", jsonMap{"id": "s", "verify": jsonMap{"scheme": "github", "secrets": []string{"k"}, "tolerance": "10m"}}, 422, "verify.tolerance"},
		{"bad event_id", jsonMap{"id": "s", "verify": jsonMap{"scheme": "none"}, "event_id": "body:/id"}, 422, "event_id"},
		{"bad event_type", jsonMap{"id": "s", "verify": jsonMap{"scheme": "none"}, "event_type": "json:id"}, 422, "event_type"},
		{"unknown field", jsonMap{"id": "s", "verify": jsonMap{"scheme": "none", "secret": "x"}}, 400, "secret"},
		{"wrong type", jsonMap{"id": "s", "verify": jsonMap{"scheme": "none", "secrets": "x"}}, 400, "verify.secrets"},
	}
	for _, c := range cases {
		st, hdr, b := g.api("POST", "/sources", opToken, c.body)
		wantProblem(t, c.name, c.status, c.field)(st, hdr, b)
		if strings.Contains(string(b), "s3cr3t") {
			t.Fatalf("%s: the problem echoes a secret: %s", c.name, b)
		}
	}
	if l := must[admin.List[admin.Source]](t, 200)(g.api("GET", "/sources", opToken, nil)); len(l.Data) != 3 {
		t.Fatalf("refused requests created sources: %+v", l)
	}
	wantProblem(t, "patch id", 422, "id")(g.api("PATCH", "/sources/open", opToken, jsonMap{"id": "x"}))
	wantProblem(t, "patch to invalid", 422, "verify.secrets")(g.api("PATCH", "/sources/open", opToken, jsonMap{"verify": jsonMap{"scheme": "stripe"}}))
	// The refused patch left the source working.
	if st, _, b := g.post("open", []byte(`{"id":"still"}`), nil); st != 202 {
		t.Fatalf("ingest after a refused patch: %d %s", st, b)
	}
}

// A Standard Webhooks source's secrets are whsec_ + base64 in the admin
// API as in config.yaml: a secret without the prefix (or not base64) is a
// 422 naming it, where before the API took what config.yaml refuses.
func TestSourceStandardWebhooksSecretNeedsItsPrefix(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for i, c := range []struct {
		secret string
		status int
	}{
		{"c2VjcmV0LXNlY3JldC1zZWNyZXQ=", 422},
		{"whsec_not base64!", 422},
		{"whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ=", 201},
	} {
		st, hdr, b := g.api("POST", "/sources", acmeToken, jsonMap{"id": fmt.Sprintf("sw%d", i), "verify": jsonMap{"scheme": "standard-webhooks", "secrets": []string{c.secret}}})
		if st != c.status {
			t.Fatalf("POST /sources with secret %.10s…: %d %s, want %d", c.secret, st, b, c.status)
		}
		if st == 422 {
			if p := decodeProblem(t, hdr, b); p.Field != "verify.secrets[0]" || strings.Contains(string(b), c.secret) {
				t.Errorf("problem %s: want field verify.secrets[0], without the secret", b)
			}
		}
	}
}

// TestDeletedSourceDoesNotWedgeEndpointPatch: DELETE /sources/{id} leaves
// the endpoints whose "sources" filter names it as they are. A PATCH of
// such an endpoint (disable it, move it) must not be refused because the
// stored filter names the deleted source; a source the PATCH adds must
// still exist.
func TestDeletedSourceDoesNotWedgeEndpointPatch(t *testing.T) {
	g := startGateway(t, gwOptions{})
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "e1", "url": "http://receiver.test/e1", "sources": []string{"open"}}))
	must[jsonMap](t, 204)(g.api("DELETE", "/sources/open", acmeToken, nil))

	if ep := must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/e1", acmeToken, jsonMap{"disabled": true})); !ep.Disabled {
		t.Fatalf("not disabled: %+v", ep)
	}
	if ep := must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/e1", acmeToken, jsonMap{"url": "http://receiver.test/moved"})); ep.URL != "http://receiver.test/moved" {
		t.Fatalf("not moved: %+v", ep)
	}
	wantProblem(t, "adding a missing source", 422, "sources[1]")(g.api("PATCH", "/endpoints/e1", acmeToken, jsonMap{"sources": []string{"open", "nope"}}))
	wantProblem(t, "adding another tenant's source", 422, "sources[0]")(g.api("PATCH", "/endpoints/e1", acmeToken, jsonMap{"sources": []string{"other"}}))
	if ep := must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/e1", acmeToken, jsonMap{"sources": []string{"sw"}})); len(ep.Sources) != 1 || ep.Sources[0] != "sw" {
		t.Fatalf("sources not replaced: %+v", ep)
	}
}

// TestSourceViewRoundTripsOnSchemeWithoutTimestamp: since tolerance is
// refused on schemes that sign no timestamp, a github source must not be
// shown with one, from config.yaml or the API, nor keep the one of a
// scheme it was changed from; else a client that PATCHes back the verify
// block it read is refused 422. A change back to a timestamp scheme gets
// the default again.
func TestSourceViewRoundTripsOnSchemeWithoutTimestamp(t *testing.T) {
	g := startGateway(t, gwOptions{})
	src := must[admin.Source](t, 201)(g.api("POST", "/sources", acmeToken, jsonMap{"id": "gh", "verify": jsonMap{"scheme": "github", "secrets": []string{"gh-secret"}}}))
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
	must[admin.Source](t, 201)(g.api("POST", "/sources", acmeToken, jsonMap{"id": "st", "verify": jsonMap{"scheme": "stripe", "secrets": []string{"whsec_x"}, "tolerance": "10m"}}))
	moved := must[admin.Source](t, 200)(g.api("PATCH", "/sources/st", acmeToken, jsonMap{"verify": jsonMap{"scheme": "github"}}))
	if moved.Verify.Tolerance != "" {
		t.Errorf("after a change to github the source still shows tolerance %q", moved.Verify.Tolerance)
	}
	back2 := must[admin.Source](t, 200)(g.api("PATCH", "/sources/st", acmeToken, jsonMap{"verify": jsonMap{"scheme": "slack"}}))
	if back2.Verify.Tolerance != "5m0s" {
		t.Errorf("after a change to slack the source shows tolerance %q, want the default 5m0s", back2.Verify.Tolerance)
	}
	// Config sources: "open" (scheme none) and "sw" (standard-webhooks).
	if v := must[admin.Source](t, 200)(g.api("GET", "/sources/open", acmeToken, nil)).Verify.Tolerance; v != "" {
		t.Errorf("config source of scheme none shows tolerance %q", v)
	}
	if v := must[admin.Source](t, 200)(g.api("GET", "/sources/sw", acmeToken, nil)).Verify.Tolerance; v != "5m0s" {
		t.Errorf("config source of scheme standard-webhooks shows tolerance %q, want 5m0s", v)
	}
}
