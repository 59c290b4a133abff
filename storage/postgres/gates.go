package postgres

import (
	"context"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"hookgate/storage"
)

// Several gateways deliver one endpoint's outbox at once, so what bounds
// an endpoint lives in the database, next to its deliveries, and every
// claim passes through it under the endpoint's transaction lock (claims
// of one endpoint take turns, whichever gateway makes them):
//
//   - max_in_flight: the claims whose lease is still live are counted;
//   - rate_limit: a token bucket (endpoint_gates.tokens), refilled from the
//     time of the last claim, holding a tenth of a second's worth (at
//     least one), as the embedded engine's limiter does;
//   - the circuit breaker: outcomes count consecutive failures in the
//     outcome's own write (Complete); once open, claims take nothing until
//     the cool-down is over, then one probe, whose outcome closes or
//     reopens it;
//   - a receiver's Retry-After pause (endpoint_holds), written with the
//     outcome that asked for it: claims take nothing while it lasts.

// inFlightRecheck is how soon a gateway looks again at an endpoint whose
// max_in_flight is taken up by every gateway's claims together: an
// attempt that ends on another gateway frees a slot without telling it.
const inFlightRecheck = 20 * time.Millisecond

// gates is what a claim reads of an endpoint under its lock.
type gates struct {
	stored   bool    // the endpoint is stored (else nothing caps it)
	cap      *int    // max_in_flight
	rate     float64 // rate_limit, per second; 0 = none
	url      string
	live     int // claims with a live lease
	holdTill *int64
	holdURL  *string
	// the endpoint_gates row, if any
	row        bool
	tokens     float64
	refilled   int64
	openUntil  *int64
	probe      *string
	probeUntil *int64
}

