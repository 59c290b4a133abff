package badger

import (
	"bytes"
	"encoding/base64"

	"hookgate/storage"
)

// Cursors are opaque to clients: the base64url of the ID a page ended at.
// A page cut short by the scan budget ends at the last record it looked
// at, which need not match the filter; a tenant's listing only ever looks
// at that tenant's records (inspect.go), so a cursor never names another
// tenant's.
func (db *DB) encodeCursor(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

func (db *DB) decodeCursor(c, idPrefix string) (string, error) {
	if c == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || !bytes.HasPrefix(b, []byte(idPrefix)) {
		return "", storage.ErrBadCursor
	}
	if _, ok := storage.IDTime(idPrefix, string(b)); !ok {
		return "", storage.ErrBadCursor
	}
	return string(b), nil
}
