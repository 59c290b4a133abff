package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestPrintMedians(t *testing.T) {
	var rs []Result
	for i, c := range []struct{ ratio, p99, cpu float64 }{{0.40, 30, 130}, {0.55, 20, 110}, {0.50, 22, 120}} {
		rs = append(rs, Result{Scenario: "ceiling (bare Fiber 202)", Round: i + 1, AckP99ms: 10},
			Result{Scenario: "ingest", Round: i + 1, CeilingRatio: c.ratio, AckP99ms: c.p99, CPUPerReqUs: c.cpu})
	}
	var b strings.Builder
	printMedians(&b, rs)
	want := "ingest over 3 rounds: vs ceiling median 50% (40-55%), ack p99 median 22.0 ms (20.0-30.0), server CPU median 120 µs/request (110-130)"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("got\n%s\nwant a line %q", b.String(), want)
	}
}

func TestEventBody(t *testing.T) {
	for _, size := range []int{1024, 4096} {
		b := eventBody("bench-7", 1764439200123456789, size)
		if !json.Valid(b) {
			t.Errorf("size %d: not JSON: %s", size, b)
		}
		if len(b) < size-8 || len(b) > size+8 {
			t.Errorf("size %d: body is %d bytes", size, len(b))
		}
		if !strings.Contains(string(b), `"sent":1764439200123456789`) || !strings.Contains(string(b), `"id":"bench-7"`) {
			t.Errorf("body lacks its id or send time: %s", b)
		}
	}
	if a, b := eventBody("x", 1, 1024), eventBody("x", 2, 1024); string(a) == string(b) {
		t.Error("two events have the same body")
	}
}

// The CPU a process used is read from /proc: this test process's own
// figure grows while it burns CPU.
func TestProcessCPU(t *testing.T) {
	p := &process{cmd: exec.Command("self")}
	p.cmd.Process = &os.Process{Pid: os.Getpid()}
	before := p.cpu()
	after := before
	for deadline := time.Now().Add(5 * time.Second); after <= before && time.Now().Before(deadline); {
		for x := 0; x < 1e6; x++ {
			_ = x * x
		}
		after = p.cpu()
	}
	if after <= before {
		t.Fatalf("cpu stayed at %v while spinning for 5 s", before)
	}
	if us := cpuPerRequest(before, after, 10); us <= 0 {
		t.Fatalf("cpu per request %v", us)
	}
}

// The timeline puts each answer in the interval it arrived in, with that
// interval's own percentiles, so a slow patch shows where it happened.
func TestTimeline(t *testing.T) {
	ms := time.Millisecond
	lr := loadResult{
		Latencies: []time.Duration{5 * ms, 7 * ms, 40 * ms, 6 * ms, 60 * ms},
		AckAt:     []time.Duration{100 * ms, 400 * ms, 1200 * ms, 1300 * ms, 2600 * ms},
	}
	got := timeline(lr, time.Second)
	want := []Interval{
		{StartS: 0, Acked: 2, P50ms: 5, P99ms: 7, Maxms: 7},
		{StartS: 1, Acked: 2, P50ms: 6, P99ms: 40, Maxms: 40},
		{StartS: 2, Acked: 1, P50ms: 60, P99ms: 60, Maxms: 60},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d intervals %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("interval %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	var b strings.Builder
	printTimeline(&b, []Result{{Scenario: "ingest", Timeline: got}})
	if !strings.Contains(b.String(), "ingest, answers per interval") || strings.Count(b.String(), "\n") != 6 {
		t.Fatalf("printed:\n%s", b.String())
	}
}
