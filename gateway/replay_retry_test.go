package gateway

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/problem"
	"hookgate/internal/testsupport"
	"hookgate/storage"
)

// A bulk replay whose write fails (a full disk, for a moment) retries the
// step instead of failing the job: once the store writes again, the job
// completes with every event replayed once. A store that keeps failing
// still fails the job, after replayRetryFor.
func TestBulkReplayRetriesStoreErrors(t *testing.T) {
	defer func(d time.Duration) { replayRetryFor = d }(replayRetryFor)
	replayRetryFor = 2 * time.Second
	rcv := newReceiver(t)
	g, fs := startFaulty(t, endpointA(rcv))
	ingestN(t, g, "rr", 3)
	testsupport.WaitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 3 })

	fs.set(faultBefore, "EnqueueReplay")
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	testsupport.WaitFor(t, 10*time.Second, "two failed enqueues", func() bool { return fs.failures("EnqueueReplay") >= 2 })
	if j := must[admin.Replay](t, 200)(g.api("GET", "/replays/"+job.ID, acmeToken, nil)); j.State != "running" {
		t.Fatalf("after a failed write the job is %+v, want still running", j)
	}
	fs.set(faultNone, "EnqueueReplay")
	job = waitReplay(t, g, acmeToken, job.ID)
	if job.State != "completed" || job.Matched != 3 || job.Enqueued != 3 {
		t.Fatalf("job after the store recovered: %+v", job)
	}
	testsupport.WaitFor(t, 10*time.Second, "the replayed deliveries", func() bool { return rcv.count() == 6 })

	fs.set(faultBefore, "EnqueueReplay")
	job = must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	if job = waitReplay(t, g, acmeToken, job.ID); job.State != "failed" || job.Enqueued != 0 {
		t.Fatalf("job on a store that keeps failing: %+v, want failed", job)
	}
}

// A write reported failed after it was stored (an ambiguous failure: a
// timeout after the write, a lost answer) is not written again: the retry
// goes on from the job's stored progress. (Once, a retry ran the whole
// step again, and a job whose last batch was done had its cursor cleared,
// so it replayed every event a second time.)
func TestBulkReplayRetryGoesOnFromTheStoredProgress(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	fs := &failAfterWrite{}
	fs.fails.Store(2)
	g := startWrapped(t, rcv, func(s storage.Store) storage.Store { fs.Store = s; return fs })
	ingestN(t, g, "rp", 3)
	testsupport.WaitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 3 })

	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	testsupport.WaitFor(t, 10*time.Second, "the write reported failed", func() bool { return fs.fails.Load() < 2 })
	job = waitReplay(t, g, acmeToken, job.ID)
	if job.State != "completed" || job.Matched != 3 || job.Enqueued != 3 {
		t.Fatalf("job: %+v", job)
	}
	testsupport.WaitFor(t, 10*time.Second, "the replayed deliveries", func() bool { return rcv.count() >= 6 })
	ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{Limit: 100})
	if err != nil || len(ds) != 6 {
		t.Fatalf("%d deliveries, %v; want 6 (3 events, replayed once)", len(ds), err)
	}
}

// failAfterWrite reports the first writes of a replay's progress failed
// after storing them.
type failAfterWrite struct {
	storage.Store
	fails atomic.Int32
}

func (f *failAfterWrite) EnqueueReplay(ctx context.Context, job *storage.ReplayJob, ds []storage.Delivery) error {
	if err := f.Store.EnqueueReplay(ctx, job, ds); err != nil {
		return err
	}
	if f.fails.Add(-1) >= 0 {
		return errInjected
	}
	return nil
}

// failingFailWrite fails every EnqueueReplay, and the first writes of a
// job as failed.
type failingFailWrite struct {
	storage.Store
	fails atomic.Int32
}

func (f *failingFailWrite) EnqueueReplay(context.Context, *storage.ReplayJob, []storage.Delivery) error {
	return errInjected
}

func (f *failingFailWrite) PutReplay(ctx context.Context, job *storage.ReplayJob) error {
	if job.State == storage.ReplayFailed && f.fails.Add(-1) >= 0 {
		return errInjected
	}
	return f.Store.PutReplay(ctx, job)
}

