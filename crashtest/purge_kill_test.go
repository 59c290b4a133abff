package crashtest

import (
	"testing"
	"time"
)

// The retention sweep runs at every start. Restarts SIGKILLed while it
// deletes thousands of expired events (each with its delivery, attempt and
// index keys, over several transactions): once a later process finished
// the sweep, GET /events is empty and the store holds no key of any purged
// event: no delivery, outbox entry, attempt or index entry left behind for
// ever by a kill between two of the sweep's transactions.
func TestKillDuringRetentionSweepLeavesNoOrphans(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const n = 4000
	rc := newPathReceiver(t)
	sup := newSupervisor(t, buildBinary(t), rc.srv.URL)
	eps := []cfgEndpoint{{id: endpointID, url: rc.srv.URL + "/a", maxInFlight: 32}, {id: "second", url: rc.srv.URL + "/b", maxInFlight: 32}}
	retry := "{initial_interval: 50ms, max_interval: 500ms, max_attempts: 1000, max_elapsed: 1s}"
	writeEndpointsConfig(t, sup, "1h", retry, eps)
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	publishEvents(t, sup, "old-", n)
	waitUntil(t, 60*time.Second, "every event at both endpoints", func() bool {
		return len(rc.keys("/a")) == n && len(rc.keys("/b")) == n
	})
	waitUntil(t, 30*time.Second, "every delivery recorded", func() bool {
		s, err := deliveryStates(sup)
		return err == nil && s["succeeded"] == 2*n
	})
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
	before := rawKeys(t, sup.dataDir, "ae:", "et:", "dl:", "de:", "dp:", "dt:", "dq:", "at:")
	t.Logf("before the sweep: %v", before)

	writeEndpointsConfig(t, sup, "1s", retry, eps)
	time.Sleep(1100 * time.Millisecond) // every event is now past retention
	for _, d := range []time.Duration{150, 200, 250, 300, 350, 400, 500, 650} {
		if err := sup.killDuringStartup(d * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := sup.start(); err != nil {
		t.Fatal(err)
	}
	waitEventsPurged(t, sup)
	waitUntil(t, 30*time.Second, "no delivery left", func() bool {
		s, err := deliveryStates(sup)
		return err == nil && len(s) == 0
	})
	if err := sup.stop(); err != nil {
		t.Fatal(err)
	}
	after := rawKeys(t, sup.dataDir, "ae:", "ap:", "et:", "dl:", "de:", "dp:", "dt:", "dq:", "at:")
	left := 0
	for _, c := range after {
		left += c
	}
	if left != 0 {
		t.Errorf("after the sweep purged every event the store still holds %v", after)
	}
	for _, p := range sup.logProblems() {
		t.Errorf("gateway crashed: %s", p)
	}
}
