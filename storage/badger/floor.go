package badger

import (
	"math"
	"sync"
	"time"
)

// floors remembers, per endpoint, a lower bound of the due times of its
// live outbox entries. Claimed and completed entries leave deletion markers
// at the front of an endpoint's outbox until compaction; starting a scan at
// the floor instead of the prefix keeps Claim and NextDue from walking them
// again and again (without it, a busy endpoint's claims slow down as its
// history grows).
//
// The floor is only changed by the writer goroutine, in operation order:
// every outbox insert lowers it to the new entry, and a Claim sets it to
// the first entry it leaves behind. Operations later in the same batch
// therefore see a floor that is right for the transaction they share. A
// batch that does not commit may have moved floors past entries that are
// still there, so a failed commit forgets every floor (the next scans start
// from the front). Readers (NextDue) take the floor under the mutex.
type floors struct {
	mu sync.Mutex
	m  map[string]int64 // Unix nanoseconds; absent = scan from the start
}

func newFloors() *floors { return &floors{m: map[string]int64{}} }

// get returns the endpoint's floor (0 when unknown).
func (f *floors) get(ep string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[ep]
}

// lower records an outbox entry due at t.
func (f *floors) lower(ep string, t time.Time) {
	ns := dueNanos(t)
	f.mu.Lock()
	defer f.mu.Unlock()
	if at, ok := f.m[ep]; ok && ns < at {
		f.m[ep] = ns
	}
}

// set records that no live entry of ep is due before ns (noneLeft: the
// outbox is empty).
func (f *floors) set(ep string, ns int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[ep] = ns
}

// forget forgets ep's floor: its outbox is empty and its endpoint gone
// (CancelEndpoint). An entry per endpoint id ever used stayed for the
// life of the process.
func (f *floors) forget(ep string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, ep)
}

// reset forgets every floor.
func (f *floors) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.m)
}

// noneLeft is the floor of an endpoint whose outbox is empty.
const noneLeft = math.MaxInt64

// dueNanos is the outbox position of t: Unix nanoseconds, with times
// before 1970 (a zero time) at the very front so they are never starved.
func dueNanos(t time.Time) int64 {
	if t.Before(time.Unix(0, 0)) {
		return 0
	}
	return t.UnixNano()
}