// The write that records a job as failed is retried too: a job whose
// failure went unrecorded showed as running until the next start.
func TestBulkReplayRetriesRecordingItsFailure(t *testing.T) {
	defer func(d time.Duration) { replayRetryFor = d }(replayRetryFor)
	replayRetryFor = time.Second
	rcv := newReceiver(t)
	fs := &failingFailWrite{}
	fs.fails.Store(2)
	g := startWrapped(t, rcv, func(s storage.Store) storage.Store { fs.Store = s; return fs })
	ingestN(t, g, "ff", 2) // their first deliveries are written by Ingest, not Enqueue
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	if job = waitReplay(t, g, acmeToken, job.ID); job.State != "failed" || fs.fails.Load() > 0 {
		t.Fatalf("job: %+v (failed writes still to come: %d)", job, fs.fails.Load())
	}
}

// A bulk replay whose first read of its job fails (the store briefly
// unreadable) retries the read like a step, and completes once the store
// reads again, instead of staying running until the next start.
func TestBulkReplayRetriesItsFirstRead(t *testing.T) {
	rcv := newReceiver(t)
	fs := &failReplayReads{}
	fs.fails.Store(2)
	g := startWrapped(t, rcv, func(s storage.Store) storage.Store { fs.Store = s; return fs })
	ingestN(t, g, "rf", 3)
	testsupport.WaitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 3 })

	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	testsupport.WaitFor(t, 10*time.Second, "the failed reads", func() bool { return fs.fails.Load() <= 0 })
	if job = waitReplay(t, g, acmeToken, job.ID); job.State != "completed" || job.Enqueued != 3 {
		t.Fatalf("job: %+v", job)
	}
	testsupport.WaitFor(t, 10*time.Second, "the replayed deliveries", func() bool { return rcv.count() == 6 })
}

// failReplayReads fails the first reads of a replay job.
type failReplayReads struct {
	storage.Store
	fails atomic.Int32
}

func (f *failReplayReads) GetReplay(ctx context.Context, id string) (storage.ReplayJob, error) {
	if f.fails.Add(-1) >= 0 {
		return storage.ReplayJob{}, errInjected
	}
	return f.Store.GetReplay(ctx, id)
}

// Replays and manual retries as an operator uses them: attempt numbers,
// keys, states, Idempotency-Key answers, resumed jobs.

func getDelivery(t *testing.T, g *gw, id string) admin.Delivery {
	t.Helper()
	return must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+id, acmeToken, nil))
}

func waitDeliveryState(t *testing.T, g *gw, id, state string) admin.Delivery {
	t.Helper()
	var d admin.Delivery
	testsupport.WaitFor(t, 10*time.Second, "delivery "+id+" to be "+state, func() bool {
		d = getDelivery(t, g, id)
		return d.State == state
	})
	return d
}

// A manual retry of a failed delivery continues its attempt numbers (the
// header and the attempts list agree), with a fresh budget; retries of a
// succeeded delivery resend it; the key and webhook-id never change, on
// retries and on replays; the list filters follow the state.
func TestRetryEveryStateKeepsKeyAndNumbers(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: rs, tenant: acme, url: %q, retry: {max_attempts: 2}}
  - {id: rs2, tenant: acme, url: %q}
