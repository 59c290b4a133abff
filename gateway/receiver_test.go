package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// receiver is a real HTTP subscriber that records what it gets.
type receiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	path   string
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, recorded{path: req.URL.Path, header: req.Header.Clone(), body: b})
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) url(path string) string { return r.srv.URL + "/" + path }

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

func (r *receiver) byPath() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]int{}
	for _, q := range r.reqs {
		m[q.path]++
	}
	return m
}

func (r *receiver) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.reqs...)
}

// heldReceiver is a subscriber that holds every request until released
// (or the request ends): an attempt in flight for as long as a test needs.
type heldReceiver struct {
	URL     string
	hit     chan struct{} // gets a value when a request arrives
	release func()        // lets every held request answer 200; idempotent
}

func newHeldReceiver(t *testing.T) *heldReceiver {
	h := &heldReceiver{hit: make(chan struct{}, 1)}
	released := make(chan struct{})
	var once sync.Once
	h.release = func() { once.Do(func() { close(released) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case h.hit <- struct{}{}:
		default:
		}
		select {
		case <-released:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(h.release) // first: a failed test must not leave a request held
	h.URL = srv.URL
	return h
}

// waitHit waits until the receiver holds a request.
func (h *heldReceiver) waitHit(t *testing.T) {
	t.Helper()
	select {
	case <-h.hit:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery never reached the receiver")
	}
}
