// Package postgres is hookgate's PostgreSQL engine: the store that lets
// several gateways share one database (SPEC section 6).
//
// Every promise of package storage is kept by the database itself, never
// by a read before a write: the dedupe claim is a unique key taken with
// INSERT … ON CONFLICT, deliveries are claimed with FOR UPDATE SKIP
// LOCKED under a lease that every outcome write checks, and an admin
// Idempotency-Key is a row claimed the same way. A write returns nil only
// once its transaction has committed (durable as the database's
// synchronous_commit is set; the default, on, is the durable one).
//
// The engine keeps no state of its own that another gateway would need:
// what a second gateway must see is in the database.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"hookgate/storage"
)

var _ storage.Store = (*DB)(nil)

// MaxConnsDefault is the pool size per gateway when Options.MaxConns is
// zero (storage.postgres.max_conns).
const MaxConnsDefault = 20

// Options configure the engine.
type Options struct {
	// MaxConns bounds the connections of this gateway's pool.
	MaxConns int
	// Logger receives the engine's warnings; slog.Default() when nil.
	Logger *slog.Logger
	// Schema, when set, is the schema the engine's tables live in (its
	// search_path); the DSN's own search_path otherwise. Tests give each
	// store a schema of its own.
	Schema string
}

// DB is a store on PostgreSQL. It is safe for concurrent use, also by
// several processes on one database.
type DB struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	closed atomic.Bool
	secret string // the DSN's password, never to appear in an error

	purgeMu   sync.Mutex
	purgeFrom purgeCursor // where the current purge pass goes on

	channel string // the schema's NOTIFY channel (wakeChannel)
	self    string // this handle's name in its announcements
	wake    *waker // sends announcements

	outcomes outcomeGroups // Complete's group writes
}

// Open connects to the database at dsn, creates or migrates its schema,
// and returns the store. It fails, saying why, when the database cannot
// be reached or has a schema newer than this binary knows. Neither the
// DSN nor its password appears in an error.
func Open(ctx context.Context, dsn string, opts Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("postgres: the DSN cannot be parsed (check storage.postgres.dsn)")
	}
	cfg.MaxConns = int32(max(1, cmpOr(opts.MaxConns, MaxConnsDefault)))
	if opts.Schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = opts.Schema
	}
	db := &DB{log: opts.Logger, secret: cfg.ConnConfig.Password, self: newSelf(), wake: newWaker()}
	if db.log == nil {
		db.log = slog.Default()
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, db.redact(fmt.Errorf("postgres: connect: %w", err))
	}
	db.pool = pool
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, db.redact(err)
	}
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		pool.Close()
		return nil, db.redact(fmt.Errorf("postgres: read the schema: %w", err))
	}
	db.channel = wakeChannel(schema)
	return db, nil
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Close closes the pool. It is safe to call more than once.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		return nil
	}
	db.stopAnnouncing()
	db.outcomes.wg.Wait() // the outcomes queued before Close are written
	db.pool.Close()
	return nil
}

// Ping reports whether the database takes writes: a read-only or full
// database, or one out of reach, fails it.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.check(); err != nil {
		return err
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO heartbeat (id, at) VALUES (1, $1)
		ON CONFLICT (id) DO UPDATE SET at = excluded.at`, time.Now().UnixNano())
	return db.fail("ping", err)
}

// check refuses a call on a closed store.
func (db *DB) check() error {
	if db.closed.Load() {
		return storage.ErrClosed
	}
	return nil
}

// fail wraps a database error with what was being done; nil stays nil.
// An error after Close is ErrClosed. The engine never reports
// storage.ErrStoreFailed: a database that is away comes back, and the
// gateway answers 503 until it does.
func (db *DB) fail(what string, err error) error {
	if err == nil {
		return nil
	}
	if db.closed.Load() {
		return storage.ErrClosed
	}
	return db.redact(fmt.Errorf("postgres: %s: %w", what, err))
}

// redact keeps the DSN's password out of an error's text.
func (db *DB) redact(err error) error {
	if err == nil || db.secret == "" || !strings.Contains(err.Error(), db.secret) {
		return err
	}
	return redacted{err: err, secret: db.secret}
}

type redacted struct {
	err    error
	secret string
}

func (r redacted) Error() string { return strings.ReplaceAll(r.err.Error(), r.secret, "xxxxx") }
func (r redacted) Unwrap() error { return r.err }

// pgCode is the SQLSTATE of a database error, "" for another error.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// SQLSTATEs the engine branches on.
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
)

// inTx runs fn in a transaction and commits it.
func (db *DB) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db.pool, fn)
}

// Times are stored as Unix nanoseconds, clamped to the int64 range (as
// the embedded engine clamps them); NULL is the zero time.
var (
	maxNanoTime = time.Unix(0, math.MaxInt64)
	minNanoTime = time.Unix(0, math.MinInt64+1)
)

// nanos is t in Unix nanoseconds, clamped.
func nanos(t time.Time) int64 {
	switch {
	case t.After(maxNanoTime):
		return math.MaxInt64
	case t.Before(minNanoTime):
		return math.MinInt64 + 1
	}
	return t.UnixNano()
}

// nanosOrNull is nanos(t), or NULL for the zero time.
func nanosOrNull(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := nanos(t)
	return &n
}

// fromNanos reads a time column: NULL is the zero time.
func fromNanos(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return time.Unix(0, *n).UTC()
}

// orEmpty keeps a nil slice out of a NOT NULL bytea column.
func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// orNil reads an empty bytea back as nil, as it was most likely written.
func orNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
