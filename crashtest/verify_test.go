package crashtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"hookgate/storage"
)

// maxFindingsPerKind bounds how many failures of one kind are printed; the
// counts in the report are complete.
const maxFindingsPerKind = 10

// report is a run's figures, logged and written as JSON to
// CRASHTEST_REPORT. docs/guarantees.md quotes it.
type report struct {
	Seed           uint64  `json:"seed"`
	Kills          int     `json:"kills"`
	StartupKills   int     `json:"startup_kills"`
	ReceiverFaults int     `json:"receiver_fault_stretches"`
	LoadSeconds    float64 `json:"load_seconds"`
	// DrainSeconds is from the end of the load to the outbox being empty
	// with every acknowledged event delivered.
	DrainSeconds float64 `json:"drain_seconds"`
	RunSeconds   float64 `json:"run_seconds"`

	IngestRequests int `json:"ingest_requests"`
	// Unanswered requests failed without an answer (killed process).
	Unanswered  int `json:"ingest_unanswered"`
	Unavailable int `json:"ingest_503"`
	Unexpected  int `json:"ingest_unexpected_status"`

	EventsSent         int `json:"events_sent"`
	EventsAcknowledged int `json:"events_acknowledged"`
	ReplayedAnswers    int `json:"replayed_answers"`
	// AckedByReplayOnly are events whose first accept was persisted but
	// its answer lost to a kill: only the resend got the (stored) 202.
	AckedByReplayOnly int `json:"acknowledged_by_replay_only"`
	EventsStored      int `json:"events_stored"`
	// StoredUnacknowledged were persisted but their answer was lost to a
	// kill (the sender never retried them, or its retries failed too).
	StoredUnacknowledged int `json:"stored_unacknowledged"`
	EventsLost           int `json:"events_lost"`
	DoubleAccepts        int `json:"double_accepts"`
	KeyMismatches        int `json:"idempotency_key_mismatches"`

	ReceiverRequests    int `json:"receiver_requests"`
	EventsDelivered     int `json:"events_delivered"`
	Deliveries          int `json:"deliveries"`
	DuplicateDeliveries int `json:"duplicate_deliveries"`
	// DuplicateRate is deliveries beyond the first per event, per
	// delivered event.
	DuplicateRate float64 `json:"duplicate_delivery_rate"`

	AdminAPIChecked  bool `json:"admin_api_checked"`
	GatewayErrorLogs int  `json:"gateway_error_log_lines"`
}

// findings collects failures by kind, so that one bug does not drown the
// log in thousands of identical lines.
type findings struct {
	byKind map[string][]string
	counts map[string]int
}

func newFindings() *findings {
	return &findings{byKind: make(map[string][]string), counts: make(map[string]int)}
}

func (f *findings) add(kind, format string, args ...any) {
	f.counts[kind]++
	if len(f.byKind[kind]) < maxFindingsPerKind {
		f.byKind[kind] = append(f.byKind[kind], fmt.Sprintf(format, args...))
	}
}

// report fails t once per kind, with the examples kept.
func (f *findings) report(t *testing.T) {
	t.Helper()
	kinds := make([]string, 0, len(f.counts))
	for k := range f.counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		t.Errorf("%s: %d cases, e.g.\n  %s", k, f.counts[k], strings.Join(f.byKind[k], "\n  "))
	}
}

// ack is what the gateway answered an acknowledged event.
type ack struct {
	ev *event
	id string // the gateway's event id, from the 202 body
}

// checkAnswers checks the ingest answers of every event: all 2xx answers
// of one event are byte-identical, at most one of them is not a replay,
// and every 2xx to a request sent after a 2xx was received is a replay.
// It returns the acknowledged events by test id.
func checkAnswers(evs []*event, rep *report, f *findings) map[string]ack {
	acked := make(map[string]ack)
	for _, ev := range evs {
		answers := ev.snapshot()
		var ok []answer
		for _, a := range answers {
			rep.IngestRequests++
			switch {
			case a.status == 0:
				rep.Unanswered++
			case a.acknowledged():
				ok = append(ok, a)
			case a.status == 503:
				rep.Unavailable++
			default:
				rep.Unexpected++
				f.add("unexpected ingest status", "%s: %d %s", ev.msgID, a.status, excerpt(a.body, 200))
			}
		}
		if len(ok) == 0 {
			continue
		}
		acked[ev.testID] = ack{ev: ev, id: checkAcks(ev, ok, rep, f)}
	}
	rep.EventsSent = len(evs)
	rep.EventsAcknowledged = len(acked)
	return acked
}

