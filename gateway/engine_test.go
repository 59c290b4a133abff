package gateway

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"hookgate/internal/pgtest"
)

// testEngine is the engine the gateway's tests run on: the embedded
// default, or postgres with HOOKGATE_TEST_ENGINE=postgres (each data
// directory then stands for a schema of its own, so that a restart on the
// same directory finds the same data).
var testEngine = os.Getenv("HOOKGATE_TEST_ENGINE")

var (
	schemasMu sync.Mutex
	schemas   = map[string]string{} // data directory -> schema
)

// onEngine moves a test config made from testConfig (its data in dir) to
// the test engine: Postgres when the test engine is, or postgres says so.
func onEngine(t *testing.T, yml, dir string, postgres bool) string {
	t.Helper()
	if testEngine != "postgres" && !postgres {
		return yml
	}
	pg := fmt.Sprintf("storage: {driver: postgres, postgres: {dsn: %q, max_conns: 8}}", testDSN(t, dir))
	return strings.Replace(yml, fmt.Sprintf("storage: {path: %q}", dir), pg, 1)
}

// testDSN is the DSN of the schema that stands for dir, made on first use.
func testDSN(t *testing.T, dir string) string {
	t.Helper()
	dsn := pgtest.DSN(t) // skips (or fails) here, holding no lock
	schemasMu.Lock()
	defer schemasMu.Unlock()
	schema, ok := schemas[dir]
	if !ok {
		dsn, schema = pgtest.Schema(t)
		schemas[dir] = schema
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
