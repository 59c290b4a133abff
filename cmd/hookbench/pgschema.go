package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// benchSchema creates a schema of its own for one run on the server at
// dsn, and returns the DSN the gateways use (its search_path) and a
// function that drops it.
func benchSchema(ctx context.Context, dsn string) (string, func(), error) {
	if dsn == "" {
		return "", nil, errors.New("-storage postgres needs -dsn (or HOOKBENCH_POSTGRES_DSN): a server where hookbench may create a schema")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "hookbench_" + hex.EncodeToString(b[:])
	if err := execSQL(ctx, dsn, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", nil, errors.New("-dsn: not a postgres:// URL")
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := execSQL(ctx, dsn, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			progress("drop schema %s: %v", schema, err)
		}
	}
	return u.String(), drop, nil
}

func execSQL(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to the bench database: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}
