package main

import (
	"fmt"
	"io"
	"math"
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
	if o.timeline > 0 {
		r.Timeline = timeline(lr, o.timeline)
	}
	for st := range lr.Status {
		if st < 200 || st > 299 {
			r.Notes = fmt.Sprintf("answers by status: %v", lr.Status)
			break
		}
	}
	return r
}

// Interval sums up the requests answered in one slice of a load phase.
type Interval struct {
	StartS float64 `json:"start_s"`
	Acked  int     `json:"acked"`
	P50ms  float64 `json:"ack_p50_ms"`
	P99ms  float64 `json:"ack_p99_ms"`
	Maxms  float64 `json:"ack_max_ms"`
}

// timeline splits a phase's acknowledged requests by when they were
// answered, into intervals of step.
func timeline(lr loadResult, step time.Duration) []Interval {
	var buckets [][]time.Duration
	for i, at := range lr.AckAt {
		k := int(at / step)
		for len(buckets) <= k {
			buckets = append(buckets, nil)
		}
		buckets[k] = append(buckets[k], lr.Latencies[i])
	}
	out := make([]Interval, len(buckets))
	for k, ds := range buckets {
		out[k] = Interval{StartS: (time.Duration(k) * step).Seconds(), Acked: len(ds),
			P50ms: ms(pct(ds, 50)), P99ms: ms(pct(ds, 99)), Maxms: ms(pct(ds, 100))}
	}
	return out
}

// printTimeline prints one line per interval of each result that has them.
func printTimeline(w io.Writer, rs []Result) {
	for _, r := range rs {
		if len(r.Timeline) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s, answers per interval:\n", r.label())
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "from s\tacked\tp50 ms\tp99 ms\tmax ms\t")
		for _, iv := range r.Timeline {
			fmt.Fprintf(tw, "%.1f\t%d\t%.1f\t%.1f\t%.1f\t\n", iv.StartS, iv.Acked, iv.P50ms, iv.P99ms, iv.Maxms)
		}
		tw.Flush()
	}
}

// pct returns the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(float64(len(s))*p/100)) - 1 // rank ceil(p/100 * n)
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// label is the scenario's name, with its round when there are several.
func (r Result) label() string {
	if r.Round > 0 {
		return fmt.Sprintf("#%d %s", r.Round, r.Scenario)
	}
	return r.Scenario
}

func printTable(w io.Writer, rs []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tclients\tacked\tingest/s\tvs ceiling\tack p50 ms\tack p99 ms\tack max ms\tdeliveries\tdeliv/s\te2e p50 ms\te2e p99 ms\tdup deliv\tpeak RSS MiB\t")
	for _, r := range rs {
		ratio := "-"
		if r.CeilingRatio > 0 {
			ratio = fmt.Sprintf("%.0f%%", 100*r.CeilingRatio)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%.2f\t%.2f\t%.2f\t%d\t%.0f\t%.1f\t%.1f\t%d\t%.0f\t\n",
			r.label(), r.Clients, r.Acked, r.IngestRPS, ratio, r.AckP50ms, r.AckP99ms, r.AckMaxms,
			r.Deliveries, r.DeliveryRPS, r.E2EP50ms, r.E2EP99ms, r.Duplicates, r.PeakRSSMiB)
	}
	tw.Flush()
	for _, r := range rs {
		if r.Backlog > 0 {
			fmt.Fprintf(w, "\n%s: %d pending deliveries queued; ingest %.0f req/s in the first tenth, %.0f in the last; RSS %.0f MiB at start, %.0f at end (peak %.0f); anonymous memory %.0f MiB at start, peak %.0f, end %.0f\n",
				r.Scenario, r.Backlog, r.RateFirstTenth, r.RateLastTenth, r.RSSStartMiB, r.RSSEndMiB, r.PeakRSSMiB, r.AnonStartMiB, r.AnonPeakMiB, r.AnonEndMiB)
		}
		if r.CPUPerReqUs > 0 {
			fmt.Fprintf(w, "%s: server CPU %.0f µs per acknowledged request\n", r.label(), r.CPUPerReqUs)
		}
		if r.SyncsPerSec > 0 {
			fmt.Fprintf(w, "%s: store syncs %.0f/s, %.1f writes per sync, %.2f ms per sync on average\n", r.label(), r.SyncsPerSec, r.WritesPerSync, r.SyncMeanMs)
		}
		if r.FirstP50ms > 0 && r.ReplayP50ms > 0 {
			fmt.Fprintf(w, "%s: first requests p50 %.2f ms, replayed duplicates p50 %.2f ms\n", r.Scenario, r.FirstP50ms, r.ReplayP50ms)
		}
		if r.Notes != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Scenario, r.Notes)
		}
	}
}

// printMedians summarises repeated rounds: per scenario, the median and
// range of its rate against the ceiling of the same round, and of its ack
// p99.
func printMedians(w io.Writer, rs []Result) {
	var order []string
	ratio, p99, cpu := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	for _, r := range rs {
		if _, seen := p99[r.Scenario]; !seen {
			order = append(order, r.Scenario)
		}
		p99[r.Scenario] = append(p99[r.Scenario], r.AckP99ms)
		if r.CeilingRatio > 0 {
			ratio[r.Scenario] = append(ratio[r.Scenario], 100*r.CeilingRatio)
		}
		if r.CPUPerReqUs > 0 {
			cpu[r.Scenario] = append(cpu[r.Scenario], r.CPUPerReqUs)
		}
	}
	fmt.Fprintln(w)
	for _, name := range order {
		line := fmt.Sprintf("%s over %d rounds:", name, len(p99[name]))
		if v := ratio[name]; len(v) > 0 {
			m, lo, hi := spread(v)
			line += fmt.Sprintf(" vs ceiling median %.0f%% (%.0f-%.0f%%),", m, lo, hi)
		}
		m, lo, hi := spread(p99[name])
		line += fmt.Sprintf(" ack p99 median %.1f ms (%.1f-%.1f)", m, lo, hi)
		if v := cpu[name]; len(v) > 0 {
			m, lo, hi := spread(v)
			line += fmt.Sprintf(", server CPU median %.0f µs/request (%.0f-%.0f)", m, lo, hi)
		}
		fmt.Fprintln(w, line)
	}
}

// spread returns the median (the lower middle one of an even count),
// minimum and maximum of v.
func spread(v []float64) (median, lo, hi float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)/2], s[0], s[len(s)-1]
}
