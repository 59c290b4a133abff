package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"hookgate/internal/pgtest"
	"hookgate/storage"
	"hookgate/storage/postgres"
	"hookgate/storage/storagetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// opener opens stores of one schema: a store each test, a reopen on the
// same schema a restart.
func opener() storagetest.Opener {
	schemas := map[storage.Store]string{}
	openOn := func(t *testing.T, dsn, schema string) storage.Store {
		db, err := postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema, MaxConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		schemas[db] = schema
		return db
	}
	return storagetest.Opener{
		Open: func(t *testing.T) storage.Store {
			dsn, schema := pgtest.Schema(t)
			return openOn(t, dsn, schema)
		},
		Peer: func(t *testing.T, s storage.Store) storage.Store {
			return openOn(t, pgtest.DSN(t), schemas[s])
		},
		Reopen: func(t *testing.T, s storage.Store) storage.Store {
			schema := schemas[s]
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			return openOn(t, pgtest.DSN(t), schema)
		},
	}
}

func TestConformance(t *testing.T) {
	pgtest.DSN(t)
	storagetest.Run(t, opener())
}

// Gateways starting at once on an empty schema all come up: the advisory
// lock lets one create the schema, and the others find it made.
func TestConcurrentOpensMigrateOnce(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	const n = 6
	errs := make(chan error, n)
	dbs := make(chan *postgres.DB, n)
	for range n {
		go func() {
			db, err := postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema, MaxConns: 2})
			errs <- err
			dbs <- db
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("a concurrent open: %v", err)
		}
		if db := <-dbs; db != nil {
			defer db.Close()
		}
	}
	conn := connect(t, dsn, schema)
	var versions int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM hookgate_schema`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != postgres.SchemaVersion() {
		t.Fatalf("%d schema versions recorded, want %d (each migration once)", versions, postgres.SchemaVersion())
	}
}

// A database migrated by a newer build is refused, saying so.
func TestNewerSchemaRefused(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	db, err := postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	conn := connect(t, dsn, schema)
	if _, err := conn.Exec(context.Background(), `INSERT INTO hookgate_schema (version) VALUES ($1)`, postgres.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	_, err = postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema})
	if !errors.Is(err, postgres.ErrNewerSchema) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("open of a newer schema: %v, want ErrNewerSchema", err)
	}
}

// The DSN's password never appears in an error: not for a wrong
// password, not for a server out of reach, not for a DSN that does not
// parse.
func TestOpenErrorsHideThePassword(t *testing.T) {
	dsn := pgtest.DSN(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "s3cret-Pa55word"
	bad := []string{
		fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable&connect_timeout=2", cfg.User, secret, cfg.Host, cfg.Port, cfg.Database),
		fmt.Sprintf("postgres://nobody:%s@127.0.0.1:1/db?sslmode=disable&connect_timeout=2", secret),
		fmt.Sprintf("postgres://nobody:%s@127.0.0.1:notaport/db", secret),
	}
	for _, d := range bad {
		db, err := postgres.Open(context.Background(), d, postgres.Options{})
		if err == nil {
			// The test server trusts every local user: a wrong password
			// is not refused there, and that case says nothing.
			db.Close()
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

func connect(t *testing.T, dsn, schema string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// A write of an endpoint or a source through one handle changes the
// catalog version another handle reads.
func TestCatalogVersionSeesPeersWrites(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	a := openDB(t, dsn, schema)
	b := openDB(t, dsn, schema)
	ctx := context.Background()
	v0, err := b.CatalogVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PutEndpoint(ctx, &storage.Endpoint{ID: "ep", Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	v1, _ := b.CatalogVersion(ctx)
	if err := a.DeleteEndpoint(ctx, "ep"); err != nil {
		t.Fatal(err)
	}
	if err := a.PutSource(ctx, &storage.Source{ID: "src", Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	v2, _ := b.CatalogVersion(ctx)
	if v1 == v0 || v2 == v1 {
		t.Fatalf("catalog versions %d, %d, %d: want a change after each write", v0, v1, v2)
	}
}

// A cluster lock is held by one handle at a time, is free again after
// unlock, and is taken over when its holder's connection dies.
func TestClusterLock(t *testing.T) {
	dsn, schema := pgtest.Schema(t)
	a := openDB(t, dsn, schema)
	b := openDB(t, dsn, schema)
	ctx := context.Background()
	unlock, _, ok, err := a.TryLock(ctx, "job")
	if err != nil || !ok {
		t.Fatalf("first TryLock: %v %v", ok, err)
	}
	if _, _, ok, err := b.TryLock(ctx, "job"); err != nil || ok {
		t.Fatalf("TryLock of a held lock: ok %v, err %v; want refused", ok, err)
	}
	// Another schema (another test, or another deployment in one
	// database) has locks of its own.
	dsn2, schema2 := pgtest.Schema(t)
	c := openDB(t, dsn2, schema2)
	if u, _, ok, err := c.TryLock(ctx, "job"); err != nil || !ok {
		t.Fatalf("TryLock in another schema: %v %v", ok, err)
	} else {
		u()
	}
	unlock()
	unlock() // twice is fine
	u2, lost, ok, err := b.TryLock(ctx, "job")
	if err != nil || !ok {
		t.Fatalf("TryLock after unlock: %v %v", ok, err)
	}
	// The holder's session ends (as when its gateway dies): the lock is
	// free for the others, and the holder is told.
	conn := connect(t, dsn, schema)
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()
		AND objid = (hashtextextended($1 || '/job', 0) & 4294967295)::oid`, schema); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the holder was not told that its lock is gone")
	}
	u2()
	deadline := time.Now().Add(10 * time.Second)
	for {
		u, _, ok, err := a.TryLock(ctx, "job")
		if err == nil && ok {
			u()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead holder's lock was not taken over: %v %v", ok, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func openDB(t *testing.T, dsn, schema string) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
