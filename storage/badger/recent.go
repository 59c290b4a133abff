package badger

import (
	"hash/maphash"
	"sync"
)

// recentKeys remembers the dedupe keys this process wrote or found
// recently, so that Accept reads the store before queueing a write only
// when the event may be a retry. Most first requests then skip that read
// (it was ~5% of the gateway's CPU under load); a retry the set does not
// know (after a restart, or older than two generations) is still answered
// correctly by the writer, which checks every key again, just without the
// read-only shortcut. Two generations of hashes bound the memory.
type recentKeys struct {
	seed maphash.Seed
	mu   sync.Mutex
	cur  map[uint64]struct{}
	prev map[uint64]struct{}
}

// recentGeneration is how many keys one generation holds (two are kept).
const recentGeneration = 1 << 18

func newRecentKeys() *recentKeys {
	return &recentKeys{seed: maphash.MakeSeed(), cur: make(map[uint64]struct{}), prev: map[uint64]struct{}{}}
}

func (r *recentKeys) hash(k []byte) uint64 { return maphash.Bytes(r.seed, k) }

// mayContain reports whether k was added in the current or previous
// generation (hash collisions make it say yes at worst).
func (r *recentKeys) mayContain(h uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, a := r.cur[h]
	_, b := r.prev[h]
	return a || b
}

func (r *recentKeys) add(h uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cur) >= recentGeneration {
		r.prev, r.cur = r.cur, make(map[uint64]struct{}, recentGeneration)
	}
	r.cur[h] = struct{}{}
}
