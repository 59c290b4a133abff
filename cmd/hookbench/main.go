// Command hookbench measures hookgate the way a user would: it starts (or
// targets) a gateway, drives it with concurrent keep-alive clients posting
// signed events, runs the receiver the events are delivered to, and reports
// ingest and delivery rates and latencies next to the machine's ceiling (a
// bare Fiber handler answering 202, driven the same way in the same run).
//
//	go run ./cmd/hookbench -scenario steady -clients 64 -duration 10s
//	go run ./cmd/hookbench -scenario all -json
//	go run ./cmd/hookbench -scenario ingest -rounds 5
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// options are the command's flags.
type options struct {
	scenario  string
	clients   int
	duration  time.Duration
	bodySize  int
	retries   float64
	endpoints int
	backlog   int
	bin       string
	target    string
	jsonOut   bool
	ceiling   bool
	keep      bool
	inFlight  int
	rounds    int
	timeline  time.Duration
	storage   string // badger | postgres
	dsn       string // postgres: a server where hookbench may create a schema
	gateways  int    // gateways on one store (postgres), clients round-robin
}

func main() {
	var o options
	flag.StringVar(&o.scenario, "scenario", "steady", "ingest | steady | duplicates | fanout | backlog | restart | all")
	flag.IntVar(&o.clients, "clients", 64, "concurrent keep-alive clients")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "how long each load phase runs")
	flag.IntVar(&o.bodySize, "body", 1024, "event body size in bytes")
	flag.Float64Var(&o.retries, "retries", 0, "share of requests that are exact retries of an earlier event (0..1)")
	flag.IntVar(&o.endpoints, "endpoints", 10, "endpoints in the fanout scenario")
	flag.IntVar(&o.backlog, "backlog", 1_000_000, "pending deliveries to queue in the backlog scenario")
	flag.StringVar(&o.bin, "bin", "", "hookgate binary to run (default: build it from this repo)")
	flag.StringVar(&o.target, "target", "", "base URL of a running hookgate with a standard-webhooks source 'bench' signed with hookbench's secret (see load.go); hookbench then measures ingest only")
	flag.BoolVar(&o.jsonOut, "json", false, "print the results as JSON")
	flag.BoolVar(&o.ceiling, "ceiling", true, "also measure a bare Fiber handler answering 202")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary data directory")
	flag.IntVar(&o.inFlight, "max-in-flight", 128, "max_in_flight of each bench endpoint")
	flag.IntVar(&o.rounds, "rounds", 1, "repeat the ceiling and the scenarios this many times, alternating, and print the medians (a shared machine's speed drifts between runs)")
	flag.DurationVar(&o.timeline, "timeline", 0, "also print each scenario's answers per interval of this length (count, p50, p99, max), to see when slow answers happen")
	flag.StringVar(&o.storage, "storage", "badger", "badger | postgres (with -dsn)")
	flag.StringVar(&o.dsn, "dsn", os.Getenv("HOOKBENCH_POSTGRES_DSN"), "with -storage postgres: a PostgreSQL server where hookbench creates (and drops) a schema for each run")
	flag.IntVar(&o.gateways, "gateways", 1, "with -storage postgres: gateways on the one database, the clients spread over them round-robin")
	serveBare := flag.String("serve-bare", "", "internal: serve a bare Fiber 202 handler on this address")
	wrkRequests := flag.Int("wrk-requests", 0, "write this many signed ingest requests for wrk (see wrk.sh) and exit")
	wrkFiles := flag.String("wrk-files", "req", "with -wrk-requests: file prefix, one file per wrk thread")
	wrkThreads := flag.Int("wrk-threads", 2, "with -wrk-requests: wrk threads (files)")
	flag.Parse()
	if *wrkRequests > 0 {
		if err := writeWrkRequests(*wrkRequests, *wrkThreads, o.bodySize, *wrkFiles); err != nil {
			fmt.Fprintln(os.Stderr, "hookbench:", err)
			os.Exit(1)
		}
		return
	}
	if *serveBare != "" {
		if err := serveBareFiber(*serveBare); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	results, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hookbench:", err)
		os.Exit(1)
	}
	if o.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(results)
		return
	}
	printTable(os.Stdout, results)
	printTimeline(os.Stdout, results)
	if o.rounds > 1 {
		printMedians(os.Stdout, results)
	}
}

// run executes the chosen scenarios, o.rounds times.
func run(ctx context.Context, o options) ([]Result, error) {
	if o.target != "" {
		r, err := ingestOnly(ctx, o)
		return []Result{r}, err
	}
	bin, cleanup, err := gatewayBinary(o.bin)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var out []Result
	for round := 1; round <= max(1, o.rounds); round++ {
		if o.rounds > 1 {
			progress("== round %d of %d", round, o.rounds)
		}
		rs, err := runRound(ctx, o, bin)
		for i := range rs {
			if o.rounds > 1 {
				rs[i].Round = round
			}
		}
		out = append(out, rs...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// runRound measures the ceiling (unless turned off), then each scenario,
// each against that ceiling.
func runRound(ctx context.Context, o options, bin string) ([]Result, error) {
	var ceiling *Result
	if o.ceiling {
		c, err := measureCeiling(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("ceiling: %w", err)
		}
		ceiling = &c
	}
	names := []string{o.scenario}
	if o.scenario == "all" {
		names = []string{"ingest", "steady", "duplicates", "fanout", "backlog"}
	}
	var out []Result
	if ceiling != nil {
		out = append(out, *ceiling)
	}
	for _, name := range names {
		fn, ok := scenarios[name]
		if !ok {
			return out, fmt.Errorf("unknown scenario %q (want %s)", name, strings.Join(scenarioNames(), ", "))
		}
		progress("== scenario %s", name)
		r, err := fn(ctx, o, bin)
		if err != nil {
			return out, fmt.Errorf("%s: %w", name, err)
		}
		if ceiling != nil && ceiling.IngestRPS > 0 {
			r.CeilingRatio = r.IngestRPS / ceiling.IngestRPS
		}
		out = append(out, r)
	}
	return out, nil
}

func progress(format string, a ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
}
