package crashtest

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Run size defaults: small enough for CI on every push (2 cores), large
// enough that every kill lands in the middle of ingests and deliveries.
const (
	// DefaultKills is how many SIGKILLs a run deals (CRASHTEST_KILLS).
	DefaultKills = 10
	// DefaultDuration is how long the load runs (CRASHTEST_DURATION); the
	// final drain comes on top of it.
	DefaultDuration = 20 * time.Second
	// DefaultRate is the total ingest requests per second of all clients
	// (CRASHTEST_RATE): the gateway is exercised, not saturated, so a
	// failure points at durability rather than at a backlog.
	DefaultRate = 300
	// Clients is how many concurrent senders post events.
	Clients = 16
	// RetryShare is the share of requests that resend an event already
	// sent: same webhook-id, timestamp, signature and body.
	RetryShare = 0.2
	// StartupKillShare is the share of restarts that are themselves killed
	// during startup, before /healthz answers (store recovery interrupted).
	StartupKillShare = 0.2
)

// settings is one run's size, from the environment.
type settings struct {
	Kills    int
	Duration time.Duration
	Rate     float64
	// Seed drives the kill schedule, the receiver's faults and the
	// clients' choices (CRASHTEST_SEED reproduces them; the interleaving
	// with the process is still the scheduler's).
	Seed uint64
	// Report, when set, names a JSON file the figures are written to.
	Report string
}

// loadSettings reads CRASHTEST_KILLS, CRASHTEST_DURATION, CRASHTEST_RATE,
// CRASHTEST_SEED and CRASHTEST_REPORT; a malformed value fails the test.
func loadSettings(t *testing.T) settings {
	t.Helper()
	s := settings{
		Kills:    DefaultKills,
		Duration: DefaultDuration,
		Rate:     DefaultRate,
		Seed:     uint64(time.Now().UnixNano()),
		Report:   os.Getenv("CRASHTEST_REPORT"),
	}
	if v := os.Getenv("CRASHTEST_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CRASHTEST_KILLS=%q: want a positive integer", v)
		}
		s.Kills = n
	}
	if v := os.Getenv("CRASHTEST_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			t.Fatalf("CRASHTEST_DURATION=%q: want a Go duration of at least 1s", v)
		}
		s.Duration = d
	}
	if v := os.Getenv("CRASHTEST_RATE"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 {
			t.Fatalf("CRASHTEST_RATE=%q: want a positive number of requests per second", v)
		}
		s.Rate = r
	}
	if v := os.Getenv("CRASHTEST_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CRASHTEST_SEED=%q: want an unsigned integer", v)
		}
		s.Seed = n
	}
	return s
}
