package inbound

import (
	"context"
	"encoding/json"
	"errors"
	"hookgate/storage"
	"hookgate/storage/badger"
	"net/http"
	"slices"
	"testing"
	"time"
)

func openStore(t *testing.T) *badger.DB {
	t.Helper()
	db, err := badger.Open(t.TempDir(), badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func noneSource(t *testing.T) *Source {
	t.Helper()
	src, err := CompileSource(storage.Source{ID: "src", Tenant: "acme", Verify: storage.VerifyConfig{Scheme: SchemeNone}, EventID: "json:/id", EventType: "json:/type"})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// slots is a fake dispatcher's reservation book: the first n requests for
// an endpoint get a slot.
type slots struct {
	free     map[string]int
	returned []string
	handed   []storage.Job
}

func (s *slots) Reserve(ids []string, now time.Time) []time.Time {
	out := make([]time.Time, len(ids))
	for i, id := range ids {
		if s.free[id] > 0 {
			s.free[id]--
			out[i] = now.Add(time.Minute)
		}
	}
	return out
}

func (s *slots) Unreserve(ids []string) { s.returned = append(s.returned, ids...) }

func (s *slots) Hand(jobs []storage.Job) { s.handed = append(s.handed, jobs...) }

func TestReceiveFanOutAndReservations(t *testing.T) {
	db := openStore(t)
	book := &slots{free: map[string]int{"fast": 1}}
	a := &Receiver{Store: db, HandOff: book}
	eps := []storage.Endpoint{
		{ID: "fast", Tenant: "acme"},
		{ID: "queued", Tenant: "acme", EventTypes: []string{"invoice.*"}},
		{ID: "filtered", Tenant: "acme", EventTypes: []string{"customer.*"}},
		{ID: "other-source", Tenant: "acme", Sources: []string{"elsewhere"}},
		{ID: "disabled", Tenant: "acme", Disabled: true},
		{ID: "other-tenant", Tenant: "globex"},
	}
	in := Inbound{Header: http.Header{}, Body: []byte(`{"id":"e1","type":"invoice.paid"}`), ContentType: "application/json"}
	res, err := a.Receive(context.Background(), noneSource(t), eps, in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 202 || res.Replayed || res.Event.EventID != "e1" || res.Event.Type != "invoice.paid" {
		t.Fatalf("accepted %+v", res)
	}
	claimed, pending := res.Claimed(), res.Pending()
	if len(claimed) != 1 || claimed[0].Delivery.Endpoint != "fast" || string(claimed[0].Event.Body) != string(in.Body) {
		t.Fatalf("claimed %+v", claimed)
	}
	if len(book.handed) != 1 || book.handed[0].Delivery.ID != claimed[0].Delivery.ID {
		t.Fatalf("handed to the dispatcher %+v, want the claimed delivery", book.handed)
	}
	if !slices.Equal(pending, []string{"queued"}) {
		t.Fatalf("pending %v", pending)
	}
	stored, err := db.GetDelivery(context.Background(), claimed[0].Delivery.ID)
	if err != nil || stored.State != storage.StateDelivering || !stored.LeaseUntil.Equal(claimed[0].Delivery.LeaseUntil) {
		t.Fatalf("the claimed delivery is not stored claimed: %+v %v", stored, err)
	}
	// A retry stores nothing and gives back the slot it reserved.
	book.free["fast"] = 1
	again, err := a.Receive(context.Background(), noneSource(t), eps, in)
	if err != nil || !again.Replayed || string(again.Body) != string(res.Body) {
		t.Fatalf("retry: %+v %v", again, err)
	}
	if !slices.Equal(book.returned, []string{"fast"}) {
		t.Fatalf("returned slots %v, want [fast]", book.returned)
	}
}

// failingIngester fails every Ingest.
type failingIngester struct{}

func (failingIngester) Release(context.Context, []string, time.Time, time.Time) error { return nil }

func (failingIngester) Ingest(context.Context, *storage.IngestRequest) (storage.IngestResult, error) {
	return storage.IngestResult{}, errors.New("disk full")
}

func TestReceiveStoreFailureReturnsSlots(t *testing.T) {
	book := &slots{free: map[string]int{"fast": 1}}
	a := &Receiver{Store: failingIngester{}, HandOff: book}
	_, err := a.Receive(context.Background(), noneSource(t), []storage.Endpoint{{ID: "fast", Tenant: "acme"}},
		Inbound{Header: http.Header{}, Body: []byte(`{"id":"x"}`)})

	if err == nil || !slices.Equal(book.returned, []string{"fast"}) {
		t.Fatalf("err %v, returned %v", err, book.returned)
	}
}

// TestAcceptedBodyIsJSON: the 202 body is what encoding/json makes of the
// same answer, whatever bytes the provider's event ID holds.
func TestAcceptedBodyIsJSON(t *testing.T) {
	for _, id := range []string{"evt_1", "a\"b\\c\x01\x7f", "caf\u00e9 \u2028", "\xff\xfe bad utf-8", ""} {
		want, _ := json.Marshal(map[string]string{"event_id": id, "id": "evt_1"})
		var got, exp map[string]string
		if err := json.Unmarshal(acceptedBody("evt_1", id), &got); err != nil {
			t.Fatalf("%q: not JSON: %s", id, acceptedBody("evt_1", id))
		}
		_ = json.Unmarshal(want, &exp)
		if got["event_id"] != exp["event_id"] || got["id"] != "evt_1" {
			t.Fatalf("%q: got %q want %q", id, got, exp)
		}
	}
}

// An endpoint's event_types are globs (storage.MatchType): any one of them
// matching the event's type subscribes it, "*" also to a type with "/".
func TestSubscribesMatchesEventTypeGlobs(t *testing.T) {
	for _, c := range []struct {
		typ  string
		want bool
	}{{"orders/create", true}, {"orders/paid", true}, {"invoice.paid", true}, {"products/update", false}} {
		ep := storage.Endpoint{ID: "e", Tenant: "t", EventTypes: []string{"never.this", "orders/*", "invoice.*"}}
		if got := Subscribes(&ep, "shop", c.typ); got != c.want {
			t.Errorf("Subscribes with event_types %q, type %q = %v, want %v", ep.EventTypes, c.typ, got, c.want)
		}
	}
}
