package admin

import (
	"cmp"
	"maps"
	"slices"

	"github.com/gofiber/fiber/v2"

	"hookgate/storage"
)

// Stats is GET /stats: this gateway's last hour by minute, over what
// the token sees.
type Stats struct {
	BucketSeconds int           `json:"bucket_seconds"`
	Buckets       []StatsBucket `json:"buckets"`
}

// getStats is GET /stats: the last hour's received events, deliveries
// (succeeded and failed), attempts and outbox depth, per minute, of this
// gateway (as /metrics is), over the sources and endpoints the token
// sees.
func (a *API) getStats(c *fiber.Ctx) error {
	if err := checkQuery(c, nil); err != nil {
		return err
	}
	p, snap := who(c), a.d.Registry.Current()
	endpoints := make(map[string]bool, len(snap.Endpoints))
	for _, ep := range snap.Endpoints {
		endpoints[ep.ID] = p.sees(ep.Tenant)
	}
	buckets := a.d.Recent.overview(a.now(),
		func(id string) bool {
			src, ok := snap.Sources[id]
			return ok && p.sees(src.Tenant)
		},
		func(id string) bool { return endpoints[id] })
	return c.JSON(Stats{BucketSeconds: int(recentBucket.Seconds()), Buckets: buckets})
}

// EndpointStats is GET /endpoints/{id}/stats.
type EndpointStats struct {
	WindowSeconds  int      `json:"window_seconds"`
	Attempts       int64    `json:"attempts"`
	Succeeded      int64    `json:"succeeded"`
	AttemptsFailed int64    `json:"attempts_failed"`
	Delivered      int64    `json:"delivered"`
	Failed         int64    `json:"failed"`
	SuccessRate    *float64 `json:"success_rate"` // of attempts; null with none
	LatencyP50MS   int64    `json:"latency_ms_p50"`
	LatencyP95MS   int64    `json:"latency_ms_p95"`
	Pending        int      `json:"pending"`
	Due            int      `json:"due"`
	Circuit        string   `json:"circuit"`
	PausedUntil    string   `json:"paused_until"`
}

// getEndpointStats is GET /endpoints/{id}/stats: the endpoint's last hour
// of attempts on this gateway (success rate, latency quantiles as the
// bounds of a histogram's buckets), its backlog from the store, and its
// circuit as this gateway sees it.
func (a *API) getEndpointStats(c *fiber.Ctx) error {
	if err := checkQuery(c, nil); err != nil {
		return err
	}
	ep, err := a.visibleEndpoint(c)
	if err != nil {
		return err
	}
	now := a.now()
	live, due, err := a.d.Store.Depth(c.UserContext(), ep.ID, now, DepthLimit)
	if err != nil {
		return a.storeError(err, "endpoint")
	}
	h := a.d.Recent.hour(ep.ID, now)
	v := EndpointStats{
		WindowSeconds: int((recentBuckets * recentBucket).Seconds()),
		Attempts:      h.attempts, Succeeded: h.attempts - h.attemptsFailed, AttemptsFailed: h.attemptsFailed,
		Delivered: h.delivered, Failed: h.failed, LatencyP50MS: h.p50, LatencyP95MS: h.p95,
		Pending: live, Due: due, Circuit: "closed",
	}
	if h.attempts > 0 {
		r := float64(v.Succeeded) / float64(h.attempts)
		v.SuccessRate = &r
	}
	if pause, ok := a.d.Dispatcher.EndpointPause(ep.ID, now); ok {
		v.Circuit, v.PausedUntil = pause.State, apiTime(pause.Until)
	}
	if ep.Disabled {
		v.Circuit = "disabled"
	}
	return c.JSON(v)
}

// maxReplayList bounds GET /replays: jobs are kept for retention, and a
// console shows the latest.
const maxReplayList = 100

// listReplays is GET /replays: the token's bulk replays, newest first, at
// most maxReplayList.
func (a *API) listReplays(c *fiber.Ctx) error {
	if err := checkQuery(c, nil); err != nil {
		return err
	}
	p := who(c)
	// Running ones first: a job that ends between two reads is found
	// again among the ended ones (and kept once, as ended), never missed.
	byID := map[string]storage.ReplayJob{}
	for _, st := range []storage.ReplayState{storage.ReplayRunning, storage.ReplayCompleted, storage.ReplayFailed} {
		js, err := a.d.Store.ListReplays(c.UserContext(), st)
		if err != nil {
			return a.storeError(err, "replay")
		}
		for _, j := range js {
			if p.sees(j.Tenant) {
				byID[j.ID] = j
			}
		}
	}
	jobs := slices.Collect(maps.Values(byID))
	slices.SortFunc(jobs, func(x, y storage.ReplayJob) int {
		return cmp.Or(y.CreatedAt.Compare(x.CreatedAt), cmp.Compare(y.ID, x.ID))
	})
	jobs = jobs[:min(len(jobs), maxReplayList)]
	out := List[Replay]{Data: make([]Replay, len(jobs))}
	for i := range jobs {
		out.Data[i] = newReplayView(&jobs[i])
	}
	return c.JSON(out)
}