`, rcv.url("rs"), rcv.url("rs2"))})
	rcv.failAt("rs", true)
	ids := ingestN(t, g, "rst", 1)
	ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+ids[0], acmeToken, nil))
	var d admin.Delivery
	testsupport.WaitFor(t, 10*time.Second, "the rs delivery", func() bool {
		ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=rs&event="+ids[0], acmeToken, nil))
		if len(ds.Data) == 1 {
			d = ds.Data[0]
		}
		return len(ds.Data) == 1
	})
	d = waitDeliveryState(t, g, d.ID, "failed")
	if d.AttemptCount != 2 || d.NextAttemptAt != "" {
		t.Fatalf("failed: %+v", d)
	}
	// Retry while still failing: a fresh budget of 2, numbered 3 and 4.
	r := must[admin.Delivery](t, 202)(g.api("POST", "/deliveries/"+d.ID+"/retry", acmeToken, nil))
	if r.State != "pending" || r.NextAttemptAt == "" || r.AttemptCount != 2 {
		t.Fatalf("retry answer: %+v", r)
	}
	d = waitDeliveryState(t, g, d.ID, "failed")
	if d.AttemptCount != 4 || len(*d.Attempts) != 4 {
		t.Fatalf("after a failing retry: %+v", d)
	}
	for i, a := range *d.Attempts {
		_ = a
		found := false
		for _, b := range *d.Attempts {
			found = found || b.N == i+1
		}
		if !found {
			t.Fatalf("attempt %d missing: %+v", i+1, *d.Attempts)
		}
	}
	if n := len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?status=failed&endpoint=rs", acmeToken, nil)).Data); n != 1 {
		t.Fatalf("status=failed lists %d", n)
	}
	rcv.failAt("rs", false)
	must[admin.Delivery](t, 202)(g.api("POST", "/deliveries/"+d.ID+"/retry", acmeToken, nil))
	d = waitDeliveryState(t, g, d.ID, "succeeded")
	if d.AttemptCount != 5 || d.NextAttemptAt != "" {
		t.Fatalf("after a good retry: %+v", d)
	}
	// A succeeded delivery is sent again on request.
	must[admin.Delivery](t, 202)(g.api("POST", "/deliveries/"+d.ID+"/retry", acmeToken, nil))
	testsupport.WaitFor(t, 10*time.Second, "the resend", func() bool { return rcv.countAt("rs") == 6 })
	d = waitDeliveryState(t, g, d.ID, "succeeded")
	// A replay: new delivery, attempt 1, same key.
	rp := must[admin.List[admin.Delivery]](t, 202)(g.api("POST", "/events/"+ids[0]+"/replay", acmeToken, jsonMap{"endpoints": []string{"rs"}}))
	if len(rp.Data) != 1 || rp.Data[0].ID == d.ID || rp.Data[0].IdempotencyKey != ev.IdempotencyKey {
		t.Fatalf("replay: %+v", rp)
	}
	testsupport.WaitFor(t, 10*time.Second, "the replay", func() bool { return rcv.countAt("rs") == 7 })
	reqs := rcv.at("rs")
	want := []int{1, 2, 3, 4, 5, 6, 1}
	for i, q := range reqs {
		if q.header.Get("Idempotency-Key") != ev.IdempotencyKey || q.header.Get("webhook-id") != ev.IdempotencyKey {
			t.Fatalf("request %d: key %q webhook-id %q, want %q", i, q.header.Get("Idempotency-Key"), q.header.Get("webhook-id"), ev.IdempotencyKey)
		}
		if n, _ := strconv.Atoi(q.header.Get("hookgate-attempt")); n != want[i] {
			t.Fatalf("request %d: hookgate-attempt %q, want %d", i, q.header.Get("hookgate-attempt"), want[i])
		}
	}
	if k := rcv.at("rs2")[0].header.Get("webhook-id"); k != ev.IdempotencyKey {
		t.Fatalf("other endpoint's webhook-id %q", k)
	}
	// Cancelled: the endpoint disabled then deleted; its delivery cannot be retried.
	must[jsonMap](t, 200)(g.api("PATCH", "/endpoints/rs", acmeToken, jsonMap{"disabled": true}))
	wantProblem(t, "retry to a disabled endpoint", 409, "-")(g.api("POST", "/deliveries/"+d.ID+"/retry", acmeToken, nil))
	wantProblem(t, "replay to a disabled endpoint", 409, "endpoints[0]")(g.api("POST", "/events/"+ids[0]+"/replay", acmeToken, jsonMap{"endpoints": []string{"rs"}}))
	dflt := must[admin.List[admin.Delivery]](t, 202)(g.api("POST", "/events/"+ids[0]+"/replay", acmeToken, nil))
	if len(dflt.Data) != 1 || dflt.Data[0].Endpoint != "rs2" {
		t.Fatalf("default replay with rs disabled: %+v", dflt)
	}
	if st, _, b := g.api("DELETE", "/endpoints/rs", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	wantProblem(t, "retry of a deleted endpoint's delivery", 409, "-")(g.api("POST", "/deliveries/"+d.ID+"/retry", acmeToken, nil))
	wantProblem(t, "replay to a deleted endpoint", 422, "endpoints[0]")(g.api("POST", "/events/"+ids[0]+"/replay", acmeToken, jsonMap{"endpoints": []string{"rs"}}))
}

// A pending delivery waiting out a long backoff is sent at once on a
// manual retry; one being delivered is 409 with Retry-After, and can be
// retried once its attempt ended.
func TestRetryOfPendingAndDeliveringDeliveries(t *testing.T) {
	rcv := newReceiver(t)
	held := newHeldReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: pl, tenant: acme, url: %q, sources: [open], retry: {initial_interval: 1h, max_interval: 1h, randomization: 0, max_elapsed: 3h}}
  - {id: hd, tenant: acme, url: %q, sources: [sw]}
`, rcv.url("pl"), held.URL)})
	rcv.failAt("pl", true)
	ids := ingestN(t, g, "pl", 1)
	var d admin.Delivery
	testsupport.WaitFor(t, 10*time.Second, "the first failure", func() bool {
		ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=pl", acmeToken, nil)).Data
		if len(ds) == 1 && ds[0].AttemptCount == 1 && ds[0].State == "pending" {
			d = ds[0]
			return true
		}
		return false
	})
	if next, _ := time.Parse(time.RFC3339Nano, d.NextAttemptAt); time.Until(next) < 30*time.Minute {
		t.Fatalf("next attempt %s, want ~1h ahead", d.NextAttemptAt)
	}
	rcv.failAt("pl", false)
	must[admin.Delivery](t, 202)(g.api("POST", "/deliveries/"+d.ID+"/retry", acmeToken, nil))
	d = waitDeliveryState(t, g, d.ID, "succeeded")
	if d.AttemptCount != 2 || rcv.countAt("pl") != 2 || rcv.at("pl")[1].header.Get("hookgate-attempt") != "2" {
		t.Fatalf("after retry: %+v, %d requests", d, rcv.countAt("pl"))
	}
	_ = ids

	// Being delivered.
	body := []byte(`{"type":"x"}`)
	st, _, b := g.post("sw", body, signSW("msg_held1", time.Now(), body))
	if st != 202 {
		t.Fatalf("ingest sw: %d %s", st, b)
	}
	held.waitHit(t)
	var hdv admin.Delivery
	testsupport.WaitFor(t, 5*time.Second, "the delivering state", func() bool {
		ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=hd", acmeToken, nil)).Data
		if len(ds) == 1 {
			hdv = ds[0]
		}
		return len(ds) == 1 && ds[0].State == "delivering"
	})
	st, hdr, b := g.api("POST", "/deliveries/"+hdv.ID+"/retry", acmeToken, nil)
	if st != 409 {
		t.Fatalf("retry while delivering: %d %s", st, b)
	}
	if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 {
		t.Fatalf("Retry-After %q", hdr.Get("Retry-After"))
	}
	held.release()
	waitDeliveryState(t, g, hdv.ID, "succeeded")
	r := must[admin.Delivery](t, 202)(g.api("POST", "/deliveries/"+hdv.ID+"/retry", acmeToken, nil))
	if r.State != "pending" {
		t.Fatalf("retry after the attempt: %+v", r)
	}
	waitDeliveryState(t, g, hdv.ID, "succeeded")
	if got := getDelivery(t, g, hdv.ID); got.AttemptCount != 2 || len(*got.Attempts) != 2 {
		t.Fatalf("after: %+v", got)
	}
}

