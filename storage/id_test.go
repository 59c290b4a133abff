package storage

import (
	"reflect"
	"testing"
	"time"
)

func TestLeaseGroups(t *testing.T) {
	a, b := time.Unix(100, 0), time.Unix(200, 0)
	ds := []Delivery{
		{ID: "1", State: StateDelivering, LeaseUntil: a},
		{ID: "2", State: StatePending},
		{ID: "3", State: StateDelivering, LeaseUntil: b},
		{ID: "4", State: StateDelivering, LeaseUntil: a.UTC()},
	}
	want := []LeaseGroup{{Lease: a, IDs: []string{"1", "4"}}, {Lease: b, IDs: []string{"3"}}}
	if got := LeaseGroups(ds); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// IDs made at different times sort in time order, down to the nanosecond
// within a millisecond: lists are "newest first" by ID, and their records
// show times with nanoseconds.
func TestNewIDSortsByTime(t *testing.T) {
	base := time.Date(2026, 12, 2, 3, 4, 5, 0, time.UTC)
	steps := []time.Duration{0, 1, 2, 999, 1000, 123456, 999999, time.Millisecond, time.Millisecond + 1, time.Hour}
	var prevMax string
	for i, d := range steps {
		at := base.Add(d)
		lo, hi := "", ""
		for range 50 { // the random part must never undo the order
			id := NewID("evt_", at)
			if lo == "" || id < lo {
				lo = id
			}
			hi = max(hi, id)
			if got, ok := IDTime("evt_", id); !ok || !got.Equal(at.Truncate(time.Millisecond)) {
				t.Fatalf("IDTime(%s) = %v, %v; want %v", id, got, ok, at.Truncate(time.Millisecond))
			}
		}
		if i > 0 && lo <= prevMax {
			t.Fatalf("an ID made at +%v (%s) sorts at or before one made at +%v (%s)", d, lo, steps[i-1], prevMax)
		}
		prevMax = hi
	}
}

// IDs made at the same nanosecond still differ.
func TestNewIDAtOneInstantIsUnique(t *testing.T) {
	at := time.Now()
	seen := make(map[string]bool)
	for range 10000 {
		id := NewID("dlv_", at)
		if seen[id] {
			t.Fatalf("NewID made %s twice", id)
		}
		seen[id] = true
	}
}

// A keyed id sorts by its time like NewID's and is recognised by its
// parts alone, at whatever time it was made; other parts, another prefix,
// a NewID or a malformed id are not.
func TestKeyedID(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 6, 0, 0, 123456789, time.UTC)
	a := KeyedID("dlv_", t0, "tenant", "key", "ep")
	b := KeyedID("dlv_", t0.Add(time.Nanosecond*1000), "tenant", "key", "ep")
	if a == b || a >= b {
		t.Fatalf("keyed ids out of time order: %s, %s", a, b)
	}
	if got, ok := IDTime("dlv_", a); !ok || !got.Equal(t0.Truncate(time.Millisecond)) {
		t.Fatalf("IDTime(%s) = %v, %v", a, got, ok)
	}
	for _, id := range []string{a, b, KeyedID("dlv_", t0.Add(72*time.Hour), "tenant", "key", "ep")} {
		if !IsKeyedID(id, "dlv_", "tenant", "key", "ep") {
			t.Fatalf("%s not recognised as keyed by its parts", id)
		}
	}
	for name, id := range map[string]string{
		"other parts":  KeyedID("dlv_", t0, "tenant", "key", "ep2"),
		"split parts":  KeyedID("dlv_", t0, "tenant", "keye", "p"),
		"other prefix": KeyedID("evt_", t0, "tenant", "key", "ep"),
		"random":       NewID("dlv_", t0),
		"malformed":    "dlv_!!",
		"empty":        "",
	} {
		if IsKeyedID(id, "dlv_", "tenant", "key", "ep") {
			t.Fatalf("%s (%s) taken as keyed by the parts", name, id)
		}
	}
}
