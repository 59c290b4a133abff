package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// Result is one scenario's figures.
type Result struct {
	Scenario    string  `json:"scenario"`
	Round       int     `json:"round,omitempty"`
	Clients     int     `json:"clients"`
	Requests    int64   `json:"requests"`
	Acked       int64   `json:"acked"`
	Replayed    int64   `json:"replayed"`
	Errors      int64   `json:"errors"`
	IngestRPS   float64 `json:"ingest_rps"`
	AckP50ms    float64 `json:"ack_p50_ms"`
	AckP99ms    float64 `json:"ack_p99_ms"`
	AckMaxms    float64 `json:"ack_max_ms"`
	FirstP50ms  float64 `json:"first_p50_ms,omitempty"`
	ReplayP50ms float64 `json:"replay_p50_ms,omitempty"`
	Deliveries  int64   `json:"deliveries"`
	DeliveryRPS float64 `json:"deliveries_per_s"`
	E2EP50ms    float64 `json:"e2e_p50_ms"`
	E2EP99ms    float64 `json:"e2e_p99_ms"`
	Duplicates  int64   `json:"duplicate_deliveries"`
	PeakRSSMiB  float64 `json:"peak_rss_mib"`
	// CPUPerReqUs is the server process's CPU time during the load, per
	// acknowledged request (user + system, in microseconds).
	CPUPerReqUs float64 `json:"cpu_us_per_request,omitempty"`
	// SyncsPerSec, WritesPerSync and SyncMeanMs are the store's group
	// commit during the load (from the gateway's /metrics).
	SyncsPerSec   float64 `json:"syncs_per_s,omitempty"`
	WritesPerSync float64 `json:"writes_per_sync,omitempty"`
	SyncMeanMs    float64 `json:"sync_mean_ms,omitempty"`
	CeilingRatio  float64 `json:"ceiling_ratio,omitempty"`
	// Backlog and restart figures.
	Backlog         int64   `json:"backlog,omitempty"`
	RSSStartMiB     float64 `json:"rss_start_mib,omitempty"`
	RSSEndMiB       float64 `json:"rss_end_mib,omitempty"`
	AnonStartMiB    float64 `json:"anon_start_mib,omitempty"`
	AnonPeakMiB     float64 `json:"anon_peak_mib,omitempty"`
	AnonEndMiB      float64 `json:"anon_end_mib,omitempty"`
	RateFirstTenth  float64 `json:"ingest_rps_first_tenth,omitempty"`
	RateLastTenth   float64 `json:"ingest_rps_last_tenth,omitempty"`
	ResumeAfterSecs float64 `json:"resume_after_s,omitempty"`
	Notes           string  `json:"notes,omitempty"`
	// ListMS is the median time of each admin listing over the backlog's
	// stored events (the console's pages), in ms.
	ListMS map[string]float64 `json:"list_ms,omitempty"`
	// Timeline is filled with -timeline.
	Timeline []Interval `json:"timeline,omitempty"`
}

var scenarios = map[string]func(context.Context, options, string) (Result, error){
	"ingest":     ingestScenario,
	"steady":     steady,
	"duplicates": duplicates,
	"fanout":     fanout,
	"backlog":    backlog,
	"restart":    backlog,
}

