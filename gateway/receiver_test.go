package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// receiver is a real HTTP subscriber that records every request and
// answers 200, unless the test says otherwise: an answer of its own for a
// path (on), 500 for a path (failAt), 500 for the next n requests
// (failNext), 500 while failing is set, and a delay before answering.
type receiver struct {
	srv     *httptest.Server
	failing atomic.Bool
	delay   atomic.Int64 // nanoseconds to wait before answering

	mu     sync.Mutex
	reqs   []recorded
	answer map[string]http.HandlerFunc // by path
	fail   map[string]bool             // by path
	next   int                         // requests still to fail
}

// recorded is one request a receiver got, with the time it got it.
type recorded struct {
	at     time.Time
	path   string
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{answer: map[string]http.HandlerFunc{}, fail: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, recorded{at: time.Now(), path: req.URL.Path, header: req.Header.Clone(), body: b})
		answer, fail := r.answer[req.URL.Path], r.fail[req.URL.Path] || r.next > 0
		if r.next > 0 {
			r.next--
		}
		r.mu.Unlock()
		if d := time.Duration(r.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-req.Context().Done():
				return
			}
		}
		switch {
		case answer != nil:
			answer(w, req)
		case fail || r.failing.Load():
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "receiver says no")
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) url(path string) string { return r.srv.URL + "/" + path }

// on makes f the answer to requests for path.
func (r *receiver) on(path string, f http.HandlerFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer["/"+path] = f
}

// failAt makes requests for path get 500 (with a body), or 200 again.
func (r *receiver) failAt(path string, fail bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail["/"+path] = fail
}

// failNext makes the next n requests get 500.
func (r *receiver) failNext(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next = n
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

// countAt counts the requests for path.
func (r *receiver) countAt(path string) int { return len(r.at(path)) }

// at returns the requests for path, in the order they came.
func (r *receiver) at(path string) []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recorded
	for _, q := range r.reqs {
		if q.path == "/"+path {
			out = append(out, q)
		}
	}
	return out
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
