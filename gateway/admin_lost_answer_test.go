package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

// lostAnswers is the real store as a process that dies between an
// idempotent POST's write and the write of its answer leaves it: the
// answer is never stored, and the key's claim holds until its lease ends,
// after which SPEC section 5 runs the retry again. Leases are short here,
// so that the retry comes soon.
type lostAnswers struct {
	storage.Store
	lease time.Duration
}

func (s *lostAnswers) ClaimKey(ctx context.Context, c storage.IdemClaim) (storage.IdemResult, error) {
	c.LeaseUntil = c.Now.Add(s.lease)
	return s.Store.ClaimKey(ctx, c)
}

func (s *lostAnswers) FinishKey(context.Context, string, string, time.Time, storage.Response, time.Time) error {
	return errors.New("the process died before the answer was stored")
}

// postUntil sends a POST under key until ready says its answer is the one
// waited for, and returns that answer, which must have status want.
func postUntil[T any](t *testing.T, g *gw, path string, body any, key string, want int, what string,
	ready func(st int, hdr http.Header) bool) T {
	t.Helper()
	var got T
	waitFor(t, 15*time.Second, what, func() bool {
		st, hdr, b := g.api("POST", path, acmeToken, body, "Idempotency-Key", key)
		if !ready(st, hdr) {
			return false
		}
		if st != want {
			t.Fatalf("%s: %d %s", what, st, b)
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		return true
	})
	return got
}

// rerun sends a POST under key until it runs again (the first run's claim
// has ended: no more 409).
func rerun[T any](t *testing.T, g *gw, path string, body any, key string, want int) T {
	t.Helper()
	return postUntil[T](t, g, path, body, key, want, "the lost answer's claim to end and the retry to run",
		func(st int, _ http.Header) bool { return st != 409 })
}

// A POST /endpoints without an id, run again after its answer was lost,
// answers with the endpoint its first run made, secret included, instead
// of making a second endpoint (which would get every event again).
func TestCreateEndpointRunAgainAfterLostAnswer(t *testing.T) {
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store {
		return &lostAnswers{Store: s, lease: time.Second}
	}})
	before := countEndpoints(t, g)
	body := jsonMap{"url": "http://receiver.test/lost"}
	first := must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "lost-1"))
	again := rerun[endpointView](t, g, "/endpoints", body, "lost-1", 201)
	if again.ID != first.ID || again.Secret != first.Secret || again.URL != first.URL {
		t.Fatalf("run again: %+v, first run: %+v", again, first)
	}
	if n := countEndpoints(t, g); n != before+1 {
		t.Fatalf("%d endpoints, want %d", n, before+1)
	}

	// Another key is another request: another endpoint.
	other := must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "lost-2"))
	if other.ID == first.ID {
		t.Fatalf("two keys made one id %s", other.ID)
	}
	// Without a key every POST makes a new endpoint.
	plain1 := must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, body))
	plain2 := must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, body))
	if plain1.ID == plain2.ID || plain1.Secret == plain2.Secret {
		t.Fatalf("two POSTs without a key: %s and %s", plain1.ID, plain2.ID)
	}
	// An id the request names is the request's: taken, it stays a 409.
	named := jsonMap{"id": "named-lost", "url": "http://receiver.test/lost"}
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, named, "Idempotency-Key", "lost-3"))
	wantProblem(t, "named id taken", 409, "id")(g.api("POST", "/endpoints", acmeToken, named, "Idempotency-Key", "lost-4"))
}

// A bulk replay run again after its answer was lost answers with the job
// its first run started, and starts no second one: every matched event
// goes out once more, not twice.
func TestCreateReplayRunAgainAfterLostAnswer(t *testing.T) {
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store {
		return &lostAnswers{Store: s, lease: time.Second}
	}})
	body := jsonMap{"source": "open"}
	first := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, body, "Idempotency-Key", "lost-replay"))
	again := rerun[replayView](t, g, "/replays", body, "lost-replay", 202)
	if again.ID != first.ID {
		t.Fatalf("run again started job %s; the first run's is %s", again.ID, first.ID)
	}
	other := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, body, "Idempotency-Key", "another"))
	if other.ID == first.ID {
		t.Fatalf("two keys, one job %s", other.ID)
	}
}