// Admin Idempotency-Key on the replay POSTs: the same request gets the
// stored answer byte for byte with Idempotent-Replayed and makes nothing
// new; the key with another body or another path is 422.
func TestReplayIdempotencyKeyAnswers(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: ik, tenant: acme, url: %q}\n  - {id: ik2, tenant: acme, url: %q}\n",
		rcv.url("ik"), rcv.url("ik2"))})
	ids := ingestN(t, g, "idem", 2)
	testsupport.WaitFor(t, 10*time.Second, "the originals", func() bool { return rcv.count() == 4 })
	path := "/events/" + ids[0] + "/replay"
	body := jsonMap{"endpoints": []string{"ik"}}
	st1, h1, b1 := g.api("POST", path, acmeToken, body, "Idempotency-Key", "rk")
	st2, h2, b2 := g.api("POST", path, acmeToken, body, "Idempotency-Key", "rk")
	if st1 != 202 || st2 != 202 || string(b1) != string(b2) || h2.Get("Idempotent-Replayed") != "true" || h1.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first %d %s %v; second %d %s %v", st1, b1, h1, st2, b2, h2)
	}
	if n := len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+ids[0], acmeToken, nil)).Data); n != 3 {
		t.Fatalf("%d deliveries, want 3", n)
	}
	p := wantProblem(t, "same key, other body", 422, "-")(g.api("POST", path, acmeToken, jsonMap{"endpoints": []string{"ik2"}}, "Idempotency-Key", "rk"))
	if p.Type != problem.Base+"idempotency-key-reused" {
		t.Fatalf("type %s", p.Type)
	}
	wantProblem(t, "same key, other event", 422, "-")(g.api("POST", "/events/"+ids[1]+"/replay", acmeToken, body, "Idempotency-Key", "rk"))
	wantProblem(t, "same key, a retry", 422, "-")(g.api("POST", "/deliveries/"+must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+ids[1], acmeToken, nil)).Data[0].ID+"/retry", acmeToken, nil, "Idempotency-Key", "rk"))
	// Another tenant's scope: the same key is free there.
	must[admin.List[admin.Delivery]](t, 202)(g.api("POST", path, opToken, body, "Idempotency-Key", "rk"))

	// Bulk: one job per key use.
	jb := jsonMap{"endpoint": "ik2", "status": "succeeded"}
	j1 := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jb, "Idempotency-Key", "bk"))
	st, hdr, b := g.api("POST", "/replays", acmeToken, jb, "Idempotency-Key", "bk")
	j2 := must[admin.Replay](t, 202)(st, hdr, b)
	if j1.ID != j2.ID || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("jobs %s, %s (%v)", j1.ID, j2.ID, hdr)
	}
	job := waitReplay(t, g, acmeToken, j1.ID)
	if job.State != "completed" || job.Matched != 2 || job.Enqueued != 2 {
		t.Fatalf("job %+v", job)
	}
	wantProblem(t, "bulk key, other filters", 422, "-")(g.api("POST", "/replays", acmeToken, jsonMap{"endpoint": "ik"}, "Idempotency-Key", "bk"))
}

