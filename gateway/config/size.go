package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size is a byte count written in config.yaml as plain bytes ("1048576") or
// with a unit: binary KiB, MiB, GiB (powers of 1024) or decimal KB, MB, GB
// (powers of 1000). Units are case-insensitive; the number is a whole number.
type Size int64

// sizeUnits lists the accepted units with their multipliers.
var sizeUnits = []struct {
	name string
	mult int64
}{
	{"", 1}, {"B", 1},
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
}

// errSizeSyntax explains the accepted forms; ParseSize wraps it.
var errSizeSyntax = errors.New("want a whole number of bytes, optionally with a unit: B, KiB, MiB, GiB, KB, MB, GB")

// ParseSize parses a size such as "1MiB", "512KiB", "10MB" or "1048576".
// It is exported so the admin API can accept the same notation as config.yaml.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	digits := len(t) - len(strings.TrimLeft(t, "0123456789"))
	if digits == 0 {
		return 0, fmt.Errorf("invalid size %q: %w", s, errSizeSyntax)
	}
	n, err := strconv.ParseInt(t[:digits], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	unit := strings.TrimSpace(t[digits:])
	for _, u := range sizeUnits {
		if strings.EqualFold(unit, u.name) {
			if n > math.MaxInt64/u.mult {
				return 0, fmt.Errorf("invalid size %q: too large", s)
			}
			return Size(n * u.mult), nil
		}
	}
	return 0, fmt.Errorf("invalid size %q: %w", s, errSizeSyntax)
}

// String formats s with the largest binary unit that divides it exactly
// ("1MiB", "512KiB"), else as plain bytes, so ParseSize(s.String()) == s.
func (s Size) String() string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if s != 0 && int64(s)%u.mult == 0 {
			return strconv.FormatInt(int64(s)/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// MarshalText implements encoding.TextMarshaler, so sizes render as "1MiB" in JSON.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseSize.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}