func scenarioNames() []string {
	var n []string
	for k := range scenarios {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// bench is a gateway started for one scenario, with its receiver.
type bench struct {
	dir, listen, admin string
	proc               *process // the first gateway: the one whose CPU and memory are reported
	rcv                *receiver
	// peers are the other gateways on the same database (-gateways), at
	// their ingest addresses.
	peers     []*process
	peerAddrs []string
	dropStore func() // drops the run's Postgres schema
	pgDSN     string // the run's schema: a restart opens it again
}

func (b *bench) ingestURL() string { return "http://" + b.listen + "/ingest/bench" }

// cpu is the CPU time every gateway has used so far.
func (b *bench) cpu() time.Duration {
	t := b.proc.cpu()
	for _, p := range b.peers {
		t += p.cpu()
	}
	return t
}

// ingestURLs are every gateway's ingest URLs: the clients take them in turn.
func (b *bench) ingestURLs() []string {
	urls := []string{b.ingestURL()}
	for _, a := range b.peerAddrs {
		urls = append(urls, "http://"+a+"/ingest/bench")
	}
	return urls
}

// startBench starts a receiver and a gateway whose endpoints are the
// given URL paths on that receiver ("!down" = a closed port).
func startBench(ctx context.Context, o options, bin string, paths []string) (*bench, error) {
	dir, err := os.MkdirTemp("", "hookbench-data")
	if err != nil {
		return nil, err
	}
	rcv, err := newReceiver()
	if err != nil {
		return nil, err
	}
	b := &bench{dir: dir, rcv: rcv}
	if b.listen, err = freeAddr(); err != nil {
		return nil, err
	}
	if b.admin, err = freeAddr(); err != nil {
		return nil, err
	}
	if err := b.start(ctx, o, bin, paths); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *bench) start(ctx context.Context, o options, bin string, paths []string) error {
	var eps strings.Builder
	if len(paths) == 0 {
		eps.WriteString("  []\n")
	}
	for i, p := range paths {
		url := b.rcv.url(p)
		if p == "!down" {
			down, err := freeAddr()
			if err != nil {
				return err
			}
			url = "http://" + down + "/down"
		}
		fmt.Fprintf(&eps, "  - {id: ep%d, tenant: bench, url: %q, max_in_flight: %d}\n", i, url, o.inFlight)
	}
	store := fmt.Sprintf("{path: %q}", filepath.Join(b.dir, "data"))
	if o.storage == "postgres" {
		if b.pgDSN == "" {
			dsn, drop, err := benchSchema(ctx, o.dsn)
			if err != nil {
				return err
			}
			b.dropStore, b.pgDSN = drop, dsn
		}
		store = fmt.Sprintf("{driver: postgres, postgres: {dsn: %q, max_conns: 32}}", b.pgDSN)
	}
	cfgFor := func(listen, admin string) string {
		return fmt.Sprintf(`server: {listen: %q, max_body: 1MiB}
admin:
  listen: %q
  tokens: [{token: hookbench-admin-token}]
storage: %s
delivery:
  allow_private_targets: true
  timeout: 10s
  retry: {initial_interval: 1s, max_interval: 30s, max_attempts: 1000, max_elapsed: 24h}
sources:
  - id: bench
    tenant: bench
    verify: {scheme: standard-webhooks, secrets: [%q]}
endpoints:
%s`, listen, admin, store, benchSecret, eps.String())
	}
	p, err := b.startGateway(ctx, bin, "gateway", cfgFor(b.listen, b.admin))
	if err != nil {
		return err
	}
	b.proc = p
	for i := 1; i < max(o.gateways, 1) && o.storage == "postgres"; i++ {
		listen, err := freeAddr()
		if err != nil {
			return err
		}
		admin, err := freeAddr()
		if err != nil {
			return err
		}
		p, err := b.startGateway(ctx, bin, fmt.Sprintf("gateway%d", i), cfgFor(listen, admin))
		if err != nil {
			return err
		}
		b.peers, b.peerAddrs = append(b.peers, p), append(b.peerAddrs, listen)
	}
	return nil
}

// startGateway writes a config named name and starts a gateway on it.
func (b *bench) startGateway(ctx context.Context, bin, name, cfg string) (*process, error) {
	path := filepath.Join(b.dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	var admin string
	if _, err := fmt.Sscanf(cfg[strings.Index(cfg, "admin:"):], "admin:\n  listen: %q", &admin); err != nil {
		return nil, fmt.Errorf("config of %s: %w", name, err)
	}
	return startProcess(ctx, bin, []string{"serve", "-config", path}, "http://"+admin+"/healthz", filepath.Join(b.dir, name+".log"))
}

func (b *bench) close(o options) {
	if b.proc != nil {
		_ = b.proc.stop()
	}
	for _, p := range b.peers {
		_ = p.stop()
	}
	if b.dropStore != nil {
		b.dropStore()
	}
	b.rcv.close()
	if !o.keep {
		os.RemoveAll(b.dir)
	} else {
		progress("data kept in %s", b.dir)
	}
}

// waitDelivered polls until the receiver has n deliveries or d passes.
func (b *bench) waitDelivered(ctx context.Context, n int64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for b.rcv.delivered.Load() < n {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// runLoad drives the bench gateway while printing progress every second.
func (b *bench) runLoad(ctx context.Context, s loadSpec) loadResult {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last := int64(0)
		for {
			select {
			case <-done:
				return
			case <-t.C:
				rss, _ := b.proc.rssKiB()
				d := b.rcv.delivered.Load()
				progress("  delivered %d (+%d/s), gateway RSS %.0f MiB", d, d-last, float64(rss)/1024)
				last = d
			}
		}
	}()
	r := drive(ctx, s)
	close(done)
	return r
}

// ingestScenario is durable ingest alone: no endpoint subscribes, so the
// figures are the accept path (verify, dedupe, fsynced write) against the
// bare-Fiber ceiling.
func ingestScenario(ctx context.Context, o options, bin string) (Result, error) {
	return deliveryScenario(ctx, o, bin, "ingest", nil, o.retries)
}

func steady(ctx context.Context, o options, bin string) (Result, error) {
	return deliveryScenario(ctx, o, bin, "steady", []string{"r0"}, o.retries)
}

func fanout(ctx context.Context, o options, bin string) (Result, error) {
	paths := make([]string, o.endpoints)
	for i := range paths {
		paths[i] = fmt.Sprintf("r%d", i)
	}
	return deliveryScenario(ctx, o, bin, "fanout", paths, o.retries)
}

// deliveryScenario ingests for the duration and waits for every delivery.
func deliveryScenario(ctx context.Context, o options, bin, name string, paths []string, retries float64) (Result, error) {
	b, err := startBench(ctx, o, bin, paths)
	if err != nil {
		return Result{}, err
	}
	defer b.close(o)
	cpu0 := b.cpu()
	sync0, serr0 := readSyncs(ctx, b.admin)
	t0 := time.Now()
	lr := b.runLoad(ctx, loadSpec{urls: b.ingestURLs(), clients: o.clients, duration: o.duration, bodySize: o.bodySize, retries: retries, prefix: name})
	cpu1 := b.cpu()
	sync1, serr1 := readSyncs(ctx, b.admin)
	took := time.Since(t0)
	fresh := lr.OK - lr.Replayed
	want := fresh * int64(len(paths))
	if !b.waitDelivered(ctx, want, 120*time.Second) {
		progress("  warning: %d of %d deliveries arrived", b.rcv.delivered.Load(), want)
	}
	r := summarize(name, o, lr)
	r.CPUPerReqUs = cpuPerRequest(cpu0, cpu1, lr.OK)
	if err := errors.Join(serr0, serr1); err != nil {
		if o.storage != "postgres" { // Postgres syncs its WAL itself: no such figures
			progress("  warning: no store sync figures: %v", err)
		}
	} else {
		fillSyncs(&r, sync0, sync1, took)
	}
	fillDeliveries(&r, b, lr)
	_, peak := b.proc.rssKiB()
	r.PeakRSSMiB = float64(peak) / 1024
	return r, nil
}

func duplicates(ctx context.Context, o options, bin string) (Result, error) {
	b, err := startBench(ctx, o, bin, []string{"r0"})
	if err != nil {
		return Result{}, err
	}
	defer b.close(o)
	lr := b.runLoad(ctx, loadSpec{urls: b.ingestURLs(), clients: o.clients, duration: o.duration, bodySize: o.bodySize, fixedIDs: 100, prefix: "dup"})
	b.waitDelivered(ctx, 100, 30*time.Second)
	r := summarize("duplicates", o, lr)
	fillDeliveries(&r, b, lr)
	_, peak := b.proc.rssKiB()
	r.PeakRSSMiB = float64(peak) / 1024
	note := fmt.Sprintf("%d clients x 100 events: %d first answers, %d replays", o.clients, lr.OK-lr.Replayed, lr.Replayed)
	r.Notes = strings.TrimPrefix(r.Notes+"; "+note, "; ") // after summarize's notes (answers by status)
	return r, nil
}

// backlog queues o.backlog deliveries for an endpoint that is down,
// watching ingest rate and RSS, then restarts the gateway with the endpoint
// up and measures how soon deliveries resume.
func backlog(ctx context.Context, o options, bin string) (Result, error) {
	b, err := startBench(ctx, o, bin, []string{"!down"})
	if err != nil {
		return Result{}, err
	}
	defer b.close(o)
	rssStart, _ := b.proc.rssKiB()
	anonStart, anonPeak := b.proc.anonKiB(), int64(0)
	tenth := int64(o.backlog / 10)
	var rates []float64
	var total loadResult
	for i := 0; i < 10 && ctx.Err() == nil; i++ {
		lr := b.runLoad(ctx, loadSpec{urls: b.ingestURLs(), clients: o.clients, total: tenth, bodySize: o.bodySize, prefix: fmt.Sprintf("backlog%d", i)})
		rate := float64(lr.OK) / lr.Elapsed.Seconds()
		rss, _ := b.proc.rssKiB()
		anon := b.proc.anonKiB()
		anonPeak = max(anonPeak, anon)
		progress("  backlog %d/10: %.0f req/s, RSS %.0f MiB (anonymous %.0f MiB)", i+1, rate, float64(rss)/1024, float64(anon)/1024)
		rates = append(rates, rate)
		total.Requests += lr.Requests
		total.OK += lr.OK
		total.Errors += lr.Errors
		for _, at := range lr.AckAt {
			total.AckAt = append(total.AckAt, total.Elapsed+at)
		}
		total.Elapsed += lr.Elapsed
		total.Latencies = append(total.Latencies, lr.Latencies...)
	}
	r := summarize("backlog+restart", o, total)
	rssEnd, peak := b.proc.rssKiB()
	r.Backlog, r.RSSStartMiB, r.RSSEndMiB, r.PeakRSSMiB = total.OK, float64(rssStart)/1024, float64(rssEnd)/1024, float64(peak)/1024
	r.AnonStartMiB, r.AnonPeakMiB, r.AnonEndMiB = float64(anonStart)/1024, float64(anonPeak)/1024, float64(b.proc.anonKiB())/1024
	if len(rates) == 10 {
		r.RateFirstTenth, r.RateLastTenth = rates[0], rates[9]
	}
	// The admin listings the console pages make, over what is stored now.
	r.ListMS = listTimes(ctx, b.admin, []string{
		"/events?limit=50",
		"/events?limit=50&source=bench&type=bench.event",
		"/events?limit=50&event_id=backlog5-500",
		"/events?limit=50&state=pending",
		"/events?limit=50&state=unmatched",
		"/deliveries?limit=50",
		"/deliveries?limit=50&endpoint=ep0&status=pending",
		"/endpoints",
		"/endpoints/ep0/stats",
		"/stats",
	})
	for _, q := range slices.Sorted(maps.Keys(r.ListMS)) {
		progress("  GET /api/v1%s: %.1f ms (median of 5)", q, r.ListMS[q])
	}
	// Restart with the endpoint up: how soon do deliveries resume?
	progress("  restarting with the endpoint up ...")
	if err := b.proc.stop(); err != nil {
		return r, fmt.Errorf("stop: %w", err)
	}
	t0 := time.Now()
	if err := b.start(ctx, o, bin, []string{"r0"}); err != nil {
		return r, err
	}
	b.waitDelivered(ctx, 1, 120*time.Second)
	r.ResumeAfterSecs = time.Since(t0).Seconds()
	window := 10 * time.Second
	n0 := b.rcv.delivered.Load()
	time.Sleep(window) // a measurement window, not synchronisation
	r.DeliveryRPS = float64(b.rcv.delivered.Load()-n0) / window.Seconds()
	r.Deliveries = b.rcv.delivered.Load()
	r.Notes = fmt.Sprintf("restart to first delivery %.2fs (includes process start and store open); drain rate %.0f/s", r.ResumeAfterSecs, r.DeliveryRPS)
	return r, nil
}

func fillDeliveries(r *Result, b *bench, lr loadResult) {
	n, dups, lats, _, last := b.rcv.snapshot()
	r.Deliveries, r.Duplicates = n, dups
	if n > 0 && !last.IsZero() {
		// From the start of the load to the last delivery.
		r.DeliveryRPS = float64(n) / last.Sub(lr.Start).Seconds()
	}
	r.E2EP50ms, r.E2EP99ms = ms(pct(lats, 50)), ms(pct(lats, 99))
}

// listTimes times each admin API path five times and returns the medians
// in ms (-1 for a path that did not answer 200).
func listTimes(ctx context.Context, admin string, paths []string) map[string]float64 {
	out := map[string]float64{}
	for _, p := range paths {
		var ms []float64
		for range 5 {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/api/v1"+p, nil)
			if err != nil {
				break
			}
			req.Header.Set("Authorization", "Bearer hookbench-admin-token")
			t0 := time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				break
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				break
			}
			ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
		}
		if len(ms) < 5 {
			out[p] = -1
			continue
		}
		slices.Sort(ms)
		out[p] = ms[2]
	}
	return out
}
