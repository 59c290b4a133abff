package storage

import (
	"path"
	"strings"
	"testing"
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
		// Classes are taken by their characters, "/" too.
		{"a[+-/]b", "a.b", true},
		{"a[+-/]b", "a/b", true},
		{"a[.-0]b", "a/b", true},
		{"a[/-9]b", "a!b", false},
		{"a[^/]b", "a/b", false},
		{`a[\]x]b`, "a]b", true},
		{`a[\]x]b`, "a-b", false},
		{"*a*a*a*a*a*a*b", strings.Repeat("a", 400), false},
		{"é?", "éß", true},
		{"*??", "€", false}, // one character, not three bytes
		{"*[^é]", "é", false},
	}
	for _, c := range cases {
		if got := MatchType(c.glob, c.typ); got != c.want {
			t.Errorf("MatchType(%q, %q) = %v, want %v", c.glob, c.typ, got, c.want)
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

// FuzzMatchType: on ASCII types and globs without "/", where MatchType
// and path.Match mean the same, they agree; and no glob or type panics.
// (Beyond ASCII path.Match lets "*" stop inside a character, so "*??"
// matches "€"; MatchType goes a whole character at a time.)
func FuzzMatchType(f *testing.F) {
	for _, seed := range [][2]string{
		{"*", "invoice.paid"}, {"invoice.*", "invoice.paid"}, {"[a-c]?x", "bzx"}, {"[^a]*", "abc"},
		{`\*x`, "*x"}, {"a[+-/]b", "a.b"}, {"*a*b*c", "aXbYc"}, {"[", "["}, {"é[à-ü]", "éö"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, glob, typ string) {
		got := MatchType(glob, typ)
		if strings.Contains(glob, "/") || strings.Contains(typ, "/") || !ascii(glob) || !ascii(typ) {
			return
		}
		want, err := path.Match(glob, typ)
		if err != nil || glob == "" {
			want = false
		}
		if got != want {
			t.Fatalf("MatchType(%q, %q) = %v, path.Match says %v", glob, typ, got, want)
		}
	})
}

func ascii(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
