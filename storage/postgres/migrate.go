package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrations holds the schema, one file per version: NNNN_name.sql, each
// applied once, in order, in a transaction of its own.
//
//go:embed migrations/*.sql
var migrations embed.FS

// ErrNewerSchema is returned by Open for a database whose schema was made
// by a newer build than this one: this binary would not know what that
// build's writes mean.
var ErrNewerSchema = errors.New("postgres: the database's schema is newer than this binary knows")

// migration is one schema version.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads the embedded migrations, ordered by version.
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, n := range names {
		base := path.Base(n)
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("migration %s: no version number", base)
		}
		b, err := migrations.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: base, sql: string(b)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	return out, nil
}

// SchemaVersion is the newest schema this binary knows.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// migrateLockKey names the advisory lock that serialises schema changes:
// gateways starting at once take turns, and the later ones find the
// schema made.
const migrateLockKey = "hookgate.migrate"

// migrate brings the schema up to date under an advisory lock (per
// schema, so that tests with a schema each do not wait for each other),
// or refuses a schema newer than this binary's.
func (db *DB) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return fmt.Errorf("postgres: read migrations: %w", err)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Release()
	c := conn.Conn()
	if _, err := c.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1 || current_schema(), 0))`, migrateLockKey); err != nil {
		return fmt.Errorf("postgres: lock the schema for migration: %w", err)
	}
	defer func() {
		// A failed unlock leaves the lock to the connection's end.
		_, _ = c.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtextextended($1 || current_schema(), 0))`, migrateLockKey)
	}()
	if _, err := c.Exec(ctx, `CREATE TABLE IF NOT EXISTS hookgate_schema (version int NOT NULL)`); err != nil {
		return fmt.Errorf("postgres: create the schema version table: %w", err)
	}
	var have int
	err = c.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM hookgate_schema`).Scan(&have)
	if err != nil {
		return fmt.Errorf("postgres: read the schema version: %w", err)
	}
	if known := ms[len(ms)-1].version; have > known {
		return fmt.Errorf("%w (database: version %d, this binary: up to %d); run a newer hookgate", ErrNewerSchema, have, known)
	}
	for _, m := range ms {
		if m.version <= have {
			continue
		}
		err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO hookgate_schema (version) VALUES ($1)`, m.version)
			return err
		})
		if err != nil {
			return fmt.Errorf("postgres: migration %s: %w", m.name, err)
		}
		db.log.Info("postgres schema migrated", "version", m.version)
	}
	return nil
}
