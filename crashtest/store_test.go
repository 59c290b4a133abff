package crashtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"hookgate/storage"
	"hookgate/storage/badger"
)

// storedEvent is an event as the gateway keeps it, with its deliveries
// when they are known.
type storedEvent struct {
	ID         string
	EventID    string
	Body       []byte
	Deliveries []storage.Delivery
}

// readStoreTimeout bounds opening, reading and closing the store, so that
// a store that hangs fails the test instead of stalling it.
const readStoreTimeout = time.Minute

// readStore opens the data directory of a stopped gateway and lists every
// event with its deliveries. It is the ground truth for "exactly one event
// per provider ID" and "nothing left undelivered".
func readStore(dir string) ([]storedEvent, error) {
	type result struct {
		evs []storedEvent
		err error
	}
	done := make(chan result, 1)
	go func() {
		evs, err := listStore(dir)
		done <- result{evs, err}
	}()
	timer := time.NewTimer(readStoreTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.evs, r.err
	case <-timer.C:
		return nil, fmt.Errorf("reading the store in %s did not finish within %v", dir, readStoreTimeout)
	}
}

// listStore does readStore's work.
func listStore(dir string) ([]storedEvent, error) {
	db, err := badger.Open(dir, badger.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	ctx := context.Background()
	var out []storedEvent
	cursor := ""
	for {
		// The test's source only: the gateway's own operational events
		// (source hookgate: circuits opened by the receiver's faults) are
		// not the provider's.
		evs, next, err := db.ListEvents(ctx, storage.EventFilter{Source: sourceID, Limit: badger.MaxLimit, Cursor: cursor})
		if err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		for _, ev := range evs {
			ds, more, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Event: ev.ID, Limit: badger.MaxLimit})
			if err != nil {
				return nil, fmt.Errorf("deliveries of %s: %w", ev.ID, err)
			}
			if more != "" {
				return nil, fmt.Errorf("event %s has more than %d deliveries", ev.ID, badger.MaxLimit)
			}
			out = append(out, storedEvent{ID: ev.ID, EventID: ev.EventID, Body: ev.Body, Deliveries: ds})
		}
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

// adminEvents lists every event of the test's source through the admin
// API (GET /api/v1/events?source= with the operator token, paging with
// next_cursor). ok is false when the
// route does not exist (yet): the store is then checked directly only.
func adminEvents(c *http.Client, adminURL string) (evs []storedEvent, ok bool, err error) {
	cursor := ""
	for page := 0; ; page++ {
		q := url.Values{"limit": {"1000"}, "source": {sourceID}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		req, err := http.NewRequest(http.MethodGet, adminURL+"/api/v1/events?"+q.Encode(), nil)
		if err != nil {
			return nil, false, err
		}
		req.Header.Set("Authorization", "Bearer "+operatorToken)
		resp, err := c.Do(req)
		if err != nil {
			return nil, false, err
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, false, err
		}
		if page == 0 && resp.StatusCode == http.StatusNotFound {
			return nil, false, nil
		}
		if resp.StatusCode != http.StatusOK {
			return nil, true, fmt.Errorf("GET /api/v1/events page %d: %d %s", page, resp.StatusCode, excerpt(b, 300))
		}
		var list struct {
			Data []struct {
				ID      string `json:"id"`
				EventID string `json:"event_id"`
				Body    string `json:"body"`
			} `json:"data"`
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &list); err != nil {
			return nil, true, fmt.Errorf("GET /api/v1/events page %d: %w", page, err)
		}
		for _, e := range list.Data {
			evs = append(evs, storedEvent{ID: e.ID, EventID: e.EventID, Body: []byte(e.Body)})
		}
		if list.NextCursor == "" || len(list.Data) == 0 {
			return evs, true, nil
		}
		cursor = list.NextCursor
	}
}

// errNoAdminAPI is returned when the admin API route does not exist.
var errNoAdminAPI = errors.New("admin API route not found")

// countDeliveries returns how many of the endpoint's deliveries are in
// state (GET /api/v1/deliveries?endpoint=&status=, one page: 0 or more).
func countDeliveries(c *http.Client, adminURL, state string) (int, error) {
	q := url.Values{"endpoint": {endpointID}, "status": {state}, "limit": {"1"}}
	req, err := http.NewRequest(http.MethodGet, adminURL+"/api/v1/deliveries?"+q.Encode(), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return 0, err
	case resp.StatusCode == http.StatusNotFound:
		return 0, errNoAdminAPI
	case resp.StatusCode != http.StatusOK:
		return 0, fmt.Errorf("GET /api/v1/deliveries: %d %s", resp.StatusCode, excerpt(b, 300))
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return 0, fmt.Errorf("GET /api/v1/deliveries: %w", err)
	}
	return len(list.Data), nil
}
