package crashtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"hookgate/outbound"
)

// drainMargin is added to the outbox lease for the final drain: a
// delivery claimed by a killed process is due again only when its lease
// (outbound.DefaultLease, one minute) expires.
const drainMargin = 30 * time.Second

// drainPoll is how often the drain asks the receiver and the admin API.
const drainPoll = 250 * time.Millisecond

// Startup kills land this long after exec: before, during or just after
// the store's recovery.
const (
	startupKillMin = 5 * time.Millisecond
	startupKillMax = 300 * time.Millisecond
)

// Seed streams: each random source of a run has its own, so that changing
// one (say, the number of clients) does not move the kill schedule.
const (
	streamKills = iota + 1
	streamFaults
	streamClients
)

// TestCrashKillRestart is SPEC section 3's promise under SIGKILL: "A 2xx is
// sent only after the event and all its deliveries are durable on disk. An
// acknowledged event is never lost, whatever crashes afterwards", with
// exactly-once acceptance and a stable Idempotency-Key, against the real
// binary killed at random moments under load while its receiver fails.
func TestCrashKillRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs the real binary for about a minute; skipped with -short")
	}
	s := loadSettings(t)
	t.Logf("seed %d (CRASHTEST_SEED=%d reproduces the kill schedule, faults and load), %d kills over %v at %.0f req/s",
		s.Seed, s.Seed, s.Kills, s.Duration, s.Rate)
	r := startRun(t, s)
	r.loadAndKill(t)
	r.rep.DrainSeconds = drain(t, r.sup, r.led, r.rc).Seconds()
	r.check(t)
}

// crashRun is one run of the crash test: the gateway process, its
// receiver, what was sent and answered, and the figures.
type crashRun struct {
	s     settings
	began time.Time
	rep   *report
	rc    *receiver
	sup   *supervisor
	led   *ledger
}

// startRun builds the binary, starts the receiver and the first process.
// Everything is stopped at the end of the test.
func startRun(t *testing.T, s settings) *crashRun {
	t.Helper()
	r := &crashRun{s: s, began: time.Now(), rep: &report{Seed: s.Seed}, led: &ledger{run: fmt.Sprintf("%x", s.Seed)}}
	bin := buildBinary(t)
	var err error
	if r.rc, err = newReceiver(endpointSecret); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.rc.Close)
	r.sup = newSupervisor(t, bin, r.rc.URL())
	if err := r.sup.start(); err != nil {
		t.Fatal(err)
	}
	return r
}

// loadAndKill runs the clients and the receiver's faults while the kill
// schedule runs, then stops them. The cleanup stops them too if the test
// fails first.
func (r *crashRun) loadAndKill(t *testing.T) {
	t.Helper()
	hc := newLoadHTTP()
	t.Cleanup(hc.CloseIdleConnections)
	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stopLoad(); wg.Wait() })
	limiter := rate.NewLimiter(rate.Limit(r.s.Rate), Clients)
	for i := range Clients {
		c := &loadClient{url: r.sup.ingestURL + "/ingest/" + sourceID, http: hc, ledger: r.led, limiter: limiter, sup: r.sup,
			rng: rand.New(rand.NewPCG(r.s.Seed, streamClients+uint64(i)))}
		wg.Go(func() { c.run(ctx) })
	}
	wg.Go(func() { r.rep.ReceiverFaults = r.rc.faults(ctx, rand.New(rand.NewPCG(r.s.Seed, streamFaults))) })
	start := time.Now()
	r.rep.Kills, r.rep.StartupKills = killAtRandom(t, r.sup, r.s, start)
	stopLoad()
	wg.Wait()
	r.rep.LoadSeconds = time.Since(start).Seconds()
}

// check compares what was sent and answered with what the receiver got,
// what the admin API lists and, after a graceful stop, what the store
// holds; then it reports the figures.
func (r *crashRun) check(t *testing.T) {
	t.Helper()
	f := newFindings()
	evs := r.led.all()
	acked := checkAnswers(evs, r.rep, f)
	got, requests, problems := r.rc.snapshot()
	r.rep.ReceiverRequests = requests
	for _, p := range problems {
		f.add("bad delivery", "%s", p)
	}
	checkReceived(evs, acked, got, r.rep, f)
	if stored, ok, err := adminEvents(r.sup.client, r.sup.adminURL); err != nil {
		t.Errorf("admin API: %v", err)
	} else if ok {
		r.rep.AdminAPIChecked = true
		checkStored("admin API", stored, false, evs, acked, got, r.rep, f)
	} else {
		t.Logf("GET /api/v1/events answers 404: checking the store directly only")
	}
	if err := r.sup.stop(); err != nil {
		t.Error(err)
		_ = r.sup.kill()
	}
	if stored, err := readStore(r.sup.dataDir); err != nil {
		t.Errorf("read the store after the stop (CRASHTEST_BIN must be built from this tree): %v", err)
	} else {
		checkStored("store", stored, true, evs, acked, got, r.rep, f)
	}
	r.checkLogs(t, f)
	r.rep.RunSeconds = time.Since(r.began).Seconds()
	f.report(t)
	writeReport(t, r.s.Report, r.rep)
	if r.rep.EventsAcknowledged == 0 || r.rep.Kills < r.s.Kills {
		t.Errorf("the run proves nothing: %d events acknowledged, %d of %d kills", r.rep.EventsAcknowledged, r.rep.Kills, r.s.Kills)
	}
}

