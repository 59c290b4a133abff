package crashtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// ownPostgres is a PostgreSQL cluster of the crash test's own, under a
// temp dir: the test stops it with `pg_ctl -m immediate` mid-load, which
// the cluster ./test.sh shares with the other packages' tests must not
// see. fsync is on: a stop by immediate shutdown then keeps what
// committed, as a crash of the server would.
type ownPostgres struct {
	t    *testing.T
	bin  string
	data string
	port int
	run  []string // the command prefix that runs as the cluster's owner
	dsn  string
}

// startOwnPostgres initdbs and starts a cluster, stopped at the end of
// the test. Without PostgreSQL's binaries the test skips, or fails under
// CI=true.
func startOwnPostgres(t *testing.T) *ownPostgres {
	t.Helper()
	bin := os.Getenv("HOOKGATE_TEST_PG_BIN")
	if bin == "" {
		dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		sort.Strings(dirs)
		if len(dirs) > 0 {
			bin = dirs[len(dirs)-1]
		}
	}
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no PostgreSQL binaries (/usr/lib/postgresql/*/bin): CI runs the Postgres crash test (./test.sh installs them)")
		}
		t.Skip("no PostgreSQL binaries: run ./test.sh, which installs Debian's postgresql")
	}
	dir, err := os.MkdirTemp("", "crashtest-pg")
	if err != nil {
		t.Fatal(err)
	}
	pg := &ownPostgres{t: t, bin: bin, data: filepath.Join(dir, "data")}
	if os.Geteuid() == 0 { // initdb refuses root
		if err := exec.Command("chown", "postgres", dir).Run(); err != nil {
			t.Fatal(err)
		}
		pg.run = []string{"runuser", "-u", "postgres", "--"}
	}
	t.Cleanup(func() {
		_ = pg.cmd("pg_ctl", "-D", pg.data, "-m", "immediate", "stop").Run()
		_ = os.RemoveAll(dir)
	})
	if out, err := pg.cmd("initdb", "-D", pg.data, "-U", "hookgate", "--auth=trust", "-E", "UTF8", "--locale=C").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	addr := freeAddr(t)
	if _, err := fmt.Sscanf(addr[strings.LastIndexByte(addr, ':')+1:], "%d", &pg.port); err != nil {
		t.Fatal(err)
	}
	pg.dsn = fmt.Sprintf("postgres://hookgate@127.0.0.1:%d/postgres?sslmode=disable", pg.port)
	pg.start()
	return pg
}

func (pg *ownPostgres) cmd(name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string(nil), pg.run...), filepath.Join(pg.bin, name)), args...)
	return exec.Command(argv[0], argv[1:]...)
}

// start starts the server and waits until it takes connections.
func (pg *ownPostgres) start() {
	pg.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=on -c max_connections=200", pg.port, filepath.Dir(pg.data))
	if out, err := pg.cmd("pg_ctl", "-D", pg.data, "-l", filepath.Join(filepath.Dir(pg.data), "server.log"), "-w", "-o", opts, "start").CombinedOutput(); err != nil {
		pg.t.Fatalf("pg_ctl start: %v\n%s", err, out)
	}
}

// stopImmediate stops the server without a checkpoint, as a crash does:
// at the next start it recovers from its WAL.
func (pg *ownPostgres) stopImmediate() {
	pg.t.Helper()
	if out, err := pg.cmd("pg_ctl", "-D", pg.data, "-m", "immediate", "stop").CombinedOutput(); err != nil {
		pg.t.Fatalf("pg_ctl stop -m immediate: %v\n%s", err, out)
	}
}

// storedPerEventID counts the stored events of each provider event ID.
func (pg *ownPostgres) storedPerEventID(ctx context.Context) (map[string]int, error) {
	conn, err := pgx.Connect(ctx, pg.dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT event_id, count(*) FROM events GROUP BY event_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id []byte
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[string(id)] = n
	}
	return out, rows.Err()
}

// onPostgres rewrites a supervisor's config to keep its data in pg.
func (s *supervisor) onPostgres(t *testing.T, pg *ownPostgres) {
	t.Helper()
	b, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	old := fmt.Sprintf("storage: {driver: badger, path: %q}", s.dataDir)
	if !strings.Contains(string(b), old) {
		t.Fatalf("the config's storage line is not %s", old)
	}
	cfg := strings.Replace(string(b), old, fmt.Sprintf("storage: {driver: postgres, postgres: {dsn: %q, max_conns: 10}}", pg.dsn), 1)
	if err := os.WriteFile(s.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}
