package badger

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// Cursors are opaque: the ID a page ended at, sealed with AES-256-GCM under
// a key kept in the store (so cursors outlive a restart, as bulk replays
// store theirs). A page that runs out of its scan budget ends at the last
// record it looked at, which may be another tenant's: a plain cursor would
// show that record's ID, and with it that the record exists and when it
// was made.
//
// Plain cursors, the base64url of an ID (earlier builds), are still read:
// a cursor only says where a listing goes on, within the caller's filter,
// so a forged one reveals nothing.

// keyCursorSecret holds the sealing key.
var keyCursorSecret = []byte("zz:cursor-key")

// sealedCursor marks a sealed cursor; a plain one starts with an ID
// ("evt_", "dlv_").
const sealedCursor = 1

// loadCursorKey reads the sealing key, or makes and stores one.
func (db *DB) loadCursorKey(ctx context.Context) (cipher.AEAD, error) {
	var secret []byte
	get := func(txn *bdg.Txn) error {
		item, err := txn.Get(keyCursorSecret)
		if err != nil {
			return err
		}
		secret, err = item.ValueCopy(nil)
		return err
	}
	err := db.view(get)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		err = db.update(ctx, 64, func(txn *bdg.Txn) error {
			if err := get(txn); !errors.Is(err, bdg.ErrKeyNotFound) {
				return err
			}
			secret = make([]byte, 32)
			rand.Read(secret)
			return txn.Set(keyCursorSecret, secret)
		})
	}
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(secret)
	if err != nil {
		return nil, fmt.Errorf("cursor key: %w", err)
	}
	return cipher.NewGCM(block)
}

func (db *DB) encodeCursor(id string) string {
	nonce := make([]byte, 1+db.cursors.NonceSize(), 1+db.cursors.NonceSize()+len(id)+db.cursors.Overhead())
	nonce[0] = sealedCursor
	rand.Read(nonce[1:])
	return base64.RawURLEncoding.EncodeToString(db.cursors.Seal(nonce, nonce[1:], []byte(id), nil))
}

func (db *DB) decodeCursor(c, idPrefix string) (string, error) {
	if c == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) == 0 {
		return "", storage.ErrBadCursor
	}
	if b[0] == sealedCursor {
		n := db.cursors.NonceSize()
		if len(b) < 1+n {
			return "", storage.ErrBadCursor
		}
		if b, err = db.cursors.Open(nil, b[1:1+n], b[1+n:], nil); err != nil {
			return "", storage.ErrBadCursor
		}
	}
	if !bytes.HasPrefix(b, []byte(idPrefix)) {
		return "", storage.ErrBadCursor
	}
	if _, ok := storage.IDTime(idPrefix, string(b)); !ok {
		return "", storage.ErrBadCursor
	}
	return string(b), nil
}
