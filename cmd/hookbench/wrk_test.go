package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookgate/inbound"
)

// The files wrk replays must hold distinct events that hookgate's own
// standard-webhooks verifier accepts, spread over one file per thread.
func TestWrkRequestsVerify(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "req")
	if err := writeWrkRequests(7, 2, 1024, prefix); err != nil {
		t.Fatal(err)
	}
	v, err := inbound.NewVerifier(inbound.VerifyConfig{Scheme: inbound.SchemeStandardWebhooks, Secrets: []string{benchSecret}})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for file, want := range map[string]int{"1": 4, "2": 3} {
		f, err := os.Open(prefix + file + ".txt")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		n := 0
		for sc.Scan() {
			n++
			fields := strings.SplitN(sc.Text(), "\t", 4)
			if len(fields) != 4 {
				t.Fatalf("file %s line %d: %d fields, want 4", file, n, len(fields))
			}
			h := http.Header{}
			h.Set("webhook-id", fields[0])
			h.Set("webhook-timestamp", fields[1])
			h.Set("webhook-signature", fields[2])
			body := []byte(fields[3])
			if err := v.Verify(h, body, time.Now()); err != nil {
				t.Errorf("file %s line %d: %v", file, n, err)
			}
			if !json.Valid(body) || ids[fields[0]] {
				t.Errorf("file %s line %d: invalid body or repeated id %q", file, n, fields[0])
			}
			ids[fields[0]] = true
		}
		f.Close()
		if err := sc.Err(); err != nil || n != want {
			t.Errorf("file %s: %d requests (err %v), want %d", file, n, err, want)
		}
	}
}
