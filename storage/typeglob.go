package storage

import (
	"errors"
	"path"
	"strings"
	"unicode/utf8"
)

// MatchType reports whether an event type matches a glob: an endpoint's
// event_types entry, or the type filter of a listing. The syntax is
// path.Match's: "*" any run of characters, "?" one, "[...]" a class ("^"
// negates, "a-z" ranges, "\" escapes); a type without any of these
// matches only itself. But a type is a flat name, not a path: "*" and "?"
// match "/" too, so "*" takes Shopify's "orders/create" and "orders/*"
// every orders topic. A malformed glob matches nothing (ValidTypeGlob
// refuses it first).
func MatchType(glob, typ string) bool {
	if !IsTypeGlob(glob) {
		return glob != "" && glob == typ
	}
	return ValidTypeGlob(glob) == nil && matchGlob(glob, typ)
}

// IsTypeGlob reports whether glob holds any of the glob syntax ("*", "?",
// "[", "\"): without, it is a plain type that matches only itself.
func IsTypeGlob(glob string) bool { return strings.ContainsAny(glob, `*?[\`) }

// ValidTypeGlob reports why glob cannot be an event_types filter, if it cannot.
func ValidTypeGlob(glob string) error {
	if glob == "" {
		return errors.New("is empty")
	}
	_, err := path.Match(glob, "") // checks the whole pattern's syntax
	return err
}

// matchGlob matches a valid glob against s. It goes forward token by token
// and, on a mismatch, lets the last "*" take one more character: at most
// len(glob)·len(s) steps, whatever the glob (a tenant's globs run on every
// ingest of its events).
func matchGlob(p, s string) bool {
	star, starS := -1, 0 // after the last "*", and where its run ends in s
	pi, si := 0, 0
	for si < len(s) {
		if pi < len(p) {
			if p[pi] == '*' {
				pi++
				star, starS = pi, si
				continue
			}
			if n, k, ok := matchOne(p[pi:], s[si:]); ok {
				pi, si = pi+k, si+n
				continue
			}
		}
		if star < 0 {
			return false
		}
		_, n := utf8.DecodeRuneInString(s[starS:])
		starS += n
		pi, si = star, starS
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// matchOne matches the glob's first token, not "*", against the first
// character of s (not empty): the bytes of s and of the glob it takes.
func matchOne(p, s string) (n, k int, ok bool) {
	r, n := utf8.DecodeRuneInString(s)
	switch p[0] {
	case '?':
		return n, 1, true
	case '[':
		k, ok := matchClass(p, r)
		return n, k, ok
	default: // a literal, maybe escaped: the same bytes (as path.Match)
		lit := p
		if p[0] == '\\' {
			lit = p[1:]
		}
		_, w := utf8.DecodeRuneInString(lit)
		return w, w + len(p) - len(lit), strings.HasPrefix(s, lit[:w])
	}
}

// matchClass reports whether r is in the class p starts with ("[...]",
// valid) and how many bytes of p the class takes.
func matchClass(p string, r rune) (int, bool) {
	i, negated := 1, false
	if p[i] == '^' {
		negated, i = true, i+1
	}
	in := false
	for first := true; first || p[i] != ']'; first = false {
		lo, w := classChar(p[i:])
		i += w
		hi := lo
		if p[i] == '-' {
			hi, w = classChar(p[i+1:])
			i += 1 + w
		}
		if lo <= r && r <= hi {
			in = true
		}
	}
	return i + 1, in != negated
}

// classChar decodes one character of a glob, "\"-escaped or not, and the
// bytes it takes.
func classChar(p string) (rune, int) {
	if p[0] == '\\' {
		r, w := utf8.DecodeRuneInString(p[1:])
		return r, 1 + w
	}
	return utf8.DecodeRuneInString(p)
}