// A create whose write was stored but reported failed (a timeout after
// the write: the answer is a 503, and the key is given up so that a retry
// runs again) is found by that retry, not made a second time; a bulk
// replay found that way is run.
func TestCreateRunAgainAfterAnAmbiguousWriteFindsIt(t *testing.T) {
	rcv := newReceiver(t)
	g, fs := startFaulty(t, endpointA(rcv))
	before := countEndpoints(t, g)
	// It subscribes to no event of this test: the replay below is to "a".
	body := jsonMap{"url": "http://receiver.test/ambiguous", "event_types": []string{"none.*"}}
	fs.set(faultAfter, "PutEndpoint")
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "amb-ep")
	want503(t, "endpoint write reported failed", st, hdr, b)
	fs.set(faultNone, "PutEndpoint")
	again := must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "amb-ep"))
	if n := countEndpoints(t, g); n != before+1 || again.URL != "http://receiver.test/ambiguous" {
		t.Fatalf("%d endpoints (want %d), answer %+v", n, before+1, again)
	}

	ingestN(t, g, "amb", 2)
	waitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 2 })
	fs.set(faultAfter, "CreateReplay")
	st, hdr, b = g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}, "Idempotency-Key", "amb-rpl")
	want503(t, "replay job write reported failed", st, hdr, b)
	fs.set(faultNone, "CreateReplay")
	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}, "Idempotency-Key", "amb-rpl"))
	if job = waitReplay(t, g, acmeToken, job.ID); job.State != "completed" || job.Enqueued != 2 {
		t.Fatalf("job: %+v", job)
	}
	waitFor(t, 10*time.Second, "the replayed deliveries", func() bool { return rcv.count() == 4 })
	ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{Limit: 100})
	if err != nil || len(ds) != 4 {
		t.Fatalf("%d deliveries, %v; want 4 (2 events, replayed once)", len(ds), err)
	}
}

// An endpoint whose create was written but reported failed (503; the key
// is given up) and that the retry then finds by its derived id must also
// get deliveries: the retry answers 201 with it, so the operator takes it
// as made, but the first run's 503 returned before the registry was
// reloaded, and the retry's "found it" answer did not reload it either:
// until some other catalog change or a restart, ingest made no delivery
// for the endpoint the operator was told exists.
func TestCreateEndpointFoundAfterAmbiguousWriteGetsDeliveries(t *testing.T) {
	rcv := newReceiver(t)
	g, fs := startFaulty(t, endpointA(rcv))
	body := jsonMap{"url": rcv.url("found")}
	fs.set(faultAfter, "PutEndpoint")
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "amb-found")
	want503(t, "endpoint write reported failed", st, hdr, b)
	fs.set(faultNone, "PutEndpoint")
	ep := must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "amb-found"))
	if ep.URL != rcv.url("found") {
		t.Fatalf("retry answered %+v", ep)
	}
	ingestN(t, g, "after-found", 1)
	waitFor(t, 10*time.Second, "the event at endpoint a", func() bool { return rcv.byPath()["/a"] == 1 })
	deadline := time.Now().Add(5 * time.Second)
	for rcv.byPath()["/found"] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("endpoint %s (answered 201) got no delivery of an event ingested after; receiver saw %v", ep.ID, rcv.byPath())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A POST /endpoints or /sources that names its id, run again after its
