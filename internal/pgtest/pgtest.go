// Package pgtest gives tests a PostgreSQL schema of their own on the
// server named by HOOKGATE_TEST_POSTGRES_DSN (./test.sh starts a
// throwaway cluster and sets it). Without it the Postgres tests skip,
// saying how to run them; under CI=true they fail instead, so that a
// missing database never passes for a green run.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvDSN names the variable that holds the test server's DSN.
const EnvDSN = "HOOKGATE_TEST_POSTGRES_DSN"

// DSN returns the test server's DSN, or skips (fails under CI=true) the
// test when there is none.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set: CI runs the Postgres tests (run ./test.sh, which starts a throwaway cluster)", EnvDSN)
		}
		t.Skipf("no PostgreSQL: run ./test.sh, or set %s to a server where tests may create schemas", EnvDSN)
	}
	return dsn
}

// Schema creates a schema of its own for one test and drops it when the
// test ends. It returns the DSN and the schema's name.
func Schema(t testing.TB) (dsn, schema string) {
	t.Helper()
	dsn = DSN(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema = "t_" + hex.EncodeToString(b[:])
	exec(t, dsn, `CREATE SCHEMA `+schema)
	t.Cleanup(func() { exec(t, dsn, `DROP SCHEMA `+schema+` CASCADE`) })
	return dsn, schema
}

func exec(t testing.TB, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to the test PostgreSQL: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
