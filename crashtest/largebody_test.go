package crashtest

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"
)

// sentEvent is one event a large-body client sent, with every answer.
type sentEvent struct {
	msgID string
	ct    string
	body  []byte
	hash  [32]byte
	at    time.Time

	mu      sync.Mutex
	acked   []byte // the first 2xx body
	ackedID string // its "id"
	bad     []string
}

func (e *sentEvent) send(c *http.Client, url string) (status int, err error) {
	req, err := signedIngest(url, e.msgID, e.ct, e.body, e.at)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode/100 == 2 {
		e.mu.Lock()
		if e.acked == nil {
			e.acked = b
			var v struct{ ID string }
			_ = json.Unmarshal(b, &v)
			e.ackedID = v.ID
		} else if string(b) != string(e.acked) {
			e.bad = append(e.bad, fmt.Sprintf("answer %q differs from the first %q", b, e.acked))
		}
		e.mu.Unlock()
	}
	return resp.StatusCode, nil
}

// Incompressible bodies of exactly server.max_body (1MiB: their event
// records are written in two parts under ap: keys) mixed with small ones,
// SIGKILLed at random moments: after the restarts every acknowledged event
// reads back byte for byte through GET /events/{id}, is delivered with its
// exact body, a resend gets the stored answer, and once retention has
// passed no event record or part is left in the store.
func TestKillDuringLargeBodyIngest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const maxBody = 1 << 20
	rc := newHashReceiver(t)
	sup := newSupervisor(t, buildBinary(t), rc.srv.URL)
	writeRetentionConfig(t, sup, rc.srv.URL+"/hooks", "1h", "1h")
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 40))

	var mu sync.Mutex
	var evs []*sentEvent
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	url := sup.ingestURL + "/ingest/" + sourceID
	for c := range 4 {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				e := &sentEvent{msgID: fmt.Sprintf("big-%d-%d", c, n), at: time.Now()}
				if n%3 == 0 {
					e.ct, e.body = "application/octet-stream", make([]byte, maxBody)
					_, _ = crand.Read(e.body)
				} else {
					e.ct, e.body = "application/json", fmt.Appendf(nil, `{"type":"small","n":"%d-%d"}`, c, n)
				}
				e.hash = sha256.Sum256(e.body)
				mu.Lock()
				evs = append(evs, e)
				mu.Unlock()
				// Like a provider: resend until answered.
				for ctx.Err() == nil {
					st, err := e.send(hc, url)
					if err == nil && st != http.StatusServiceUnavailable {
						if st != http.StatusAccepted {
							e.mu.Lock()
							e.bad = append(e.bad, fmt.Sprintf("ingest answered %d", st))
							e.mu.Unlock()
						}
						break
					}
					sup.waitReady(ctx)
				}
			}
		})
	}
	for k := range 6 {
		time.Sleep(time.Duration(300+rng.IntN(1500)) * time.Millisecond)
		if err := sup.kill(); err != nil {
			stop()
			wg.Wait()
			t.Fatal(err)
		}
		if k%2 == 1 {
			if err := sup.killDuringStartup(time.Duration(20+rng.IntN(300)) * time.Millisecond); err != nil {
				stop()
				wg.Wait()
				t.Fatal(err)
			}
		}
		if err := sup.start(); err != nil {
			stop()
			wg.Wait()
			t.Fatal(err)
		}
	}
	stop()
	wg.Wait()

	var acked []*sentEvent
	large := 0
	for _, e := range evs {
		for _, b := range e.bad {
			t.Errorf("%s: %s", e.msgID, b)
		}
		if e.acked != nil {
			acked = append(acked, e)
			if len(e.body) == maxBody {
				large++
			}
		}
	}
	t.Logf("%d events sent, %d acknowledged (%d of 1MiB)", len(evs), len(acked), large)
	if large == 0 {
		t.Fatal("no large event acknowledged: the run proves nothing")
	}

	// Every acknowledged event reads back byte for byte.
	for _, e := range acked {
		st, b, _, err := adminCall(sup.client, http.MethodGet, sup.adminURL+"/api/v1/events/"+e.ackedID, nil, nil)
		if err != nil || st != http.StatusOK {
			t.Errorf("GET /events/%s (%s): %d %v %s", e.ackedID, e.msgID, st, err, excerpt(b, 200))
			continue
		}
		var v struct {
			Body        *string `json:"body"`
			BodyBase64  string  `json:"body_base64"`
			ContentType string  `json:"content_type"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		got := []byte(v.BodyBase64)
		if v.Body != nil {
			got = []byte(*v.Body)
		} else if got, err = base64.StdEncoding.DecodeString(v.BodyBase64); err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(got) != e.hash || v.ContentType != e.ct {
			t.Errorf("event %s (%s): GET /events body of %d bytes, content type %q: not what was acknowledged (%d bytes, %q)",
				e.ackedID, e.msgID, len(got), v.ContentType, len(e.body), e.ct)
		}
	}
	// A resend gets the stored answer.
	for _, e := range acked {
		if st, err := e.send(hc, url); err != nil || st != http.StatusAccepted {
			t.Errorf("resend of %s: %d %v", e.msgID, st, err)
		}
		for _, b := range e.bad {
			t.Errorf("resend of %s: %s", e.msgID, b)
		}
	}
	// Every acknowledged body is delivered exactly as sent.
	waitUntil(t, 90*time.Second, "every acknowledged body at the receiver", func() bool {
		for _, e := range acked {
			if rc.got(e.hash) == 0 {
				return false
			}
		}
		return true
	})
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
	before := rawKeys(t, sup.dataDir, "ae:", "ap:")
	t.Logf("before retention: %v", before)

	// Retention: every event goes, and with it every part.
	writeRetentionConfig(t, sup, rc.srv.URL+"/hooks", "1s", "1s")
	time.Sleep(1100 * time.Millisecond) // age the events past the new retention
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	waitEventsPurged(t, sup)
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
	if after := rawKeys(t, sup.dataDir, "ae:", "ap:", "de:", "dl:", "dq:"); after["ae:"]+after["ap:"] != 0 {
		t.Errorf("after retention purged every event the store still holds %v", after)
	}
	for _, p := range sup.logProblems() {
		t.Errorf("gateway crashed: %s", p)
	}
}
