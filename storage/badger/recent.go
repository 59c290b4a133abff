package badger

import (
	"hash/maphash"
	"sync/atomic"
)

// recentKeys remembers the dedupe keys this process wrote or found
// recently, so that Ingest reads the store before queueing a write only
// when the event may be a retry. Most first requests then skip that read
// (it was ~5% of the gateway's CPU under load); a retry the table has
// forgotten (after a restart, or evicted by a later key) is still answered
// correctly by the writer, which checks every key again, just without the
// read-only shortcut.
//
// The table is direct-mapped and lock-free: a key's 64-bit hash sits in
// the slot its low bits pick, replacing whatever was there. A hit is a
// matching hash (a different key with the same 64-bit hash would only
// cost a needless read). With recentSlots slots a key is still known
// after about as many later keys (minutes at full ingest speed).
type recentKeys struct {
	seed  maphash.Seed
	slots []atomic.Uint64
}

// recentSlots is the table size, a power of two (8 MiB of hashes).
const recentSlots = 1 << 20

func newRecentKeys() *recentKeys {
	return &recentKeys{seed: maphash.MakeSeed(), slots: make([]atomic.Uint64, recentSlots)}
}

// hash returns k's hash; never 0, which marks an empty slot. The mark is
// the top bit: the slot comes from the low bits.
func (r *recentKeys) hash(k []byte) uint64 { return maphash.Bytes(r.seed, k) | 1<<63 }

// mayContain reports whether the key hashing to h was added and not yet
// replaced.
func (r *recentKeys) mayContain(h uint64) bool {
	return r.slots[h&(recentSlots-1)].Load() == h
}

func (r *recentKeys) add(h uint64) { r.slots[h&(recentSlots-1)].Store(h) }