// heldEnqueue holds replay writes until released.
type heldEnqueue struct {
	storage.Store
	in      chan struct{}
	release chan struct{}
}

func (s *heldEnqueue) Enqueue(ctx context.Context, ds []storage.Delivery) error {
	select {
	case s.in <- struct{}{}:
	default:
	}
	<-s.release
	return s.Store.Enqueue(ctx, ds)
}

// The same Idempotency-Key while its replay still runs: 409 with
// Retry-After, and nothing done twice; then the stored answer.
func TestReplaySameKeyInProgressIs409(t *testing.T) {
	rcv := newReceiver(t)
	s := &heldEnqueue{in: make(chan struct{}, 1), release: make(chan struct{})}
	g := startGateway(t, gwOptions{
		wrapStore: func(st storage.Store) storage.Store { s.Store = st; return s },
		extra:     fmt.Sprintf("endpoints:\n  - {id: ip, tenant: acme, url: %q}\n", rcv.url("ip")),
	})
	ids := ingestN(t, g, "ip", 1)
	path := "/events/" + ids[0] + "/replay"
	first := make(chan []byte, 1)
	go func() {
		st, _, b := g.api("POST", path, acmeToken, nil, "Idempotency-Key", "ip-1")
		if st != 202 {
			b = append([]byte(fmt.Sprint(st, " ")), b...)
		}
		first <- b
	}()
	select {
	case <-s.in:
	case <-time.After(10 * time.Second):
		t.Fatal("the first replay never reached its write")
	}
	st, hdr, b := g.api("POST", path, acmeToken, nil, "Idempotency-Key", "ip-1")
	if st != 409 || hdr.Get("Retry-After") == "" {
		close(s.release)
		t.Fatalf("while in progress: %d %v %s", st, hdr, b)
	}
	close(s.release)
	b1 := <-first
	st, hdr, b2 := g.api("POST", path, acmeToken, nil, "Idempotency-Key", "ip-1")
	if st != 202 || string(b1) != string(b2) || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after: %d %s (first %s)", st, b2, b1)
	}
	testsupport.WaitFor(t, 10*time.Second, "the original and the replay", func() bool { return rcv.countAt("ip") == 2 })
	if n := len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+ids[0], acmeToken, nil)).Data); n != 2 {
		t.Fatalf("%d deliveries, want 2", n)
	}
}

