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
