package outbound

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"hookgate/storage"
)

// An endpoint stored with a timeout over storage.MaxAttemptTimeout (an
// earlier build let the admin API store 2h) has its attempts cut at that
// bound: its lease (at most storage.MaxLease) ends a minute later, and an
// attempt that ran on past it would have been sent again beside itself.
func TestAttemptTimeoutIsCutToItsLeaseBound(t *testing.T) {
	var deadline time.Time
	s := &sender{timeout: time.Second, now: time.Now, client: &http.Client{
		Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
			deadline, _ = r.Context().Deadline()
			return nil, errors.New("not sent")
		}),
	}}
	ep := &storage.Endpoint{ID: "long", URL: "http://203.0.113.1/", Timeout: 2 * time.Hour}
	start := time.Now()
	s.send(context.Background(), ep, &storage.Job{}, nil)
	if got := deadline.Sub(start); got > storage.MaxAttemptTimeout+time.Second || got < storage.MaxAttemptTimeout-time.Second {
		t.Fatalf("the attempt's deadline is %v away, want %v", got, storage.MaxAttemptTimeout)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
