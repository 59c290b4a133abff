package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// syncReading is the store's group-commit counters from the gateway's
// /metrics: syncs made, the seconds they took, and the writes they made
// durable.
type syncReading struct {
	syncs, seconds, writes float64
}

// readSyncs scrapes the admin listener's /metrics.
func readSyncs(ctx context.Context, admin string) (syncReading, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return syncReading{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return syncReading{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return syncReading{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return syncReading{}, fmt.Errorf("GET /metrics: %w", err)
	}
	secs := fams["hookgate_store_sync_seconds"]
	if secs == nil || len(secs.Metric) != 1 || secs.Metric[0].Histogram == nil {
		return syncReading{}, fmt.Errorf("GET /metrics: no hookgate_store_sync_seconds histogram")
	}
	writes := fams["hookgate_store_synced_writes_total"]
	if writes == nil || len(writes.Metric) != 1 || writes.Metric[0].Counter == nil {
		return syncReading{}, fmt.Errorf("GET /metrics: no hookgate_store_synced_writes_total counter")
	}
	h := secs.Metric[0].Histogram
	r := syncReading{syncs: float64(h.GetSampleCount()), seconds: h.GetSampleSum(), writes: writes.Metric[0].Counter.GetValue()}
	return r, nil
}

// fillSyncs sets r's sync figures from two readings taken d apart.
func fillSyncs(r *Result, before, after syncReading, d time.Duration) {
	n := after.syncs - before.syncs
	if n <= 0 || d <= 0 {
		return
	}
	r.SyncsPerSec = n / d.Seconds()
	r.WritesPerSync = (after.writes - before.writes) / n
	r.SyncMeanMs = 1000 * (after.seconds - before.seconds) / n
}