// checkAcks checks the 2xx answers of one event and returns its gateway id.
func checkAcks(ev *event, ok []answer, rep *report, f *findings) string {
	var body struct {
		ID      string `json:"id"`
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(ok[0].body, &body); err != nil || !strings.HasPrefix(body.ID, "evt_") || body.EventID != ev.msgID {
		f.add("malformed 202 body", "%s: %s", ev.msgID, excerpt(ok[0].body, 200))
	}
	fine := true
	firstEnd := ok[0].end
	fresh := 0
	for _, a := range ok {
		if a.end.Before(firstEnd) {
			firstEnd = a.end
		}
		if a.replayed {
			rep.ReplayedAnswers++
		} else {
			fresh++
		}
		if !bytes.Equal(a.body, ok[0].body) {
			fine = false
			f.add("double accept: different answers", "%s: %s vs %s", ev.msgID, ok[0].body, a.body)
		}
	}
	if fresh == 0 {
		rep.AckedByReplayOnly++
	}
	if fresh > 1 {
		fine = false
		f.add("double accept: several first answers", "%s: %d 2xx answers without Idempotent-Replayed", ev.msgID, fresh)
	}
	for _, a := range ok {
		if a.start.After(firstEnd) && !a.replayed {
			fine = false
			f.add("double accept: retry not replayed", "%s: request sent %v after the event was acknowledged got a first answer",
				ev.msgID, a.start.Sub(firstEnd).Round(time.Millisecond))
		}
	}
	if !fine {
		rep.DoubleAccepts++
	}
	return body.ID
}

// checkReceived checks what the receiver got: every acknowledged event
// delivered, one Idempotency-Key per event (the pure function of tenant,
// source and event ID), the original body byte for byte.
func checkReceived(evs []*event, acked map[string]ack, got map[string]received, rep *report, f *findings) {
	sent := make(map[string]*event, len(evs))
	for _, ev := range evs {
		sent[ev.testID] = ev
	}
	for id, a := range acked {
		if got[id].delivered == 0 {
			rep.EventsLost++
			f.add("acknowledged event lost", "%s (gateway id %s) acknowledged, never delivered", a.ev.msgID, a.id)
		}
	}
	for id, rc := range got {
		ev := sent[id]
		if ev == nil {
			f.add("delivery of an event never sent", "test id %q", id)
			continue
		}
		want := storage.IdempotencyKey(tenantID, sourceID, ev.msgID)
		if len(rc.keys) != 1 || rc.keys[want] == 0 {
			rep.KeyMismatches++
			f.add("Idempotency-Key not stable", "%s: keys %v, want only %s", ev.msgID, rc.keys, want)
		}
		if !bytes.Equal(rc.body, ev.body) {
			f.add("delivered body differs", "%s: got %q", ev.msgID, excerpt(rc.body, 200))
		}
		if rc.delivered > 0 {
			rep.EventsDelivered++
			rep.Deliveries += rc.delivered
			rep.DuplicateDeliveries += rc.delivered - 1
		}
	}
	if rep.EventsDelivered > 0 {
		rep.DuplicateRate = float64(rep.DuplicateDeliveries) / float64(rep.EventsDelivered)
	}
}

// checkStored checks the gateway's events against what was sent: exactly
// one event per provider event ID, the acknowledged gateway id, the body
// byte for byte; with deliveries (the store itself, read after the stop),
// one succeeded delivery per event carrying the event's key, and the
// receiver has it.
func checkStored(where string, stored []storedEvent, withDeliveries bool, evs []*event, acked map[string]ack,
	got map[string]received, rep *report, f *findings) {
	byMsg := make(map[string]*event, len(evs))
	for _, ev := range evs {
		byMsg[ev.msgID] = ev
	}
	seen := make(map[string]storedEvent, len(stored))
	for _, se := range stored {
		ev := byMsg[se.EventID]
		switch {
		case ev == nil:
			f.add(where+": unknown event", "%s holds %s with event id %q", where, se.ID, se.EventID)
			continue
		case seen[se.EventID].ID != "":
			rep.DoubleAccepts++
			f.add(where+": double accept", "event id %s stored twice: %s and %s", se.EventID, seen[se.EventID].ID, se.ID)
			continue
		}
		seen[se.EventID] = se
		if !bytes.Equal(se.Body, ev.body) {
			f.add(where+": stored body differs", "%s: %q", se.ID, excerpt(se.Body, 200))
		}
		if a, ok := acked[ev.testID]; ok && a.id != se.ID {
			rep.DoubleAccepts++
			f.add(where+": double accept", "%s acknowledged as %s but stored as %s", ev.msgID, a.id, se.ID)
		}
		if withDeliveries {
			checkStoredDeliveries(where, se, ev, got, f)
		}
	}
	for id, a := range acked {
		if seen[a.ev.msgID].ID == "" {
			f.add(where+": acknowledged event missing", "%s (%s, test id %s)", a.id, a.ev.msgID, id)
		}
	}
	if withDeliveries {
		rep.EventsStored = len(seen)
		for msg := range seen {
			if _, ok := acked[byMsg[msg].testID]; !ok {
				rep.StoredUnacknowledged++
			}
		}
	}
}

// checkStoredDeliveries checks one stored event's deliveries.
func checkStoredDeliveries(where string, se storedEvent, ev *event, got map[string]received, f *findings) {
	want := storage.IdempotencyKey(tenantID, sourceID, ev.msgID)
	if len(se.Deliveries) != 1 {
		f.add(where+": deliveries per event", "%s has %d deliveries, want 1 (one endpoint)", se.ID, len(se.Deliveries))
	}
	for _, d := range se.Deliveries {
		if d.State != storage.StateSucceeded {
			f.add(where+": delivery not succeeded", "%s of %s: %s after %d attempts (%s)", d.ID, se.ID, d.State, d.AttemptCount, d.LastError)
		}
		if d.IdempotencyKey != want {
			f.add(where+": delivery key", "%s of %s: key %s, want %s", d.ID, se.ID, d.IdempotencyKey, want)
		}
	}
	if got[ev.testID].delivered == 0 {
		f.add(where+": stored event never delivered", "%s (%s)", se.ID, ev.msgID)
	}
}

// writeReport logs the figures and writes them to CRASHTEST_REPORT.
func writeReport(t *testing.T, path string, rep *report) {
	t.Helper()
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", b)
	if path == "" {
		return
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Errorf("write CRASHTEST_REPORT: %v", err)
	}
}
