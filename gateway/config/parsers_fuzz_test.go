package config

import (
	"errors"
	"math/big"
	"strings"
	"testing"
)

// Fuzz targets for config.yaml's own parsers of values: ${VAR} expansion
// and sizes (FuzzParseConfig, in fuzz_test.go, takes whole files).

// -------------------------------------------------------------- ${VAR}

// FuzzExpandEnv: a config value built from literal text (with its $
// written $$), ${NAME} and ${NAME:-default} expands to the literal text
// and the variable's value, its default when unset or empty; "unset"
// names exactly the variables referenced without a default that are not
// set; and no input panics or loses a literal.
func FuzzExpandEnv(f *testing.F) {
	f.Add("postgres://", "DB_HOST", "localhost", true, false, ":5432/$x", "${")
	f.Add("", "HOOKGATE_ADMIN_TOKEN", "", false, true, "", "${A:-b}c")
	f.Add("hg_", "T", "", true, true, "$$", "$")
	f.Add("a}b", "_9", "v}$", false, false, "{", "${1A}")
	f.Fuzz(func(t *testing.T, pre, name, def string, set, withDef bool, post, raw string) {
		if !validEnvName(name) || strings.Contains(def, "}") {
			// Still: an arbitrary value never panics, and expands the same twice.
			a, errA := expandEnv(raw, noEnv)
			b, errB := expandEnv(raw, noEnv)
			if (errA == nil) != (errB == nil) || a.value != b.value {
				t.Fatalf("expandEnv(%q) not deterministic", raw)
			}
			return
		}
		const value = "s3cr$t}v"
		lookup := func(n string) (string, bool) {
			if n == name && set {
				return value, true
			}
			return "", false
		}
		esc := func(s string) string { return strings.ReplaceAll(s, "$", "$$") }
		ref := "${" + name + "}"
		want := pre + post
		if set {
			want = pre + value + post
		}
		if withDef {
			ref = "${" + name + ":-" + def + "}"
			if !set {
				want = pre + def + post
			}
		}
		got, err := expandEnv(esc(pre)+ref+esc(post), lookup)
		if withDef && strings.Contains(def, "${") {
			// ${A:-${B}} would be the text "${B}": refused.
			if !errors.Is(err, errNestedRef) {
				t.Fatalf("expandEnv(%q) = %q, %v; want errNestedRef", esc(pre)+ref+esc(post), got.value, err)
			}
			return
		}
		if err != nil || got.value != want {
			t.Fatalf("expandEnv(%q) = %q, %v; want %q", esc(pre)+ref+esc(post), got.value, err, want)
		}
		wantUnset := !set && !withDef
		if (len(got.unset) == 1 && got.unset[0] == name) != wantUnset || len(got.unset) > 1 {
			t.Fatalf("expandEnv(%q): unset %q, want %v", esc(pre)+ref+esc(post), got.unset, wantUnset)
		}
		// A literal alone round-trips.
		if lit, err := expandEnv(esc(raw), noEnv); err != nil || lit.value != raw || len(lit.unset) > 0 {
			t.Fatalf("expandEnv(%q) = %+v, %v; want %q", esc(raw), lit, err, raw)
		}
	})
}

// ----------------------------------------------------------------- sizes

// FuzzParseSize: ParseSize agrees with the test's big-integer reading of
// "<digits> <unit>" (surrounding blanks allowed, units case-insensitive),
// never returns a negative or overflowed size, and String round-trips.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1MiB", "512KiB", "1048576", "10MB", " 1 gib ", "0", "8589934591GiB", "9223372036854775807",
		"9223372036854775808", "-1", "1.5MiB", "1 MiB B", "1e3", "0x10", "１MiB", "1\u00a0KiB", ""} {
		f.Add(s)
	}
	mult := map[string]int64{"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 1e3, "mb": 1e6, "gb": 1e9}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSize(s)
		// Reference: digits, blanks, unit.
		ts := strings.TrimSpace(s)
		i := 0
		for i < len(ts) && ts[i] >= '0' && ts[i] <= '9' {
			i++
		}
		m, unitOK := mult[strings.ToLower(strings.TrimSpace(ts[i:]))]
		valid := i > 0 && unitOK
		if valid {
			n, _ := new(big.Int).SetString(ts[:i], 10)
			n.Mul(n, big.NewInt(m))
			valid = n.IsInt64()
			if valid && (err != nil || int64(got) != n.Int64()) {
				t.Fatalf("ParseSize(%q) = %d, %v; want %s", s, got, err, n)
			}
		}
		if !valid {
			if err == nil {
				t.Fatalf("ParseSize(%q) = %d, want an error", s, got)
			}
			return
		}
		if got < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, got)
		}
		if back, err := ParseSize(got.String()); err != nil || back != got {
			t.Fatalf("ParseSize(%q).String() = %q, which parses to %d, %v", s, got.String(), back, err)
		}
	})
}
