package gateway

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

// slowClaimStore is the real store whose next Claim of an endpoint, once
// armed, is written and then held before it returns to the endpoint's
// loop, until the test opens the gate: a claim whose commit waits behind
// a batch and its fsync (milliseconds under load). The loop has planned
// the claim with the endpoint's settings of that moment.
type slowClaimStore struct {
	storage.Store
	armed   atomic.Pointer[string] // endpoint id whose next non-empty claim is held
	entered chan []storage.Job     // the held claim's jobs
	gate    chan struct{}
}

func newSlowClaimStore() *slowClaimStore {
	return &slowClaimStore{entered: make(chan []storage.Job, 1), gate: make(chan struct{})}
}

func (s *slowClaimStore) arm(endpoint string) { s.armed.Store(&endpoint) }

func (s *slowClaimStore) Claim(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration) ([]storage.Job, error) {
	jobs, err := s.Store.Claim(ctx, endpoint, now, limit, lease)
	if a := s.armed.Load(); err == nil && len(jobs) > 0 && a != nil && *a == endpoint && s.armed.CompareAndSwap(a, nil) {
		s.entered <- jobs
		<-s.gate // like a queued Badger write: it returns whatever ctx does
	}
	return jobs, err
}

// churnSetup starts a gateway on a slowClaimStore with endpoint "ep"
// (acme) posting to rc's /old, delivers one event to it (handed off, not
// claimed), then replays that event with the store armed: the loop's
// claim of the replayed delivery is written and held. It returns the
// delivery being claimed.
func churnSetup(t *testing.T, rc *receiver) (*gw, *slowClaimStore, string) {
	t.Helper()
	ss := newSlowClaimStore()
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { ss.Store = s; return ss }})
	t.Cleanup(func() {
		select {
		case <-ss.gate:
		default:
			close(ss.gate)
		}
	})
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "ep", "url": rc.url("old")}))
	st, _, b := g.post("open", []byte(`{"id":"churn-1","type":"invoice.paid"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	waitFor(t, 10*time.Second, "the first delivery to succeed", func() bool {
		ds := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?event="+evt, acmeToken, nil)).Data
		return len(ds) == 1 && ds[0].State == "succeeded" && rc.count() == 1
	})
	ss.arm("ep")
	replayed := must[apiList[deliveryView]](t, 202)(g.api("POST", "/events/"+evt+"/replay", acmeToken, jsonMap{})).Data
	if len(replayed) != 1 {
		t.Fatalf("replay made %d deliveries, want 1", len(replayed))
	}
	select {
	case jobs := <-ss.entered:
		if len(jobs) != 1 || jobs[0].Delivery.ID != replayed[0].ID {
			t.Fatalf("held claim took %d jobs, want the replayed delivery %s", len(jobs), replayed[0].ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the endpoint's loop never claimed the replayed delivery")
	}
	return g, ss, replayed[0].ID
}

// An endpoint disabled with PATCH {"disabled":true} while its loop's claim
// is being written got the claimed deliveries all the same, after the
// PATCH had answered 200: the loop sent with the settings it planned the
// claim with. (The hand-off re-checks them now,
// TestHandDoesNotSendToADisabledEndpoint; the loop's claims now do too.)
func TestClaimedDeliveryIsNotSentToAnEndpointDisabledDuringTheClaim(t *testing.T) {
	rc := newReceiver(t)
	g, ss, dlv := churnSetup(t, rc)

	must[endpointView](t, 200)(g.api("PATCH", "/endpoints/ep", acmeToken, jsonMap{"disabled": true}))
	close(ss.gate)
	waitFor(t, 10*time.Second, "the claimed delivery to be sent or put back", func() bool {
		d := must[deliveryView](t, 200)(g.api("GET", "/deliveries/"+dlv, acmeToken, nil))
		return rc.count() > 1 || d.State == "pending"
	})
	if n := rc.count(); n > 1 {
		t.Fatalf("the endpoint got %d request(s) after PATCH disabled:true answered 200", n-1)
	}
}

// An endpoint moved to a new URL and given a new secret (PATCH url and
// secret, both "at once" in the API) while its loop's claim is being
// written: the claimed delivery, whose attempt starts after the PATCH
// answered 200, went to the old URL, signed only with the replaced secret.
func TestClaimedDeliveryGoesToTheURLAndSecretOfAPatchMadeDuringTheClaim(t *testing.T) {
	rc := newReceiver(t)
	g, ss, _ := churnSetup(t, rc)

	const newSecret = "whsec_dGhpcyBpcyB0aGUgbmV3IHNlY3JldCBrZXkh"
	ep := must[endpointView](t, 200)(g.api("PATCH", "/endpoints/ep", acmeToken, jsonMap{"url": rc.url("new"), "secret": newSecret}))
	if ep.URL != rc.url("new") || ep.Secret != newSecret {
		t.Fatalf("PATCH answered %+v", ep)
	}
	close(ss.gate)
	waitFor(t, 10*time.Second, "the replayed delivery to arrive", func() bool { return rc.count() == 2 })
	r := rc.all()[1]
	if r.path != "/new" {
		t.Errorf("the attempt started after PATCH url answered 200 went to %s, the old URL", r.path)
	}
	if !swVerify(newSecret, r.header.Get("webhook-id"), r.header.Get("webhook-timestamp"), r.body, r.header.Get("webhook-signature")) {
		t.Errorf("the attempt started after PATCH secret answered 200 is not signed with the new secret (the old one was replaced at once)")
	}
}

// DELETE /endpoints/{id} answers 204 while its loop's claim is being
// written; the claimed delivery was then sent to the deleted endpoint.
func TestClaimedDeliveryIsNotSentAfterItsEndpointWasDeleted(t *testing.T) {
	rc := newReceiver(t)
	g, ss, dlv := churnSetup(t, rc)

	if st, _, b := g.api("DELETE", "/endpoints/ep", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	close(ss.gate)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && rc.count() == 1 {
		time.Sleep(10 * time.Millisecond) // polling for a request that must not come
	}
	if n := rc.count(); n > 1 {
		d := must[deliveryView](t, 200)(g.api("GET", "/deliveries/"+dlv, acmeToken, nil))
		t.Fatalf("the deleted endpoint got %d request(s) after DELETE answered 204 (delivery %s)", n-1, d.State)
	}
}

// An endpoint deleted and created again with the same id by the same
// tenant is a new endpoint (the dispatcher's 410 and the bulk replay tell
// them apart by created_at): its own URL, secret and event_types. A
// manual retry of a delivery made for the old one (succeeded or failed,
// so the delete's backlog cancel left it) was accepted and sent to the new
// endpoint, whatever it subscribes to: here an invoice event to an
// endpoint that takes only customer events. It is refused, as a retry of
// the same delivery after another tenant took the id is (409
// endpoint-deleted).
func TestRetryOfADeletedEndpointsDeliveryDoesNotGoToItsSuccessor(t *testing.T) {
	rc := newReceiver(t)
	g := startGateway(t, gwOptions{})
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "billing", "url": rc.url("first"), "event_types": []string{"invoice.*"}}))
	st, _, b := g.post("open", []byte(`{"id":"inv-1","type":"invoice.paid"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	var dlv string
	waitFor(t, 10*time.Second, "the delivery to the first endpoint", func() bool {
		ds := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?event="+evt, acmeToken, nil)).Data
		if len(ds) == 1 && ds[0].State == "succeeded" {
			dlv = ds[0].ID
			return true
		}
		return false
	})
	if st, _, b := g.api("DELETE", "/endpoints/billing", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "billing", "url": rc.url("second"), "event_types": []string{"customer.*"}}))

	st, _, b = g.api("POST", "/deliveries/"+dlv+"/retry", acmeToken, nil)
	if st == 202 {
		waitFor(t, 10*time.Second, "the retried delivery", func() bool { return rc.count() == 2 })
		t.Fatalf("retry of the deleted endpoint's delivery answered 202 and sent invoice.paid to %s, the new endpoint with event_types [customer.*]", rc.all()[1].path)
	}
	if st != 409 {
		t.Fatalf("retry: %d %s", st, b)
	}
}
