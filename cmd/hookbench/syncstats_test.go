package main

import (
	"context"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// syncMetrics serves the two series the gateway exports for its store's
// syncs, under their names, observed as given.
func syncMetrics(t *testing.T, durations []float64, writes float64) *httptest.Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "hookgate_store_sync_seconds", Help: "syncs"})
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "hookgate_store_synced_writes_total", Help: "writes"})
	reg.MustRegister(h, c)
	for _, d := range durations {
		h.Observe(d)
	}
	c.Add(writes)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv
}

func TestSyncFiguresFromTwoScrapes(t *testing.T) {
	before, err := readSyncs(context.Background(), strings.TrimPrefix(syncMetrics(t, []float64{0.001}, 10).URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := readSyncs(context.Background(), strings.TrimPrefix(syncMetrics(t, []float64{0.001, 0.002, 0.004, 0.002, 0.003}, 90).URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	fillSyncs(&r, before, after, 2*time.Second)
	// 4 more syncs in 2 s, 80 more writes, 11 ms more in all.
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"syncs per second", r.SyncsPerSec, 2}, {"writes per sync", r.WritesPerSync, 20}, {"mean ms", r.SyncMeanMs, 2.75}} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestSyncFiguresMissingSeriesIsAnError(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "hookgate_store_synced_writes_total", Help: "writes"}))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	if _, err := readSyncs(context.Background(), strings.TrimPrefix(srv.URL, "http://")); err == nil || !strings.Contains(err.Error(), "hookgate_store_sync_seconds") {
		t.Fatalf("readSyncs without the histogram: err = %v, want one naming it", err)
	}
}

func TestNoSyncFiguresWithoutSyncs(t *testing.T) {
	var r Result
	fillSyncs(&r, syncReading{syncs: 5, writes: 50}, syncReading{syncs: 5, writes: 50}, time.Second)
	if r.SyncsPerSec != 0 || r.WritesPerSync != 0 || r.SyncMeanMs != 0 {
		t.Fatalf("no syncs in between gave %+v", r)
	}
}
