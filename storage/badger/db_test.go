package badger_test

import (
	"testing"

	"go.uber.org/goleak"

	"hookgate/storage"
	"hookgate/storage/badger"
	"hookgate/storage/storagetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storagetest.Run(t, storagetest.Opener{
		Open: func(t *testing.T) storage.Store {
			db, err := badger.Open(t.TempDir(), badger.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return db
		},
		Reopen: func(t *testing.T, s storage.Store) storage.Store {
			db := s.(*badger.DB)
			dir := db.Dir()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := badger.Open(dir, badger.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return db
		},
	})
}
