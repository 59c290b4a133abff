package inbound

import (
	"testing"

	"hookgate/storage"
)

// TestMatchTypeTreatsSlashAsAnyCharacter: event types are flat names, and
// some hold a "/" (Shopify topics such as "orders/create", composite type
// expressions). "*", the glob users write for "every type", must match
// them; path.Match alone stops "*" at "/".
func TestMatchTypeTreatsSlashAsAnyCharacter(t *testing.T) {
	cases := []struct {
		glob, typ string
		want      bool
	}{
		{"*", "orders/create", true},
		{"*", "app/uninstalled", true},
		{"*", "invoice.paid", true},
		{"orders/*", "orders/create", true},
		{"orders/*", "orders/partially/fulfilled", true},
		{"orders/*", "products/create", false},
		{"*/create", "orders/create", true},
		{"*/create", "orders/update", false},
		{"orders?create", "orders/create", true},
		{`orders\/create`, "orders/create", true},
		{"orders/create", "orders/create", true},
		{"orders/create", "orders/createx", false},
		{"invoice.*", "invoice.paid", true},
		{"invoice.*", "invoice.payment/failed", true},
		{"invoice.*", "customer.created", false},
		{"[io]nvoice.*", "invoice.paid", true},
		{"[^i]nvoice.*", "invoice.paid", false},
		{"[", "[", false}, // malformed: matches nothing
	}
	for _, c := range cases {
		if got := MatchType(c.glob, c.typ); got != c.want {
			t.Errorf("MatchType(%q, %q) = %v, want %v", c.glob, c.typ, got, c.want)
		}
		ep := storage.Endpoint{ID: "e", Tenant: "t", EventTypes: []string{"never.this", c.glob}}
		if got := Subscribes(&ep, "shop", c.typ); got != c.want {
			t.Errorf("Subscribes with event_types %q, type %q = %v, want %v", ep.EventTypes, c.typ, got, c.want)
		}
	}
}

func TestValidTypeGlob(t *testing.T) {
	for _, g := range []string{"*", "invoice.*", "orders/*", "[a-c]?", `x\*`} {
		if err := ValidTypeGlob(g); err != nil {
			t.Errorf("ValidTypeGlob(%q) = %v, want nil", g, err)
		}
	}
	for _, g := range []string{"", "[", "a[", `x\`, "[]"} {
		if ValidTypeGlob(g) == nil {
			t.Errorf("ValidTypeGlob(%q) = nil, want an error", g)
		}
	}
}
