package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// clusterGateways is how many gateways share the database in the cluster
// crash test.
const clusterGateways = 3

// TestPostgresClusterKillRestart is SPEC section 6's promise under
// SIGKILL: three gateways on one PostgreSQL database under load, a random
// one killed and restarted again and again, and the database itself
// stopped with `pg_ctl -m immediate` once mid-load and started again.
// Every acknowledged event is delivered, each provider event ID is stored
// once (also when the same event is posted to two gateways at once), and
// every delivery of an event carries one Idempotency-Key.
func TestPostgresClusterKillRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs the real binary for about a minute; skipped with -short")
	}
	pg := startOwnPostgres(t)
	s := loadSettings(t)
	s.Kills = max(s.Kills, 5)
	t.Logf("seed %d (CRASHTEST_SEED=%d), %d kills of %d gateways over %v at %.0f req/s, one database stop",
		s.Seed, s.Seed, s.Kills, clusterGateways, s.Duration, s.Rate)
	began := time.Now()
	rep := &report{Seed: s.Seed}
	led := &ledger{run: fmt.Sprintf("pg%x", s.Seed)}
	bin := buildBinary(t)
	rc, err := newReceiver(endpointSecret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	sups := make([]*supervisor, clusterGateways)
	for i := range sups {
		sups[i] = newSupervisor(t, bin, rc.URL())
		sups[i].onPostgres(t, pg)
		if err := sups[i].start(); err != nil {
			t.Fatal(err)
		}
	}

	hc := newLoadHTTP()
	t.Cleanup(hc.CloseIdleConnections)
	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stopLoad(); wg.Wait() })
	limiter := rate.NewLimiter(rate.Limit(s.Rate), Clients)
	for i := range Clients {
		sup := sups[i%len(sups)]
		c := &loadClient{url: sup.ingestURL + "/ingest/" + sourceID, http: hc, ledger: led, limiter: limiter, sup: sup,
			rng: rand.New(rand.NewPCG(s.Seed, streamClients+uint64(i)))}
		wg.Go(func() { c.run(ctx) })
	}
	wg.Go(func() { rep.ReceiverFaults = rc.faults(ctx, rand.New(rand.NewPCG(s.Seed, streamFaults))) })
	var doubles int
	wg.Go(func() { doubles = postToTwoAtOnce(ctx, led, sups, rand.New(rand.NewPCG(s.Seed, streamClients+100))) })

	start := time.Now()
	rng := rand.New(rand.NewPCG(s.Seed, streamKills))
	mean := s.Duration / time.Duration(s.Kills+1)
	for rep.Kills < s.Kills {
		sleepCtx(context.Background(), time.Duration(float64(mean)*(0.05+1.9*rng.Float64())))
		if rep.Kills == s.Kills/2 {
			pg.stopImmediate()
			t.Logf("database stopped (immediate) at %v", time.Since(start).Round(time.Millisecond))
			sleepCtx(context.Background(), time.Second)
			pg.start()
			t.Logf("database started again at %v", time.Since(start).Round(time.Millisecond))
		}
		sup := sups[rng.IntN(len(sups))]
		if err := sup.kill(); err != nil {
			t.Fatal(err)
		}
		rep.Kills++
		t.Logf("kill %d (a gateway on %s) at %v", rep.Kills, sup.ingestURL, time.Since(start).Round(time.Millisecond))
		if err := sup.start(); err != nil {
			t.Fatal(err)
		}
	}
	sleepCtx(context.Background(), max(s.Duration-time.Since(start), mean))
	stopLoad()
	wg.Wait()
	rep.LoadSeconds = time.Since(start).Seconds()
	t.Logf("%d events posted to two gateways at once", doubles)

	rep.DrainSeconds = drain(t, sups[0], led, rc).Seconds()

	f := newFindings()
	evs := led.all()
	acked := checkAnswers(evs, rep, f)
	got, requests, problems := rc.snapshot()
	rep.ReceiverRequests = requests
	for _, p := range problems {
		f.add("bad delivery", "%s", p)
	}
	checkReceived(evs, acked, got, rep, f)
	if stored, ok, err := adminEvents(sups[0].client, sups[0].adminURL); err != nil || !ok {
		t.Errorf("admin API: %v", err)
	} else {
		rep.AdminAPIChecked = true
		checkStored("admin API", stored, false, evs, acked, got, rep, f)
	}
	perID, err := pg.storedPerEventID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range perID {
		if n != 1 {
			f.add("double accept", "provider event ID %s is stored %d times", id, n)
		}
	}
	for _, sup := range sups {
		for _, p := range sup.logProblems() {
			f.add("gateway crashed", "%s", p)
		}
	}
	rep.RunSeconds = time.Since(began).Seconds()
	f.report(t)
	writeReport(t, s.Report, rep)
	t.Logf("acknowledged %d events, delivered %d, %d duplicate deliveries (ratio %.4f), %d stored in the database",
		rep.EventsAcknowledged, rep.EventsDelivered, rep.DuplicateDeliveries, rep.DuplicateRate, len(perID))
	if rep.EventsAcknowledged == 0 || doubles == 0 {
		t.Errorf("the run proves nothing: %d events acknowledged, %d posted to two gateways at once", rep.EventsAcknowledged, doubles)
	}
}

// postToTwoAtOnce posts new events to two different gateways at the same
// moment, a few a second, until ctx ends, recording both answers: the
// database's unique key must make them one event. It returns how many.
func postToTwoAtOnce(ctx context.Context, led *ledger, sups []*supervisor, rng *rand.Rand) int {
	hc := newLoadHTTP()
	defer hc.CloseIdleConnections()
	n := 0
	for sleepCtx(ctx, 100*time.Millisecond) {
		ev := led.create(rng)
		i := rng.IntN(len(sups))
		j := (i + 1 + rng.IntN(len(sups)-1)) % len(sups)
		var wg sync.WaitGroup
		for _, sup := range []*supervisor{sups[i], sups[j]} {
			c := &loadClient{url: sup.ingestURL + "/ingest/" + sourceID, http: hc, sup: sup}
			wg.Go(func() { ev.record(c.post(ev)) })
		}
		wg.Wait()
		n++
	}
	return n
}
