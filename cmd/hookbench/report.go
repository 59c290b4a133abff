package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

func summarize(name string, o options, lr loadResult) Result {
	r := Result{Scenario: name, Clients: o.clients, Requests: lr.Requests, Acked: lr.OK, Replayed: lr.Replayed, Errors: lr.Errors}
	if lr.Elapsed > 0 {
		r.IngestRPS = float64(lr.OK) / lr.Elapsed.Seconds()
	}
	r.AckP50ms, r.AckP99ms, r.AckMaxms = ms(pct(lr.Latencies, 50)), ms(pct(lr.Latencies, 99)), ms(pct(lr.Latencies, 100))
	r.FirstP50ms, r.ReplayP50ms = ms(pct(lr.FirstLat, 50)), ms(pct(lr.ReplayLat, 50))
	if bad := lr.Requests - lr.OK - lr.Errors; bad > 0 {
		r.Notes = fmt.Sprintf("non-2xx answers: %v", lr.Status)
	}
	return r
}

// pct returns the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func printTable(w io.Writer, rs []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tclients\tacked\tingest/s\tvs ceiling\tack p50 ms\tack p99 ms\tack max ms\tdeliveries\tdeliv/s\te2e p50 ms\te2e p99 ms\tdup deliv\tpeak RSS MiB\t")
	for _, r := range rs {
		ratio := "-"
		if r.CeilingRatio > 0 {
			ratio = fmt.Sprintf("%.0f%%", 100*r.CeilingRatio)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%.2f\t%.2f\t%.2f\t%d\t%.0f\t%.1f\t%.1f\t%d\t%.0f\t\n",
			r.Scenario, r.Clients, r.Acked, r.IngestRPS, ratio, r.AckP50ms, r.AckP99ms, r.AckMaxms,
			r.Deliveries, r.DeliveryRPS, r.E2EP50ms, r.E2EP99ms, r.Duplicates, r.PeakRSSMiB)
	}
	tw.Flush()
	for _, r := range rs {
		if r.Backlog > 0 {
			fmt.Fprintf(w, "\n%s: %d pending deliveries queued; ingest %.0f req/s in the first tenth, %.0f in the last; RSS %.0f MiB at start, %.0f at end (peak %.0f); anonymous memory %.0f MiB at start, peak %.0f, end %.0f\n",
				r.Scenario, r.Backlog, r.RateFirstTenth, r.RateLastTenth, r.RSSStartMiB, r.RSSEndMiB, r.PeakRSSMiB, r.AnonStartMiB, r.AnonPeakMiB, r.AnonEndMiB)
		}
		if r.FirstP50ms > 0 && r.ReplayP50ms > 0 {
			fmt.Fprintf(w, "%s: first requests p50 %.2f ms, replayed duplicates p50 %.2f ms\n", r.Scenario, r.FirstP50ms, r.ReplayP50ms)
		}
		if r.Notes != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Scenario, r.Notes)
		}
	}
}
