package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// benchSecret signs the bench source's requests (standard-webhooks).
const benchSecret = "whsec_aG9va2JlbmNoLXNlY3JldC1mb3ItbG9hZC10ZXN0cw=="

// request is one ingest request, kept so that a retry is byte-identical.
type request struct {
	id, ts string
	body   []byte
}

// loadSpec says how to drive a target.
type loadSpec struct {
	urls     []string // full ingest URLs; client i posts to urls[i%len(urls)]
	clients  int
	duration time.Duration
	// total, when > 0, stops after this many requests instead of duration.
	total    int64
	bodySize int
	retries  float64
	// fixedIDs, when > 0, makes every request one of this many events
	// (the duplicate storm).
	fixedIDs int
	prefix   string
}

// loadResult is what the clients saw.
type loadResult struct {
	Requests  int64
	OK        int64
	Replayed  int64
	Errors    int64
	Start     time.Time
	Elapsed   time.Duration
	Latencies []time.Duration
	// AckAt is when each of Latencies' requests was answered, from Start.
	AckAt []time.Duration
	// FirstLat and ReplayLat separate first requests from retries.
	FirstLat  []time.Duration
	ReplayLat []time.Duration
	Status    map[int]int64
}

// drive runs the clients until the duration or total is reached.
func drive(ctx context.Context, s loadSpec) loadResult {
	tr := &http.Transport{MaxIdleConns: s.clients * 2, MaxIdleConnsPerHost: s.clients * 2, DisableCompression: true, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var (
		seq    atomic.Int64
		sent   atomic.Int64
		mu     sync.Mutex
		res    = loadResult{Status: map[int]int64{}}
		recent = newRing(4096)
		wg     sync.WaitGroup
	)
	var fixed []request
	for i := range s.fixedIDs {
		fixed = append(fixed, newRequest(fmt.Sprintf("%s-storm-%d", s.prefix, i), s.bodySize))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.total <= 0 {
		t := time.AfterFunc(s.duration, cancel)
		defer t.Stop()
	}
	start := time.Now()
	res.Start = start
	for c := range s.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(start.UnixNano())))
			var lat, at, first, replay []time.Duration
			local := loadResult{Status: map[int]int64{}}
			for ctx.Err() == nil {
				if s.total > 0 && sent.Add(1) > s.total {
					break
				}
				var r request
				isRetry := false
				switch {
				case len(fixed) > 0:
					r = fixed[rng.IntN(len(fixed))]
				case s.retries > 0 && rng.Float64() < s.retries:
					var ok bool
					if r, ok = recent.pick(rng); ok {
						isRetry = true
						break
					}
					fallthrough
				default:
					r = newRequest(fmt.Sprintf("%s-%d", s.prefix, seq.Add(1)), s.bodySize)
					recent.add(r)
				}
				t0 := time.Now()
				st, replayed, err := post(ctx, client, s.urls[c%len(s.urls)], r)
				d := time.Since(t0)
				local.Requests++
				if err != nil {
					if ctx.Err() == nil {
						local.Errors++
					}
					continue
				}
				local.Status[st]++
				if st >= 200 && st < 300 {
					local.OK++
					lat = append(lat, d)
					at = append(at, t0.Add(d).Sub(start))
					if replayed {
						local.Replayed++
						replay = append(replay, d)
					} else if !isRetry {
						first = append(first, d)
					}
				}
			}
			mu.Lock()
			res.Requests += local.Requests
			res.OK += local.OK
			res.Replayed += local.Replayed
			res.Errors += local.Errors
			for k, v := range local.Status {
				res.Status[k] += v
			}
			res.Latencies = append(res.Latencies, lat...)
			res.AckAt = append(res.AckAt, at...)
			res.FirstLat = append(res.FirstLat, first...)
			res.ReplayLat = append(res.ReplayLat, replay...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}

// newRequest makes a signed-once event: a realistic body (eventBody) of
// about size bytes that carries its send time, for ingest-to-delivery
// latency.
func newRequest(id string, size int) request {
	now := time.Now()
	return request{id: id, ts: strconv.FormatInt(now.Unix(), 10), body: eventBody(id, now.UnixNano(), size)}
}

var benchKey = func() []byte {
	k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(benchSecret, "whsec_"))
	if err != nil {
		panic(err)
	}
	return k
}()

// signature is the standard-webhooks signature of a bench request.
func signature(id, ts string, body []byte) string {
	mac := hmac.New(sha256.New, benchKey)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func post(ctx context.Context, c *http.Client, url string, r request) (int, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(r.body))
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", r.id)
	req.Header.Set("webhook-timestamp", r.ts)
	req.Header.Set("webhook-signature", signature(r.id, r.ts, r.body))
	resp, err := c.Do(req)
	if err != nil {
		return 0, false, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", nil
}

// ring keeps recent requests for exact retries.
type ring struct {
	mu  sync.Mutex
	buf []request
	n   int
}

func newRing(size int) *ring { return &ring{buf: make([]request, size)} }

func (r *ring) add(q request) {
	r.mu.Lock()
	r.buf[r.n%len(r.buf)] = q
	r.n++
	r.mu.Unlock()
}

func (r *ring) pick(rng *rand.Rand) (request, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		return request{}, false
	}
	m := min(r.n, len(r.buf))
	return r.buf[rng.IntN(m)], true
}
