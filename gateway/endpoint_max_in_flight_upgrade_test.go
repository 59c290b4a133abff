package gateway

import (
	"context"
	"testing"

	"hookgate/storage"
)

// An endpoint stored by an earlier build, which took any max_in_flight
// through the admin API, keeps its value after the upgrade. A PATCH of
// another field (here: disabling it during an incident) must still be
// possible, as it is for a stored timeout over 1h or a source deleted
// since: the whole merged endpoint was validated, so every PATCH was 422
// "max_in_flight must be from 1 to 10000" until the operator also lowered
// max_in_flight.
func TestPatchOfEndpointStoredWithLargeMaxInFlight(t *testing.T) {
	g := startGateway(t, gwOptions{})
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "wide", "url": "http://receiver.test/wide"}))
	// What an earlier build stored.
	if _, err := g.Store().UpdateEndpoint(context.Background(), "wide", func(ep *storage.Endpoint) error {
		ep.MaxInFlight = 50_000
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	g = g.restart(gwOptions{})
	st, _, b := g.api("PATCH", "/endpoints/wide", acmeToken, jsonMap{"disabled": true})
	if st != 200 {
		t.Fatalf("PATCH {disabled: true} of an endpoint stored with max_in_flight 50000: %d %s; want 200", st, b)
	}
}
