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
