package gateway

import "testing"

// TestDeletedSourceDoesNotWedgeEndpointPatch: DELETE /sources/{id} leaves
// the endpoints whose "sources" filter names it as they are. A PATCH of
// such an endpoint (disable it, move it) must not be refused because the
// stored filter names the deleted source; a source the PATCH adds must
// still exist.
func TestDeletedSourceDoesNotWedgeEndpointPatch(t *testing.T) {
	g := startGateway(t, gwOptions{})
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "e1", "url": "http://receiver.test/e1", "sources": []string{"open"}}))
	must[jsonMap](t, 204)(g.api("DELETE", "/sources/open", acmeToken, nil))

	if ep := must[endpointView](t, 200)(g.api("PATCH", "/endpoints/e1", acmeToken, jsonMap{"disabled": true})); !ep.Disabled {
		t.Fatalf("not disabled: %+v", ep)
	}
	if ep := must[endpointView](t, 200)(g.api("PATCH", "/endpoints/e1", acmeToken, jsonMap{"url": "http://receiver.test/moved"})); ep.URL != "http://receiver.test/moved" {
		t.Fatalf("not moved: %+v", ep)
	}
	wantProblem(t, "adding a missing source", 422, "sources[1]")(g.api("PATCH", "/endpoints/e1", acmeToken, jsonMap{"sources": []string{"open", "nope"}}))
	wantProblem(t, "adding another tenant's source", 422, "sources[0]")(g.api("PATCH", "/endpoints/e1", acmeToken, jsonMap{"sources": []string{"other"}}))
	if ep := must[endpointView](t, 200)(g.api("PATCH", "/endpoints/e1", acmeToken, jsonMap{"sources": []string{"sw"}})); len(ep.Sources) != 1 || ep.Sources[0] != "sw" {
		t.Fatalf("sources not replaced: %+v", ep)
	}
}