// answer was lost, answers 201 with what its first run made: the id is
// taken, by this very request. It stayed a 409 "already exists", stored as
// the key's answer for dedupe.ttl, for a create that had succeeded.
// Another key naming the same id is another request: 409.
func TestCreateNamedRunAgainAfterLostAnswer(t *testing.T) {
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store {
		return &lostAnswers{Store: s, lease: time.Second}
	}})
	ep := jsonMap{"id": "named-ep", "url": "http://receiver.test/named"}
	first := must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, ep, "Idempotency-Key", "named-1"))
	again := rerun[endpointView](t, g, "/endpoints", ep, "named-1", 201)
	if again.ID != "named-ep" || again.Secret != first.Secret {
		t.Fatalf("run again: %+v, first run: %+v", again, first)
	}
	wantProblem(t, "the id under another key", 409, "id")(g.api("POST", "/endpoints", acmeToken, ep, "Idempotency-Key", "named-2"))

	src := jsonMap{"id": "named-src", "verify": jsonMap{"scheme": "none"}}
	must[sourceView](t, 201)(g.api("POST", "/sources", acmeToken, src, "Idempotency-Key", "named-3"))
	if again := rerun[sourceView](t, g, "/sources", src, "named-3", 201); again.ID != "named-src" {
		t.Fatalf("run again: %+v", again)
	}
	wantProblem(t, "the source id under another key", 409, "id")(g.api("POST", "/sources", acmeToken, src, "Idempotency-Key", "named-4"))
}

// POST /events/{id}/replay run again after its answer was lost answers
// with the deliveries its first run made and sends the event once more,
// not twice; and POST /deliveries/{id}/retry run again does not send the
// delivery a third time.
func TestReplayAndRetryRunAgainAfterLostAnswer(t *testing.T) {
	rcv := newReceiver(t)
	g := startWrapped(t, rcv, func(s storage.Store) storage.Store {
		return &lostAnswers{Store: s, lease: time.Second}
	})
	id := ingestN(t, g, "lost-replay", 1)[0]
	waitFor(t, 10*time.Second, "the first delivery", func() bool { return rcv.count() == 1 })

	path := "/events/" + id + "/replay"
	first := must[apiList[deliveryView]](t, 202)(g.api("POST", path, acmeToken, jsonMap{}, "Idempotency-Key", "lost-r"))
	waitFor(t, 10*time.Second, "the replay", func() bool { return rcv.count() == 2 })
	again := rerun[apiList[deliveryView]](t, g, path, jsonMap{}, "lost-r", 202)
	if len(first.Data) != 1 || len(again.Data) != 1 || again.Data[0].ID != first.Data[0].ID {
		t.Fatalf("run again answered %+v; the first run made %+v", again.Data, first.Data)
	}

	retry := "/deliveries/" + first.Data[0].ID + "/retry"
	waitFor(t, 10*time.Second, "the replay's outcome", func() bool {
		return g.dpDelivery(first.Data[0].ID).State == "succeeded"
	})
	must[deliveryView](t, 202)(g.api("POST", retry, acmeToken, nil, "Idempotency-Key", "lost-t"))
	waitFor(t, 10*time.Second, "the retry's outcome", func() bool {
		d := g.dpDelivery(first.Data[0].ID)
		return d.State == "succeeded" && d.AttemptCount == 2
	})
	rerun[deliveryView](t, g, retry, nil, "lost-t", 202)

	// A later replay under another key is sent. Once it is delivered, the
	// receiver has had 4 requests if neither run again sent anything.
	later := must[apiList[deliveryView]](t, 202)(g.api("POST", path, acmeToken, jsonMap{}, "Idempotency-Key", "lost-r2"))
	waitFor(t, 10*time.Second, "the second replay", func() bool {
		return len(later.Data) == 1 && g.dpDelivery(later.Data[0].ID).State == "succeeded"
	})
	ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{Event: id, Limit: 10})
	if err != nil || len(ds) != 3 {
		t.Fatalf("%d deliveries of the event, %v; want 3 (the first, two replays)", len(ds), err)
	}
	if n := rcv.count(); n != 4 {
		t.Fatalf("receiver got %d requests, want 4 (first, replay, retry, second replay)", n)
	}
	if d := g.dpDelivery(first.Data[0].ID); d.AttemptCount != 2 {
		t.Fatalf("the replay's delivery made %d attempts, want 2 (its own and the retry's)", d.AttemptCount)
	}
}

