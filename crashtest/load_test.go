package crashtest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// retryMaxAge keeps exact retries inside the source's signature tolerance
// (5m by default): an older event is not resent, a new one is sent instead.
const retryMaxAge = 4 * time.Minute

// requestTimeout bounds one ingest request.
const requestTimeout = 10 * time.Second

// payload is the body of a test event. TestID is unique per event and is
// how a delivery is matched to what was sent.
type payload struct {
	Type string `json:"type"`
	Data struct {
		TestID string `json:"test_id"`
		N      int    `json:"n"`
		Pad    string `json:"pad"`
	} `json:"data"`
}

// answer is the outcome of one ingest request.
type answer struct {
	start, end time.Time
	// status is 0 when the request failed without an answer (connection
	// refused or reset by a kill): not acknowledged.
	status   int
	replayed bool
	body     []byte
	err      string
}

func (a *answer) acknowledged() bool { return a.status >= 200 && a.status < 300 }

// event is one logical event the clients send, maybe several times.
type event struct {
	testID string
	msgID  string // webhook-id: the provider event ID
	body   []byte
	header http.Header // Content-Type and the Standard Webhooks signature
	sentAt time.Time   // the signed timestamp

	mu      sync.Mutex
	answers []answer
}

// newEvent builds and signs event n as a Standard Webhooks sender would,
// with crypto/hmac, independently of the gateway's code.
func newEvent(run string, n int, rng *rand.Rand, now time.Time) *event {
	var p payload
	p.Type = "crash.test"
	p.Data.TestID = fmt.Sprintf("%s-%06d", run, n)
	p.Data.N = n
	pad := make([]byte, 16+rng.IntN(240))
	for i := range pad {
		pad[i] = byte(rng.Uint32())
	}
	p.Data.Pad = hex.EncodeToString(pad)
	if n%2 == 0 {
		// Half the bodies compress, and the store keeps their records
		// S2-compressed; the random hex of the others does not, and those
		// are stored as they are. Both kinds must survive the kills byte
		// for byte.
		p.Data.Pad += strings.Repeat(" line item: 1200 usd, paid;", 8+rng.IntN(20))
	}
	body, _ := json.Marshal(&p)
	ev := &event{testID: p.Data.TestID, msgID: "msg_" + p.Data.TestID, body: body, sentAt: now}
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(sourceSecret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.%s", ev.msgID, now.Unix(), body)
	ev.header = http.Header{
		"Content-Type":      {"application/json"},
		"Webhook-Id":        {ev.msgID},
		"Webhook-Timestamp": {strconv.FormatInt(now.Unix(), 10)},
		"Webhook-Signature": {"v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))},
	}
	return ev
}

func (e *event) record(a answer) {
	e.mu.Lock()
	e.answers = append(e.answers, a)
	e.mu.Unlock()
}

// snapshot copies the answers so far.
func (e *event) snapshot() []answer {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]answer(nil), e.answers...)
}

// ledger is every event the clients made, in creation order.
type ledger struct {
	run string

	mu     sync.Mutex
	events []*event
}

// create adds a new event.
func (l *ledger) create(rng *rand.Rand) *event {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := newEvent(l.run, len(l.events), rng, time.Now())
	l.events = append(l.events, ev)
	return ev
}

// pickRetry returns an event already created (perhaps still in flight on
// another client: concurrent identical requests), or nil.
func (l *ledger) pickRetry(rng *rand.Rand) *event {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) == 0 {
		return nil
	}
	ev := l.events[rng.IntN(len(l.events))]
	if time.Since(ev.sentAt) > retryMaxAge {
		return nil
	}
	return ev
}

// all returns every event.
func (l *ledger) all() []*event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*event(nil), l.events...)
}

// acknowledged returns the test ids of the events that got a 2xx.
func (l *ledger) acknowledged() []string {
	var ids []string
	for _, ev := range l.all() {
		for _, a := range ev.snapshot() {
			if a.acknowledged() {
				ids = append(ids, ev.testID)
				break
			}
		}
	}
	return ids
}

// loadClient is one sender: it posts new events and exact retries, paced
// by a limiter shared by all clients.
type loadClient struct {
	url     string
	http    *http.Client
	ledger  *ledger
	limiter *rate.Limiter
	sup     *supervisor
	rng     *rand.Rand
}

// run sends until ctx ends. A request that fails without an answer (the
// process was killed) is not acknowledged; like a real provider, the
// client waits for the gateway to serve again and resends the same
// request until it gets an answer. Requests are not bound to ctx: the last
// ones finish and are recorded.
func (c *loadClient) run(ctx context.Context) {
	var unanswered *event
	for c.limiter.Wait(ctx) == nil {
		ev := unanswered
		if ev == nil && c.rng.Float64() < RetryShare {
			ev = c.ledger.pickRetry(c.rng)
		}
		if ev == nil {
			ev = c.ledger.create(c.rng)
		}
		a := c.post(ev)
		ev.record(a)
		unanswered = nil
		if a.status == 0 {
			unanswered = ev
			c.sup.waitReady(ctx)
		}
	}
}

// post sends ev once, byte for byte as every time before.
func (c *loadClient) post(ev *event) (a answer) {
	a.start = time.Now()
	defer func() { a.end = time.Now() }()
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(ev.body))
	if err != nil {
		a.err = err.Error()
		return a
	}
	req.Header = ev.header.Clone()
	resp, err := c.http.Do(req)
	if err != nil {
		a.err = err.Error()
		return a
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		a.err = "read answer: " + err.Error()
		return a
	}
	a.status, a.body = resp.StatusCode, body
	a.replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return a
}

// newLoadHTTP is the clients' shared HTTP client.
func newLoadHTTP() *http.Client {
	return &http.Client{
		Timeout:   requestTimeout,
		Transport: &http.Transport{MaxIdleConnsPerHost: Clients},
	}
}