// readGates takes the endpoint's claim lock and reads its limits and
// gates.
func readGates(ctx context.Context, tx pgx.Tx, endpoint string, now time.Time) (*gates, error) {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || '/claim/' || $1, 0))`, endpoint)
	if err != nil {
		return nil, err
	}
	var g gates
	var rate *float64
	var url *string
	var tokens *float64
	var refilled *int64
	err = tx.QueryRow(ctx, `SELECT e.j IS NOT NULL, (e.j ->> 'max_in_flight')::int, (e.j ->> 'rate_limit')::float8, e.j ->> 'url',
			(SELECT count(*) FROM deliveries WHERE endpoint = $1 AND state = 'delivering' AND lease_until > $2)::int,
			h.until, h.url, g.endpoint IS NOT NULL, g.tokens, g.refilled, g.open_until, g.probe, g.probe_until
		FROM (SELECT 1) one
		LEFT JOIN (SELECT convert_from(doc, 'UTF8')::jsonb AS j FROM endpoints WHERE id = $1) e ON true
		LEFT JOIN endpoint_holds h ON h.endpoint = $1 AND h.until > $2
		LEFT JOIN endpoint_gates g ON g.endpoint = $1`, endpoint, nanos(now)).Scan(
		&g.stored, &g.cap, &rate, &url, &g.live, &g.holdTill, &g.holdURL,
		&g.row, &tokens, &refilled, &g.openUntil, &g.probe, &g.probeUntil)
	if err != nil {
		return nil, err
	}
	if rate != nil && *rate > 0 {
		g.rate = *rate
	}
	if url != nil {
		g.url = *url
	}
	if tokens != nil {
		g.tokens = *tokens
	}
	if refilled != nil {
		g.refilled = *refilled
	}
	return &g, nil
}

// inFlightRoom is how many of limit deliveries the endpoint may have
// claimed now, across every gateway: its max_in_flight less the claims
// whose lease is still live. An endpoint without a stored max_in_flight
// (deleted, or a test's) is not capped, nor is one whose max_in_flight is
// not positive.
func (g *gates) inFlightRoom(limit int) int {
	if !g.stored || g.cap == nil || *g.cap <= 0 {
		return limit
	}
	return max(min(limit, *g.cap-g.live), 0)
}

// burst is how many rate tokens the bucket holds.
func (g *gates) burst() float64 { return max(1, math.Ceil(g.rate/10)) }

// tokensAt is the bucket's tokens at now, refilled since the last claim.
func (g *gates) tokensAt(now time.Time) float64 {
	if !g.row || g.refilled == 0 {
		return g.burst()
	}
	elapsed := max(float64(nanos(now)-g.refilled)/1e9, 0) // a peer's clock may run ahead
	return min(g.burst(), g.tokens+elapsed*g.rate)
}

// allow decides how many of limit deliveries a gated claim may take at
// now, whether the one it takes is the half-open circuit's probe, and,
// when it may take none, until when.
func (g *gates) allow(now time.Time, limit int) (n int, probe bool, wait storage.GateWait) {
	t := nanos(now)
	if g.holdTill != nil && *g.holdTill > t && g.holdURL != nil && *g.holdURL == g.url {
		return 0, false, storage.GateWait{Until: time.Unix(0, *g.holdTill).UTC(), Paused: true}
	}
	if g.openUntil != nil {
		if t < *g.openUntil {
			return 0, false, storage.GateWait{Until: time.Unix(0, *g.openUntil).UTC(), Paused: true}
		}
		if g.probe != nil && g.probeUntil != nil && *g.probeUntil > t {
			// The probe's outcome decides; if its gateway dies, its lease ends.
			return 0, false, storage.GateWait{Until: time.Unix(0, *g.probeUntil).UTC(), Paused: true}
		}
		limit, probe = 1, true
	}
	n = g.inFlightRoom(limit)
	if n == 0 {
		return 0, false, storage.GateWait{Until: now.Add(inFlightRecheck)}
	}
	if g.rate > 0 {
		tokens := g.tokensAt(now)
		if tokens < 1 {
			secs := (1 - tokens) / g.rate
			return 0, false, storage.GateWait{Until: now.Add(time.Duration(min(secs, storage.MaxLease.Seconds()) * float64(time.Second)))}
		}
		n = min(n, int(tokens))
	}
	return n, probe, storage.GateWait{}
}

// write records what a gated claim of n deliveries used: the rate tokens,
// and the probe it took (probeID, claimed until leaseEnd). The row is made
// by the first gated claim, so that outcomes have a circuit to count in;
// an unchanged row is not written again.
func (g *gates) write(ctx context.Context, tx pgx.Tx, endpoint string, now time.Time, n int, probeID string, leaseEnd int64, p *storage.CircuitPolicy) error {
	if g.row && g.rate == 0 && probeID == "" {
		return nil
	}
	tokens := g.burst()
	if g.rate > 0 {
		tokens = g.tokensAt(now) - float64(n)
	}
	var probe *string
	var probeUntil *int64
	if probeID != "" {
		probe, probeUntil = &probeID, &leaseEnd
	}
	_, err := tx.Exec(ctx, `INSERT INTO endpoint_gates AS g (endpoint, tokens, refilled, probe, probe_until, threshold, min_cool, max_cool)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (endpoint) DO UPDATE SET tokens = excluded.tokens, refilled = excluded.refilled,
			probe = coalesce(excluded.probe, g.probe), probe_until = coalesce(excluded.probe_until, g.probe_until),
			threshold = excluded.threshold, min_cool = excluded.min_cool, max_cool = excluded.max_cool`,
		endpoint, tokens, nanos(now), probe, probeUntil, max(p.Failures, 1), int64(p.Cooldown), int64(max(p.MaxCooldown, p.Cooldown)))
	return err
}

// ClaimGated claims as Claim does, within the endpoint's rate_limit,
// circuit breaker and receiver's pause as every gateway sees them.
func (db *DB) ClaimGated(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration, policy storage.CircuitPolicy) ([]storage.Job, storage.GateWait, error) {
	return db.claim(ctx, endpoint, now, limit, lease, &policy)
}

// ResumeEndpoint closes an endpoint's circuit and ends its receiver's
// pause, for every gateway, and reports whether the circuit was open.
func (db *DB) ResumeEndpoint(ctx context.Context, endpoint string) (wasOpen bool, err error) {
	if err := db.check(); err != nil {
		return false, err
	}
	err = db.pool.QueryRow(ctx, `WITH old AS (
		SELECT endpoint, open_until IS NOT NULL OR probe IS NOT NULL AS was_open
		FROM endpoint_gates WHERE endpoint = $1 FOR UPDATE
	), g AS (
		UPDATE endpoint_gates SET failures = 0, open_until = NULL, cool = 0, probe = NULL, probe_until = NULL
		FROM old WHERE endpoint_gates.endpoint = old.endpoint
		RETURNING old.was_open
	), h AS (
		DELETE FROM endpoint_holds WHERE endpoint = $1
	) SELECT coalesce(bool_or(was_open), false) FROM g`, endpoint).Scan(&wasOpen)
	return wasOpen, db.fail("resume an endpoint", err)
}

// circuitSQL counts an attempt's outcome ($ok, ended at $end) for the
// endpoint's circuit, in Complete's statement (d is the delivery it
// updated; nothing when the lease was lost). The probe closes the circuit
// or reopens it for twice the cool-down; while closed, a success clears
// the failures and a failure counts, opening it at the threshold; while
// open, other outcomes (of attempts claimed before it opened) count for
// nothing. A success of a closed circuit without failures writes nothing:
// outcomes of one endpoint do not queue on its row. It returns the change
// it made (circuitOpenedChange, circuitClosedChange, 0).
const circuitSQL = `, g AS (
	UPDATE endpoint_gates g SET
		failures = CASE WHEN g.probe = d.id OR $ok OR g.failures + 1 >= g.threshold THEN 0 ELSE g.failures + 1 END,
		open_until = CASE
			WHEN g.probe = d.id AND NOT $ok THEN $end + least(greatest(2 * g.cool, g.min_cool), g.max_cool)
			WHEN g.probe IS DISTINCT FROM d.id AND NOT $ok AND g.failures + 1 >= g.threshold THEN $end + g.min_cool
			ELSE NULL END,
		cool = CASE
			WHEN g.probe = d.id AND NOT $ok THEN least(greatest(2 * g.cool, g.min_cool), g.max_cool)
			WHEN g.probe IS DISTINCT FROM d.id AND NOT $ok AND g.failures + 1 >= g.threshold THEN g.min_cool
			ELSE 0 END,
		probe = CASE WHEN g.probe = d.id THEN NULL ELSE g.probe END,
		probe_until = CASE WHEN g.probe = d.id THEN NULL ELSE g.probe_until END,
		change = CASE
			WHEN g.probe = d.id AND $ok THEN ` + circuitClosedChange + `
			WHEN g.probe IS DISTINCT FROM d.id AND NOT $ok AND g.failures + 1 >= g.threshold THEN ` + circuitOpenedChange + `
			ELSE 0 END
	FROM d WHERE g.endpoint = d.endpoint AND (g.probe = d.id OR g.open_until IS NULL)
		AND (NOT $ok OR g.failures > 0 OR g.probe = d.id)
	RETURNING g.change
)`

// The values of endpoint_gates.change: what an outcome's count changed
// (storage.Outcome.CircuitOpened, CircuitClosed).
const (
	circuitOpenedChange = "1"
	circuitClosedChange = "2"
)

var _ storage.Gates = (*DB)(nil)
