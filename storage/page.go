package storage

import (
	"encoding/base64"
	"strings"
)

// Page sizes of the Inspector's listings, the same on every engine.
const (
	// DefaultPageLimit is a page's size when the caller names none.
	DefaultPageLimit = 50
	// MaxPageLimit is the largest page a listing returns.
	MaxPageLimit = 1000
)

// PageLimit is the page size for a requested limit: the default for none
// (or a negative one), at most MaxPageLimit.
func PageLimit(n int) int {
	switch {
	case n <= 0:
		return DefaultPageLimit
	case n > MaxPageLimit:
		return MaxPageLimit
	}
	return n
}

// Cursors are opaque to clients: the base64url of the id a page ended at.
// A cursor is a position, not a record: it stays good whatever was purged
// since, and on every engine (a gateway of one engine reads another's).

// EncodeCursor is the cursor of a page that ended at id.
func EncodeCursor(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

// DecodeCursor returns the id a cursor names ("" for no cursor), or
// ErrBadCursor for one no listing of ids with idPrefix made.
func DecodeCursor(c, idPrefix string) (string, error) {
	if c == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || !strings.HasPrefix(string(b), idPrefix) {
		return "", ErrBadCursor
	}
	if _, ok := IDTime(idPrefix, string(b)); !ok {
		return "", ErrBadCursor
	}
	return string(b), nil
}
