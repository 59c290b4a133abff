package badger_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/storage"
	"hookgate/storage/badger"
)

// benchAccept builds an accept request for a 1 KiB event with one delivery.
// The body compresses like a provider's JSON does (not like padding): the
// store compresses event records.
func benchAccept(i int64, now time.Time) *storage.IngestRequest {
	id := fmt.Sprint("bench-", i)
	body := badger.InvoiceBody(id, 1024)
	evt := storage.NewID("evt_", now)
	return &storage.IngestRequest{
		Key:         storage.DedupeKey{Tenant: "t", Source: "s", EventID: id},
		BodyHash:    sha256.Sum256(body),
		DedupeUntil: now.Add(time.Hour),
		Event:       storage.Event{ID: evt, Tenant: "t", Source: "s", EventID: id, ReceivedAt: now, Body: body, ContentType: "application/json"},
		Deliveries: []storage.Delivery{{ID: storage.NewID("dlv_", now), Event: evt, Tenant: "t", Endpoint: "ep",
			State: storage.StatePending, CreatedAt: now, NextAttemptAt: now, RetryFrom: now}},
		Response: storage.Response{Status: 202, Body: []byte(`{"id":"` + evt + `"}`)},
	}
}

// BenchmarkIngest is the durable accept path (one fsync per group commit)
// with 64 concurrent callers, as under 64 ingest clients.
func BenchmarkIngest(b *testing.B) {
	db, err := badger.Open(b.TempDir(), badger.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var seq atomic.Int64
	b.SetParallelism(32) // 2 cores x 32 = 64 goroutines
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := db.Ingest(context.Background(), benchAccept(seq.Add(1), time.Now())); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if st := db.SyncStats(); st.Syncs > 0 {
		b.ReportMetric(float64(st.Writes)/float64(st.Syncs), "writes/sync")
	}
}

// BenchmarkIngestDuplicate is a retry of a known event: answered from the
// dedupe record without a write.
func BenchmarkIngestDuplicate(b *testing.B) {
	db, err := badger.Open(b.TempDir(), badger.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	req := benchAccept(1, time.Now())
	if _, err := db.Ingest(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res, err := db.Ingest(context.Background(), req); err != nil || !res.Replayed {
				b.Errorf("%v %v", res, err)
				return
			}
		}
	})
}

// BenchmarkClaimComplete is the dispatcher's store path per delivery: claim
// a batch from a backlog, then record each outcome.
func BenchmarkClaimComplete(b *testing.B) {
	db, err := badger.Open(b.TempDir(), badger.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx, now := context.Background(), time.Now()
	for i := range int64(b.N) {
		if _, err := db.Ingest(ctx, benchAccept(i, now)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	done := 0
	for done < b.N {
		jobs, err := db.Claim(ctx, "ep", time.Now(), 64, time.Minute)
		if err != nil || len(jobs) == 0 {
			b.Fatalf("claim: %d %v", len(jobs), err)
		}
		errs := make(chan error, len(jobs))
		for _, j := range jobs {
			go func() {
				errs <- db.Complete(ctx, &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil, CountAttempt: true,
					Attempt: storage.Attempt{N: 1, At: time.Now(), StatusCode: 200}, State: storage.StateSucceeded})
			}()
		}
		for range jobs {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		done += len(jobs)
	}
}