// failFirstEnqueue fails the first replay write, storing nothing: the
// admin API answers 503 and gives the Idempotency-Key up (its use, and so
// its start time, is kept for the retry the 503 invites).
type failFirstEnqueue struct {
	storage.Store
	failed atomic.Bool
}

func (s *failFirstEnqueue) Enqueue(ctx context.Context, ds []storage.Delivery) error {
	if s.failed.CompareAndSwap(false, true) {
		return errors.New("disk briefly unwritable")
	}
	return s.Store.Enqueue(ctx, ds)
}

// keyedReplayAfter503 starts a gateway with endpoint ep (settings added to
// its config line) on rcv over a store whose first Enqueue fails, ingests
// one event, and sends its replay under Idempotency-Key ep+"-1": a 503
// that gives the key up, keeping its use for the retry. It returns the
// event ids and the replay's path.
func keyedReplayAfter503(t *testing.T, rcv *receiver, ep, settings string) (*gw, []string, string) {
	t.Helper()
	s := &failFirstEnqueue{}
	g := startGateway(t, gwOptions{
		wrapStore: func(st storage.Store) storage.Store { s.Store = st; return s },
		extra:     fmt.Sprintf("endpoints:\n  - {id: %s, tenant: acme, url: %q%s}\n", ep, rcv.url(ep), settings),
	})
	ids := ingestN(t, g, ep, 1)
	waitFor(t, 10*time.Second, "the original", func() bool { return rcv.countAt(ep) == 1 })
	path := "/events/" + ids[0] + "/replay"
	if st, _, b := g.api("POST", path, acmeToken, nil, "Idempotency-Key", ep+"-1"); st != 503 {
		t.Fatalf("first try: %d %s", st, b)
	}
	return g, ids, path
}

// An event replay under an Idempotency-Key, retried after a 503 (same
// key, as the 503 invites) once another replay of the event was made in
// between: its delivery is the newest, and lists say so. GET /events/{id}
// and GET /deliveries are "newest first", GET /deliveries?since= bounds
// created_at, and a bulk replay by status takes each endpoint's latest
// delivery of an event: all of them read the order of delivery ids.
func TestKeyedReplayRetriedAfter503IsTheNewestDelivery(t *testing.T) {
	rcv := newReceiver(t)
	g, ids, path := keyedReplayAfter503(t, rcv, "ko", "")
	// Another operator's replay meanwhile (no key).
	mid := must[apiList[deliveryView]](t, 202)(g.api("POST", path, acmeToken, nil)).Data[0]
	// Strictly later than mid, on the API's clock.
	waitFor(t, 5*time.Second, "the clock to pass mid's creation", func() bool {
		c, _ := time.Parse(time.RFC3339Nano, mid.CreatedAt)
		return time.Now().After(c.Add(2 * time.Millisecond))
	})
	keyed := must[apiList[deliveryView]](t, 202)(g.api("POST", path, acmeToken, nil, "Idempotency-Key", "ko-1")).Data[0]
	if keyed.CreatedAt <= mid.CreatedAt {
		t.Fatalf("keyed created_at %s not after mid's %s", keyed.CreatedAt, mid.CreatedAt)
	}
	ev := must[eventView](t, 200)(g.api("GET", "/events/"+ids[0], acmeToken, nil))
	if len(*ev.Deliveries) != 3 || (*ev.Deliveries)[0].ID != keyed.ID {
		t.Errorf("GET /events/{id} newest first: %+v; the newest is %s (created %s)", *ev.Deliveries, keyed.ID, keyed.CreatedAt)
	}
	list := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?event="+ids[0], acmeToken, nil))
	if len(list.Data) != 3 || list.Data[0].ID != keyed.ID {
		t.Errorf("GET /deliveries?event= newest first: first is %s (created %s), want %s (created %s)",
			list.Data[0].ID, list.Data[0].CreatedAt, keyed.ID, keyed.CreatedAt)
	}
	since := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?since="+url.QueryEscape(keyed.CreatedAt), acmeToken, nil))
	if len(since.Data) != 1 || since.Data[0].ID != keyed.ID {
		t.Errorf("GET /deliveries?since=%s lists %d deliveries, want the keyed replay's %s", keyed.CreatedAt, len(since.Data), keyed.ID)
	}
}

