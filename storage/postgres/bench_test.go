package postgres_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/internal/pgtest"
	"hookgate/storage"
	"hookgate/storage/postgres"
)

// BenchmarkIngest is the database's own ceiling for hookgate's ingest
// here: the dedupe claim, the event (1 KiB body) and one delivery, issued
// by 64 goroutines over 64 connections, with no HTTP. Run it against a
// server with fsync on (./test.sh's throwaway cluster has it off):
//
//	HOOKGATE_TEST_POSTGRES_DSN=… go test -run '^$' -bench Ingest -benchtime 10s ./storage/postgres
func BenchmarkIngest(b *testing.B) {
	dsn, schema := pgtest.Schema(b)
	db, err := postgres.Open(context.Background(), dsn, postgres.Options{Schema: schema, MaxConns: 64})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	body := make([]byte, 1024)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	var seq atomic.Int64
	b.SetParallelism(64 / max(1, testingProcs()))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			now := time.Now().UTC()
			id := fmt.Sprint("bench-", seq.Add(1))
			evt := storage.NewID("evt_", now)
			req := &storage.IngestRequest{
				Key:         storage.DedupeKey{Tenant: "bench", Source: "bench", EventID: id},
				DedupeUntil: now.Add(72 * time.Hour),
				Event: storage.Event{ID: evt, Tenant: "bench", Source: "bench", EventID: id, Type: "t", ReceivedAt: now,
					ContentType: "application/json", Body: body, Headers: map[string]string{"Content-Type": "application/json"},
					IdempotencyKey: storage.IdempotencyKey("bench", "bench", id)},
				Deliveries: []storage.Delivery{{ID: storage.NewID("dlv_", now), Event: evt, Tenant: "bench", Endpoint: "ep",
					State: storage.StatePending, CreatedAt: now, NextAttemptAt: now, RetryFrom: now, UpdatedAt: now}},
				Response: storage.Response{Status: 202, Body: []byte(`{"id":"` + evt + `"}`)},
			}
			if _, err := db.Ingest(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "accepts/s")
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }
