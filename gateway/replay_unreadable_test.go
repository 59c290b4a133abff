package gateway

import (
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
)

// damageEventRecord overwrites the stored record of event id (the store's
// key "ae:"+id) with bytes that do not decode, in the stopped gateway's
// data directory: the damage docs/guarantees.md deals with for
// claims and retention.
func damageEventRecord(t *testing.T, dir, id string) {
	t.Helper()
	db, err := bdg.Open(bdg.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *bdg.Txn) error {
		k := []byte("ae:" + id)
		if _, err := txn.Get(k); err != nil {
			return err // not the key the store uses: the test is wrong
		}
		return txn.Set(k, []byte{0xff, 0x00, 0x13})
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// A bulk replay over a range holding one unreadable event record replays
// the others. Its listing failed at that record: the job ended "failed"
// after a minute of retries, with none of the events replayed, and every
// new job over that range did the same until retention deleted the
// record, weeks later.
func TestBulkReplayGoesPastAnUnreadableEventRecord(t *testing.T) {
	defer func(d time.Duration) { replayRetryFor = d }(replayRetryFor)
	replayRetryFor = time.Second
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: endpointA(rcv)})
	ids := ingestN(t, g, "dmg", 3) // oldest first
	waitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 3 })
	dir := g.dir
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	damageEventRecord(t, dir, ids[1])
	g = startGateway(t, gwOptions{dir: dir, extra: endpointA(rcv)})

	job := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"source": "open"}))
	var got replayView
	waitFor(t, 30*time.Second, "the replay to end", func() bool {
		got = must[replayView](t, 200)(g.api("GET", "/replays/"+job.ID, acmeToken, nil))
		return got.State != "running"
	})
	if got.State != "completed" || got.Matched != 2 || got.Enqueued != 2 {
		t.Fatalf("replay %+v; want completed, the 2 readable events replayed", got)
	}
}
