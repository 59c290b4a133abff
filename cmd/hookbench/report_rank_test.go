package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// pct says it is the nearest-rank percentile: the smallest sample with at
// least p% of the samples at or below it, i.e. rank ceil(p/100*n). For
// 199 samples 1..199 ms, p99 is rank ceil(197.01) = 198: 197 ms has only
// 98.99% of the samples at or below it.
func TestPctIsNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 199; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if got := pct(ds, 99); got != 198*time.Millisecond {
		t.Fatalf("p99 of 1..199 ms = %v, want 198ms (nearest rank)", got)
	}
}

// The duplicates scenario's report must describe the run that was made:
// with -clients 4 it said "64 clients x 100 events: ...".
func TestDuplicatesReportDescribesTheRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway")
	}
	bin, cleanup, err := gatewayBinary("")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	o := options{clients: 4, duration: time.Second, bodySize: 1024, inFlight: 8}
	r, err := duplicates(context.Background(), o, bin)
	if err != nil {
		t.Fatal(err)
	}
	if r.Clients != 4 || strings.Contains(r.Notes, "64 clients") {
		t.Errorf("ran with %d clients, the report says: %q", r.Clients, r.Notes)
	}
}
