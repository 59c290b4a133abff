package inbound

import (
	"testing"

	"hookgate/storage"
)

// An endpoint's event_types are globs (storage.MatchType): any one of them
// matching the event's type subscribes it, "*" also to a type with "/".
func TestSubscribesMatchesEventTypeGlobs(t *testing.T) {
	for _, c := range []struct {
		typ  string
		want bool
	}{{"orders/create", true}, {"orders/paid", true}, {"invoice.paid", true}, {"products/update", false}} {
		ep := storage.Endpoint{ID: "e", Tenant: "t", EventTypes: []string{"never.this", "orders/*", "invoice.*"}}
		if got := Subscribes(&ep, "shop", c.typ); got != c.want {
			t.Errorf("Subscribes with event_types %q, type %q = %v, want %v", ep.EventTypes, c.typ, got, c.want)
		}
	}
}
