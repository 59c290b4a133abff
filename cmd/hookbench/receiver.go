package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// receiver is the local subscriber: it answers 200 at once and records
// each delivery's key and its ingest-to-delivery latency (the body carries
// the time the client sent it).
type receiver struct {
	srv       *http.Server
	ln        net.Listener
	delivered atomic.Int64
	mu        sync.Mutex
	keys      map[string]int
	latencies []time.Duration
	first     time.Time
	last      time.Time
}

func newReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{ln: ln, keys: map[string]int{}}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.handle), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) url(path string) string { return "http://" + r.ln.Addr().String() + "/" + path }

func (r *receiver) close() { _ = r.srv.Close() }

var sentMarker = []byte(`"sent":`)

func (r *receiver) handle(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	now := time.Now()
	key := req.Header.Get("Idempotency-Key")
	var lat time.Duration
	if i := bytes.Index(body, sentMarker); i >= 0 {
		rest := body[i+len(sentMarker):]
		if j := bytes.IndexByte(rest, ','); j > 0 {
			if ns, err := strconv.ParseInt(string(rest[:j]), 10, 64); err == nil {
				lat = now.Sub(time.Unix(0, ns))
			}
		}
	}
	r.mu.Lock()
	r.keys[key+req.URL.Path]++
	r.latencies = append(r.latencies, lat)
	if r.first.IsZero() {
		r.first = now
	}
	r.last = now
	r.mu.Unlock()
	r.delivered.Add(1)
	w.WriteHeader(http.StatusOK)
}

// snapshot returns (deliveries, duplicates, latencies, first, last).
func (r *receiver) snapshot() (int64, int64, []time.Duration, time.Time, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var dups int64
	for _, n := range r.keys {
		if n > 1 {
			dups += int64(n - 1)
		}
	}
	return r.delivered.Load(), dups, append([]time.Duration(nil), r.latencies...), r.first, r.last
}
