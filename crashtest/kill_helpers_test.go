package crashtest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
)

// writeRetentionConfig rewrites the supervisor's config.yaml with
// server.max_body left at its default (1MiB), a retention and retry window
// of the test's choosing, and its receiver as the endpoint.
func writeRetentionConfig(t *testing.T, sup *supervisor, receiverURL, retention, maxElapsed string) {
	t.Helper()
	sup.writeConfig(t, receiverURL, gatewayConfig{timeout: "5s", retention: retention, maxElapsed: maxElapsed, maxInFlight: 16})
}

// rawKeys counts the keys under each prefix in the data directory of a
// stopped gateway, opening Badger itself (read only).
func rawKeys(t *testing.T, dir string, prefixes ...string) map[string]int {
	t.Helper()
	db, err := bdg.Open(bdg.DefaultOptions(dir).WithLogger(nil).WithReadOnly(true))
	if err != nil {
		t.Fatalf("open the store read only: %v", err)
	}
	defer db.Close()
	out := map[string]int{}
	err = db.View(func(txn *bdg.Txn) error {
		for _, p := range prefixes {
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte(p)})
			for it.Rewind(); it.Valid(); it.Next() {
				out[p]++
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// signedIngest builds a Standard Webhooks request for the test source.
func signedIngest(url, msgID, contentType string, body []byte, at time.Time) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(sourceSecret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.%s", msgID, at.Unix(), body)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Webhook-Id", msgID)
	req.Header.Set("Webhook-Timestamp", strconv.FormatInt(at.Unix(), 10))
	req.Header.Set("Webhook-Signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return req, nil
}

// hashReceiver answers 200 and counts the bodies it got by SHA-256, with
// their Content-Type; it records when each request arrived, per path.
type hashReceiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	byHash   map[[32]byte]int
	types    map[string]int
	arrivals map[string][]time.Time // path → arrival times
	paths    map[string][]string    // Idempotency-Key "/" hookgate-attempt → paths
}

func newHashReceiver(t *testing.T) *hashReceiver {
	t.Helper()
	r := &hashReceiver{byHash: map[[32]byte]int{}, types: map[string]int{}, arrivals: map[string][]time.Time{}, paths: map[string][]string{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		at := time.Now()
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		r.mu.Lock()
		r.byHash[sha256.Sum256(body)]++
		r.types[req.Header.Get("Content-Type")]++
		r.arrivals[req.URL.Path] = append(r.arrivals[req.URL.Path], at)
		ka := req.Header.Get("Idempotency-Key") + "/" + req.Header.Get("hookgate-attempt")
		r.paths[ka] = append(r.paths[ka], req.URL.Path)
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *hashReceiver) got(h [32]byte) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byHash[h]
}

// waitEventsPurged waits for GET /events to list no event: retention has
// purged every one.
func waitEventsPurged(t *testing.T, sup *supervisor) {
	t.Helper()
	waitUntil(t, 30*time.Second, "retention to purge every event", func() bool {
		st, b, _, err := adminCall(sup.client, http.MethodGet, sup.adminURL+"/api/v1/events?limit=1", nil, nil)
		var page struct{ Data []json.RawMessage }
		return err == nil && st == http.StatusOK && json.Unmarshal(b, &page) == nil && len(page.Data) == 0
	})
}
