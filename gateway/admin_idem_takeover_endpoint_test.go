package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
)

// slowFirstCreate is the real store with a short Idempotency-Key lease
// and a first PutEndpoint that waits for the test: a POST /endpoints that
// outlives its key's lease (a stalled disk, a catalog lock held long),
// whose retry takes the key over meanwhile, as SPEC section 5 lets it.
type slowFirstCreate struct {
	shortLease
	puts      atomic.Int32
	inPut     chan struct{} // closed when the first PutEndpoint waits
	gate      chan struct{} // the first PutEndpoint goes on once closed
	derived   atomic.Value  // string: the id the runs derive
	looked    chan struct{} // closed at the second lookup of the derived id
	lookups   atomic.Int32
	lookedOne sync.Once
}

// shortLease is the real store with Idempotency-Key leases of its own
// length, for tests of a retry that takes over a slow first run.
type shortLease struct {
	storage.Store
	lease time.Duration
}

func (s *shortLease) ClaimKey(ctx context.Context, c storage.IdemClaim) (storage.IdemResult, error) {
	c.LeaseUntil = c.Now.Add(s.lease)
	return s.Store.ClaimKey(ctx, c)
}

func (s *slowFirstCreate) PutEndpoint(ctx context.Context, ep *storage.Endpoint) error {
	if s.puts.Add(1) == 1 {
		s.derived.Store(ep.ID)
		close(s.inPut)
		<-s.gate
	}
	return s.Store.PutEndpoint(ctx, ep)
}

func (s *slowFirstCreate) GetEndpoint(ctx context.Context, id string) (storage.Endpoint, error) {
	if d, _ := s.derived.Load().(string); d != "" && id == d && s.lookups.Add(1) == 1 {
		// The retry's look for what its first run made, before that run
		// has written it.
		s.lookedOne.Do(func() { close(s.looked) })
	}
	return s.Store.GetEndpoint(ctx, id)
}

// TestCreateEndpointRetryTakingOverASlowFirstRunGetsTheEndpoint: a POST
// /endpoints without an id, under an Idempotency-Key, derives its id from
// the key's use, so that a run again finds what the first run made. When
// the first run outlives its lease and the retry takes the key over, the
// retry may look before the first run writes the endpoint: it looks again
// under the catalog lock, and answers 201 with that endpoint. (It answered
// 409 "an endpoint with this id already exists", stored as the key's
// answer for dedupe.ttl, about an id the operator never named.)
func TestCreateEndpointRetryTakingOverASlowFirstRunGetsTheEndpoint(t *testing.T) {
	st := &slowFirstCreate{shortLease: shortLease{lease: 300 * time.Millisecond}, inPut: make(chan struct{}), gate: make(chan struct{}), looked: make(chan struct{})}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { st.Store = s; return st }})
	var once sync.Once
	release := func() { once.Do(func() { close(st.gate) }) }
	t.Cleanup(release)

	body := `{"url":"http://receiver.test/slow"}`
	post := func() (int, []byte) {
		req, _ := http.NewRequest("POST", "http://"+g.AdminAddr()+"/api/v1/endpoints", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+acmeToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "slow-create")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	type answer struct {
		st int
		b  []byte
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() { s, b := post(); first <- answer{s, b} }()
	select {
	case <-st.inPut:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run never reached its write")
	}
	// The first run's lease ends while it waits in its write.
	leaseEnd := time.Now().Add(st.lease + 50*time.Millisecond)
	waitFor(t, 5*time.Second, "the first run's lease to end", func() bool { return time.Now().After(leaseEnd) })
	go func() { s, b := post(); second <- answer{s, b} }()
	select {
	case <-st.looked:
	case <-time.After(10 * time.Second):
		release()
		t.Fatal("the retry never looked for the derived id")
	}
	release()
	a1, a2 := <-first, <-second
	if a1.st != http.StatusCreated {
		t.Fatalf("first run: %d %s", a1.st, a1.b)
	}
	var made endpointView
	if err := json.Unmarshal(a1.b, &made); err != nil {
		t.Fatal(err)
	}
	// A later retry gets the key's stored answer.
	st3, b3 := post()
	for _, a := range []answer{a2, {st3, b3}} {
		var got endpointView
		if a.st != http.StatusCreated || json.Unmarshal(a.b, &got) != nil || got.ID != made.ID {
			t.Errorf("retry of the create that made %s: %d %s; want 201 with that endpoint", made.ID, a.st, bytes.TrimSpace(a.b))
		}
	}
}
