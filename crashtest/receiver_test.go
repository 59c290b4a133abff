package crashtest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// receiverMode is how the receiver treats the deliveries arriving now.
type receiverMode int32

const (
	// modeUp answers 200 at once.
	modeUp receiverMode = iota
	// modeUnavailable answers 503 with Retry-After: 1.
	modeUnavailable
	// modeDrop reads the request and closes the connection unanswered.
	modeDrop
	// modeSlow answers 200 after a delay, so that more attempts are in
	// flight when the gateway is killed.
	modeSlow
)

func (m receiverMode) String() string {
	return [...]string{"up", "unavailable", "drop", "slow"}[m]
}

// Fault schedule bounds. Bad stretches stay short so that the endpoint's
// circuit (5 failures, then a 5s pause that doubles on each failed probe)
// reopens in the run instead of pausing the endpoint for minutes.
const (
	faultMin     = 200 * time.Millisecond
	faultMax     = 800 * time.Millisecond
	upMin        = 500 * time.Millisecond
	upMax        = 2 * time.Second
	slowMinDelay = 20 * time.Millisecond
	slowMaxDelay = 250 * time.Millisecond
	// maxProblems bounds the problems kept for the report.
	maxProblems = 20
)

// received is what the receiver saw of one event (one test id).
type received struct {
	// keys counts the Idempotency-Key of every request for the event.
	keys map[string]int
	// requests is every delivery attempt that reached the receiver.
	requests int
	// delivered is how many of them it answered 200 (or was about to):
	// each one beyond the first is a duplicate delivery.
	delivered int
	body      []byte
}

// receiver is the endpoint: an httptest.Server that records every delivery
// and is sometimes down.
type receiver struct {
	srv  *httptest.Server
	key  []byte // the endpoint secret's HMAC key
	mode atomic.Int32

	mu       sync.Mutex
	byTest   map[string]*received
	requests int
	problems []string
}

// newReceiver starts the receiver; the caller closes it.
func newReceiver(secret string) (*receiver, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return nil, fmt.Errorf("endpoint secret: %w", err)
	}
	r := &receiver{key: key, byTest: make(map[string]*received)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r, nil
}

// URL is where the gateway delivers.
func (r *receiver) URL() string { return r.srv.URL + "/hooks" }

// Close stops the server; it waits for the handlers in progress.
func (r *receiver) Close() { r.srv.Close() }

func (r *receiver) setMode(m receiverMode) { r.mode.Store(int32(m)) }

// serve checks and records one delivery, then answers as the current mode
// says.
func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return // the gateway went away mid-request
	}
	key := req.Header.Get("Idempotency-Key")
	testID := r.check(req, key, body)
	mode := receiverMode(r.mode.Load())
	switch mode {
	case modeUnavailable:
		r.record(testID, key, body, false)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
	case modeDrop:
		r.record(testID, key, body, false)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	case modeSlow:
		delay := slowMinDelay + rand.N(slowMaxDelay-slowMinDelay)
		if !sleepCtx(req.Context(), delay) {
			r.record(testID, key, body, false)
			return
		}
		fallthrough
	default:
		// Recorded before the answer is written: if the gateway dies before
		// it reads the 200, the event was still delivered, and sending it
		// again is a duplicate the Idempotency-Key lets a receiver drop.
		r.record(testID, key, body, true)
		w.WriteHeader(http.StatusOK)
	}
}

// check verifies what every delivery must carry and returns the body's
// test id; a failed check is kept as a problem.
func (r *receiver) check(req *http.Request, key string, body []byte) string {
	var p payload
	if err := json.Unmarshal(body, &p); err != nil || p.Data.TestID == "" {
		r.problem("delivery with a body that is not a test event: %q", excerpt(body, 200))
	}
	switch {
	case key == "":
		r.problem("delivery of %s without Idempotency-Key", p.Data.TestID)
	case req.Header.Get("webhook-id") != key:
		r.problem("delivery of %s: webhook-id %q differs from Idempotency-Key %q", p.Data.TestID, req.Header.Get("webhook-id"), key)
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/json" {
		r.problem("delivery of %s with Content-Type %q, want the original application/json", p.Data.TestID, ct)
	}
	if !r.signed(req, key, body) {
		r.problem("delivery of %s: webhook-signature does not verify with the endpoint secret", p.Data.TestID)
	}
	return p.Data.TestID
}

// signed verifies webhook-signature as a Standard Webhooks receiver
// would, with crypto/hmac: any v1 signature may match.
func (r *receiver) signed(req *http.Request, key string, body []byte) bool {
	mac := hmac.New(sha256.New, r.key)
	fmt.Fprintf(mac, "%s.%s.%s", key, req.Header.Get("webhook-timestamp"), body)
	want := mac.Sum(nil)
	for sig := range strings.FieldsSeq(req.Header.Get("webhook-signature")) {
		v, ok := strings.CutPrefix(sig, "v1,")
		if !ok {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(v)
		if err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}

// record counts one request for testID.
func (r *receiver) record(testID, key string, body []byte, delivered bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	rc := r.byTest[testID]
	if rc == nil {
		rc = &received{keys: make(map[string]int), body: body}
		r.byTest[testID] = rc
	}
	rc.keys[key]++
	rc.requests++
	if delivered {
		rc.delivered++
	}
}

func (r *receiver) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.problems) < maxProblems {
		r.problems = append(r.problems, fmt.Sprintf(format, args...))
	}
}

// snapshot copies what the receiver saw so far.
func (r *receiver) snapshot() (byTest map[string]received, requests int, problems []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byTest = make(map[string]received, len(r.byTest))
	for id, rc := range r.byTest {
		c := *rc
		c.keys = make(map[string]int, len(rc.keys))
		for k, n := range rc.keys {
			c.keys[k] = n
		}
		byTest[id] = c
	}
	return byTest, r.requests, append([]string(nil), r.problems...)
}

// deliveredAll reports whether every test id in ids was delivered at
// least once, and how many were not.
func (r *receiver) deliveredAll(ids []string) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	missing := 0
	for _, id := range ids {
		if rc := r.byTest[id]; rc == nil || rc.delivered == 0 {
			missing++
		}
	}
	return missing == 0, missing
}

// faults alternates the receiver between up stretches and fault
// stretches (unavailable, drop or slow) on a seeded schedule until ctx
// ends, then leaves it up. It returns how many fault stretches it caused.
func (r *receiver) faults(ctx context.Context, rng *rand.Rand) int {
	defer r.setMode(modeUp)
	faulty := [...]receiverMode{modeUnavailable, modeDrop, modeSlow}
	for n := 0; ; n++ {
		r.setMode(modeUp)
		if !sleepCtx(ctx, between(rng, upMin, upMax)) {
			return n
		}
		r.setMode(faulty[rng.IntN(len(faulty))])
		if !sleepCtx(ctx, between(rng, faultMin, faultMax)) {
			return n + 1
		}
	}
}

// between draws a duration uniformly from [lo, hi).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// sleepCtx waits d or until ctx ends; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
