package badger

import (
	"fmt"
	"testing"
)

func TestRecentKeys(t *testing.T) {
	r := newRecentKeys()
	key := func(i int) uint64 { return r.hash(fmt.Appendf(nil, "dd:t\x00s\x00evt-%d", i)) }
	for i := range 1000 {
		if r.mayContain(key(i)) {
			t.Fatalf("key %d known before it was added", i)
		}
		r.add(key(i))
	}
	// Keys sharing a slot evict each other: a few of 1000 may be forgotten
	// (about 0.05% expected), most must not.
	forgotten := 0
	for i := range 1000 {
		if !r.mayContain(key(i)) {
			forgotten++
		}
	}
	if forgotten > 10 {
		t.Fatalf("%d of 1000 keys forgotten with %d slots", forgotten, recentSlots)
	}
	// A key whose slot is taken by another is forgotten, never confused.
	a := key(0)
	b := a ^ 1<<62 // same slot, different hash
	r.add(b)
	if r.mayContain(a) || !r.mayContain(b) {
		t.Fatal("a replaced slot still answers for its old key")
	}
}

// The hash's non-empty mark must not be in the bits that pick the slot:
// in an earlier version, it was bit 0, so every key went to an odd slot and the
// table remembered half the keys its size promises.
func TestRecentKeysUseEverySlot(t *testing.T) {
	r := newRecentKeys()
	even := 0
	for i := range 4096 {
		h := r.hash(fmt.Appendf(nil, "dd:acme\x00stripe\x00evt-%d", i))
		if h&(recentSlots-1)%2 == 0 {
			even++
		}
	}
	if even == 0 {
		t.Fatalf("none of 4096 keys went to an even slot: half of the %d slots are never used", recentSlots)
	}
}
