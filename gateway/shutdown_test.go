package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"hookgate/storage"
)

// TestShutdownUnderLoad: a graceful shutdown while clients are posting
// finishes the requests in flight; every request answered 202 is in the
// store when it is opened again, and none is answered with a 5xx.
func TestShutdownUnderLoad(t *testing.T) {
	g := startGateway(t, gwOptions{})
	addr := g.PublicAddr()
	var (
		mu    sync.Mutex
		acked []string
		wg    sync.WaitGroup
	)
	stop := make(chan struct{})
	started := make(chan struct{}, 8)
	client := &http.Client{}
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf(`{"id":"c%d-%d"}`, c, i)
				resp, err := client.Post("http://"+addr+"/ingest/open", "application/json", bytes.NewReader([]byte(body)))
				if err != nil {
					return // the listener is gone: not acknowledged
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode >= 500 {
					t.Errorf("answer during shutdown: %d %s", resp.StatusCode, b)
					return
				}
				if resp.StatusCode == 202 {
					var ans map[string]string
					_ = json.Unmarshal(b, &ans)
					mu.Lock()
					acked = append(acked, ans["id"])
					mu.Unlock()
				}
				if i == 10 {
					started <- struct{}{}
				}
			}
		}()
	}
	for range 8 {
		<-started
	}
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	client.CloseIdleConnections()

	g2 := g.restart(gwOptions{})
	for _, id := range acked {
		if _, err := g2.Store().GetEvent(context.Background(), id); err != nil {
			t.Fatalf("acknowledged event %s missing after shutdown: %v", id, err)
		}
	}
	evs, _, _ := g2.Store().ListEvents(context.Background(), storage.EventFilter{Limit: 1000})
	if len(acked) < 80 || len(evs) < len(acked) {
		t.Fatalf("%d acknowledged, %d stored", len(acked), len(evs))
	}
}