// The bulk-replay side of the same order: "status": "failed" takes each
// endpoint's latest delivery of an event. The keyed replay retried after a
// 503 succeeded after the other replay failed, so nothing of the event is
// failed any more and the job must match nothing.
func TestStatusReplayTakesTheKeyedReplayAsLatest(t *testing.T) {
	rcv := newReceiver(t)
	g, _, path := keyedReplayAfter503(t, rcv, "kl", ", retry: {max_attempts: 1}")
	rcv.failAt("kl", true)
	mid := must[apiList[deliveryView]](t, 202)(g.api("POST", path, acmeToken, nil)).Data[0]
	waitDeliveryState(t, g, mid.ID, "failed")
	rcv.failAt("kl", false)
	keyed := must[apiList[deliveryView]](t, 202)(g.api("POST", path, acmeToken, nil, "Idempotency-Key", "kl-1")).Data[0]
	waitDeliveryState(t, g, keyed.ID, "succeeded")
	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"endpoint": "kl", "status": "failed"}))
	job = waitReplay(t, g, acmeToken, job.ID)
	if job.Matched != 0 || job.Enqueued != 0 {
		t.Fatalf("replay of failed matched %d, enqueued %d: the event's latest delivery to kl (%s, created %s) succeeded; the failed one (%s, created %s) is older",
			job.Matched, job.Enqueued, keyed.ID, keyed.CreatedAt, mid.ID, mid.CreatedAt)
	}
}

// A keyed event replay whose answer was lost is run again. Meanwhile the
// event got maxPageLimit (1000) more deliveries (other replays): the run
// again still finds its first run's delivery, past the first page of the
// event's deliveries, and sends nothing more.
func TestKeyedReplayRunAgainFindsItsDeliveryPastAFullPage(t *testing.T) {
	rcv := newReceiver(t)
	g := startWrapped(t, rcv, func(s storage.Store) storage.Store {
		return &lostAnswers{Store: s, lease: time.Second}
	})
	id := ingestN(t, g, "pl", 1)[0]
	waitFor(t, 10*time.Second, "the first delivery", func() bool { return rcv.count() == 1 })
	path := "/events/" + id + "/replay"
	first := must[apiList[deliveryView]](t, 202)(g.api("POST", path, acmeToken, jsonMap{}, "Idempotency-Key", "pl-1"))
	if len(first.Data) != 1 {
		t.Fatalf("first run: %+v", first.Data)
	}
	ctx := context.Background()
	ev, err := g.Store().GetEvent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// 1000 later deliveries of the same event, to an endpoint id that is
	// not "a" (as other replays to other endpoints would make).
	base := time.Now()
	var more []storage.Delivery
	for i := range maxPageLimit {
		now := base.Add(time.Duration(i) * time.Microsecond)
		more = append(more, storage.Delivery{
			ID: storage.NewID("dlv_", now), Event: ev.ID, Tenant: ev.Tenant, Endpoint: "zz-other",
			IdempotencyKey: ev.IdempotencyKey, State: storage.StateCancelled,
			CreatedAt: now, NextAttemptAt: now, RetryFrom: now, UpdatedAt: now,
		})
	}
	for len(more) > 0 {
		n := min(100, len(more))
		if err := g.Store().Enqueue(ctx, more[:n]); err != nil {
			t.Fatal(err)
		}
		more = more[n:]
	}
	again := rerun[apiList[deliveryView]](t, g, path, jsonMap{}, "pl-1", 202)
	if len(again.Data) != 1 || again.Data[0].ID != first.Data[0].ID {
		ds, _, _ := g.Store().ListDeliveries(ctx, storage.DeliveryFilter{Event: id, Endpoint: "a", Limit: 10})
		t.Fatalf("run again answered %s; the first run made %s; the event has %d deliveries to a (want 2: original + one replay)",
			again.Data[0].ID, first.Data[0].ID, len(ds))
	}
}