// checkLogs fails on a crash in any run's log and logs the first ERROR
// lines (an error is not a failure by itself: a kill can cut a write).
func (r *crashRun) checkLogs(t *testing.T, f *findings) {
	t.Helper()
	for _, p := range r.sup.logProblems() {
		f.add("gateway crashed", "%s", p)
	}
	lines := r.sup.errorLines()
	r.rep.GatewayErrorLogs = len(lines)
	for i, l := range lines {
		if i == 5 {
			t.Logf("... %d more ERROR lines", len(lines)-i)
			break
		}
		t.Logf("gateway ERROR log: %s", l)
	}
}

// killAtRandom SIGKILLs the gateway s.Kills times at seeded random
// moments, restarting it on the same data each time (sometimes killing the
// restart itself during startup), then lets the last process serve until
// s.Duration has passed since start. Each uptime is drawn from
// [0.05, 1.95] × the mean uptime, so some kills land right after a
// recovery, in the middle of the backlog it resumes.
func killAtRandom(t *testing.T, sup *supervisor, s settings, start time.Time) (kills, startupKills int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(s.Seed, streamKills))
	mean := s.Duration / time.Duration(s.Kills+1)
	for kills < s.Kills {
		up := time.Duration(float64(mean) * (0.05 + 1.9*rng.Float64()))
		sleepCtx(context.Background(), up)
		if err := sup.kill(); err != nil {
			t.Fatal(err)
		}
		kills++
		t.Logf("kill %d at %v, after %v up", kills, time.Since(start).Round(time.Millisecond), up.Round(time.Millisecond))
		if rng.Float64() < StartupKillShare {
			delay := between(rng, startupKillMin, startupKillMax)
			if err := sup.killDuringStartup(delay); err != nil {
				t.Fatal(err)
			}
			startupKills++
			t.Logf("  and its restart %v after exec", delay.Round(time.Millisecond))
		}
		if err := sup.start(); err != nil {
			t.Fatal(err)
		}
	}
	sleepCtx(context.Background(), max(s.Duration-time.Since(start), mean))
	return kills, startupKills
}

// drain waits until every acknowledged event was delivered and the
// gateway's outbox is empty (no pending or leased delivery left), for at
// most the outbox lease plus drainMargin. It returns how long that took;
// on timeout the checks that follow say what is missing.
func drain(t *testing.T, sup *supervisor, led *ledger, rc *receiver) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(outbound.DefaultLease + drainMargin)
	ids := led.acknowledged()
	for {
		done, missing := rc.deliveredAll(ids)
		empty := outboxEmpty(sup)
		if done && empty {
			t.Logf("drained in %v: %d acknowledged events delivered, outbox empty", time.Since(start).Round(time.Millisecond), len(ids))
			return time.Since(start)
		}
		if p := sup.current(); !p.alive() {
			t.Fatalf("run %d exited on its own during the drain (%s)\n%s", p.n, p.state, tail(p.log, 40))
		}
		if time.Now().After(deadline) {
			t.Errorf("drain: after %v, %d of %d acknowledged events undelivered, outbox empty: %v",
				time.Since(start).Round(time.Second), missing, len(ids), empty)
			return time.Since(start)
		}
		time.Sleep(drainPoll)
	}
}

// outboxEmpty reports whether the endpoint has no delivery left that is
// pending or claimed (delivering), asking the admin API. Without the admin
// API it says yes: the drain then waits for the acknowledged events only,
// and the store check after the stop reports what was left.
func outboxEmpty(sup *supervisor) bool {
	for _, state := range []string{"pending", "delivering"} {
		n, err := countDeliveries(sup.client, sup.adminURL, state)
		switch {
		case errors.Is(err, errNoAdminAPI):
			return true
		case err != nil || n > 0:
			return false
		}
	}
	return true
}