// blockedReplays holds every replay write until its context ends (the
// shutdown), as a deploy that stops the gateway mid-job does.
type blockedReplays struct {
	storage.Store
	entered atomic.Int32
}

func (s *blockedReplays) EnqueueReplay(ctx context.Context, job *storage.ReplayJob, ds []storage.Delivery) error {
	s.entered.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// A bulk replay stopped by a shutdown before its first write resumes at
// the next start and then replays each matched event exactly once, with
// exact counts; events received after the job was created are not in it.
func TestBulkReplayResumesAfterRestartWithExactCounts(t *testing.T) {
	rcv := newReceiver(t)
	extra := fmt.Sprintf("endpoints:\n  - {id: rr, tenant: acme, url: %q}\n", rcv.url("rr"))
	blocked := &blockedReplays{}
	g := startGateway(t, gwOptions{extra: extra, wrapStore: func(s storage.Store) storage.Store { blocked.Store = s; return blocked }})
	ingestN(t, g, "res", 5)
	testsupport.WaitFor(t, 10*time.Second, "the originals", func() bool { return rcv.countAt("rr") == 5 })
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	testsupport.WaitFor(t, 10*time.Second, "the job's first write", func() bool { return blocked.entered.Load() > 0 })
	g = g.restart(gwOptions{extra: extra})
	// Received after the job was created: not the job's.
	ingestN(t, g, "late", 1)
	done := waitReplay(t, g, acmeToken, job.ID)
	if done.State != "completed" || done.Matched != 5 || done.Enqueued != 5 {
		t.Fatalf("resumed job: %+v", done)
	}
	testsupport.WaitFor(t, 10*time.Second, "the replayed deliveries", func() bool { return rcv.countAt("rr") == 5+1+5 })
	seen := map[string]int{}
	for _, q := range rcv.at("rr") {
		seen[q.header.Get("webhook-id")]++
	}
	if len(seen) != 6 {
		t.Fatalf("webhook-ids: %v", seen)
	}
	for k, n := range seen {
		if n != 2 && n != 1 {
			t.Fatalf("event %s sent %d times", k, n)
		}
	}
}

// A bulk replay whose window starts after the job was created (a since in
// the future, a typo of a year) matches nothing and completes.
func TestBulkReplayWindowAfterCreationCompletesEmpty(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: fw, tenant: acme, url: %q}\n", rcv.url("fw"))})
	ingestN(t, g, "fw", 2)
	testsupport.WaitFor(t, 10*time.Second, "the originals", func() bool { return rcv.countAt("fw") == 2 })
	since := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"since": since}))
	job = waitReplay(t, g, acmeToken, job.ID)
	if job.State != "completed" || job.Matched != 0 || job.Enqueued != 0 {
		t.Fatalf("job %+v", job)
	}
	// since == until == an event's received_at: exactly that event.
	evs := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events", acmeToken, nil)).Data
	at := evs[1].ReceivedAt
	job = must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"since": at, "until": at}))
	job = waitReplay(t, g, acmeToken, job.ID)
	if job.State != "completed" || job.Matched != 1 || job.Enqueued != 1 {
		t.Fatalf("exact window job %+v", job)
	}
	testsupport.WaitFor(t, 10*time.Second, "the replay", func() bool { return rcv.countAt("fw") == 3 })
}
