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
// Lowering is always safe and happens on every outbox insert (in the
// writer, before commit). Raising happens only after a Claim's commit, and
// only when nothing was inserted below it in the meantime: version counts
// the lowerings.
type floors struct {
	mu sync.Mutex
	m  map[string]*floor
}

type floor struct {
	at      int64 // Unix nanoseconds; 0 = scan from the start
	version uint64
}

func newFloors() *floors { return &floors{m: map[string]*floor{}} }

// get returns the endpoint's floor and its version; an unknown endpoint
// starts at 0 (a full scan, as after a restart).
func (f *floors) get(ep string) (int64, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.m[ep]; fl != nil {
		return fl.at, fl.version
	}
	return 0, 0
}

// lower records an outbox entry due at t.
func (f *floors) lower(ep string, t time.Time) {
	ns := dueNanos(t)
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.m[ep]
	if fl == nil {
		// Unknown: scans start at 0 anyway, but a raise computed before
		// this insert must now fail.
		f.m[ep] = &floor{version: 1}
		return
	}
	if ns < fl.at {
		fl.at = ns
		fl.version++
	}
}

// raise moves the floor up to ns if the version is still v.
func (f *floors) raise(ep string, ns int64, v uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.m[ep]
	if fl == nil {
		if v != 0 {
			return
		}
		fl = &floor{}
		f.m[ep] = fl
	}
	// ns == noneLeft (an empty outbox) is kept as is: the next insert lowers it.
	if fl.version == v && ns > fl.at {
		fl.at = ns
	}
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
