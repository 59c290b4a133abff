package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"hookgate/gateway/config"
	"hookgate/storage"
)

// SecretGenerator makes a new endpoint signing secret (whsec_…).
type SecretGenerator func() string

// applyConfig writes config.yaml's sources and endpoints to the store:
// config entries win over stored ones with the same id, except for what
// the store learned at run time (an endpoint's generated secret and its
// rotation history, a disabled flag). Entries that came from an earlier
// config and are gone from this one are deleted; those created through the
// admin API are left alone.
func applyConfig(ctx context.Context, cfg *config.Config, s storage.Store, newSecret SecretGenerator, now time.Time) error {
	srcs, err := s.ListSources(ctx)
	if err != nil {
		return err
	}
	inConfig := map[string]bool{}
	for _, sc := range cfg.Sources {
		inConfig[sc.ID] = true
		src := sourceFromConfig(sc, now)
		if old, err := s.GetSource(ctx, sc.ID); err == nil && old.Tenant == sc.Tenant {
			src.CreatedAt, src.UpdatedAt = old.CreatedAt, old.UpdatedAt
			if !sameJSON(src, old) {
				src.UpdatedAt = now
			}
		}
		if err := s.PutSource(ctx, &src); err != nil {
			return fmt.Errorf("source %s: %w", sc.ID, err)
		}
	}
	for _, old := range srcs {
		if old.FromConfig && !inConfig[old.ID] {
			if err := s.DeleteSource(ctx, old.ID); err != nil {
				return fmt.Errorf("source %s: %w", old.ID, err)
			}
		}
	}
	eps, err := s.ListEndpoints(ctx)
	if err != nil {
		return err
	}
	inConfig = map[string]bool{}
	for _, ec := range cfg.AllEndpoints() {
		inConfig[ec.ID] = true
		ep := endpointFromConfig(ec, now)
		// What an endpoint learned at run time is kept only for the same
		// tenant: one moved to another tenant in config.yaml is a new
		// endpoint (its secret was readable by the old tenant).
		old, err := s.GetEndpoint(ctx, ec.ID)
		kept := err == nil && old.Tenant == ec.Tenant
		if kept {
			ep.CreatedAt, ep.Disabled, ep.DisabledReason = old.CreatedAt, old.Disabled, old.DisabledReason
			if ec.Secret == "" || (len(old.Secrets) > 0 && old.Secrets[0].Value == ec.Secret) {
				// Generated, or rotated to the secret config.yaml now
				// names: the old ones stay valid for their grace period.
				ep.Secrets = old.Secrets
			}
		}
		if len(ep.Secrets) == 0 {
			ep.Secrets = []storage.Secret{{Value: newSecret()}}
		}
		if kept {
			ep.UpdatedAt = old.UpdatedAt
			if !sameJSON(ep, old) {
				ep.UpdatedAt = now
			}
		}
		if err := s.PutEndpoint(ctx, &ep); err != nil {
			return fmt.Errorf("endpoint %s: %w", ec.ID, err)
		}
	}
	for _, old := range eps {
		if old.FromConfig && !inConfig[old.ID] {
			// Its deliveries are cancelled in the background: the gateway
			// finds them with no endpoint (backlogs.findOrphans).
			if err := s.DeleteEndpoint(ctx, old.ID); err != nil {
				return fmt.Errorf("endpoint %s: %w", old.ID, err)
			}
		}
	}
	return nil
}

// sameJSON reports whether a and b encode alike: an entry config.yaml
// applies again is left with its updated_at when it is as stored (a
// restart with the same config.yaml changes nothing a user can see).
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// refuseTakeovers refuses a config.yaml whose source or endpoint ids are
// another tenant's, created through the admin API: config.yaml would take
// them over, and with them that tenant's deliveries or provider traffic.
// (An id an earlier config.yaml gave another tenant is the operator's to
// move.)
func refuseTakeovers(ctx context.Context, cfg *config.Config, s storage.Store) error {
	srcs, err := s.ListSources(ctx)
	if err != nil {
		return err
	}
	for _, sc := range cfg.Sources {
		for _, old := range srcs {
			if old.ID == sc.ID && !old.FromConfig && old.Tenant != sc.Tenant {
				return fmt.Errorf("config.yaml gives source %q to tenant %q, but that id is another tenant's source, created through the admin API: choose another id, or delete that source first", sc.ID, sc.Tenant)
			}
		}
	}
	eps, err := s.ListEndpoints(ctx)
	if err != nil {
		return err
	}
	for _, ec := range cfg.AllEndpoints() {
		for _, old := range eps {
			if old.ID == ec.ID && !old.FromConfig && old.Tenant != ec.Tenant {
				return fmt.Errorf("config.yaml gives endpoint %q to tenant %q, but that id is another tenant's endpoint, created through the admin API: choose another id, or delete that endpoint first", ec.ID, ec.Tenant)
			}
		}
	}
	return refuseTooManyEndpoints(cfg, eps)
}

// refuseTooManyEndpoints refuses a config.yaml that, with the endpoints
// created through the admin API, gives a tenant more than
// config.MaxEndpointsPerTenant: config.Parse bounds config.yaml's own, and
// POST /endpoints counts both, but only the start sees config.yaml's
// added to those the API made meanwhile. Past the bound an event of that
// tenant could be too large a write to accept, answered 503 for ever.
func refuseTooManyEndpoints(cfg *config.Config, stored []storage.Endpoint) error {
	inConfig := map[string]bool{}
	fromConfig, fromAPI := map[string]int{}, map[string]int{}
	for _, ec := range cfg.Endpoints {
		inConfig[ec.ID] = true
		fromConfig[ec.Tenant]++
	}
	for _, ep := range stored {
		if !ep.FromConfig && !inConfig[ep.ID] {
			fromAPI[ep.Tenant]++
		}
	}
	for _, ec := range cfg.Endpoints { // config.yaml's order: the first tenant past it is named
		t := ec.Tenant
		if n := fromConfig[t] + fromAPI[t]; n > config.MaxEndpointsPerTenant {
			return fmt.Errorf("tenant %q would have %d endpoints, %d from config.yaml and %d created through the admin API, more than the %d a tenant may have: remove some from config.yaml, or delete some through the admin API first", t, n, fromConfig[t], fromAPI[t], config.MaxEndpointsPerTenant)
		}
	}
	return nil
}

func sourceFromConfig(sc config.SourceConfig, now time.Time) storage.Source {
	v := sc.Verify
	return storage.Source{
		ID: sc.ID, Tenant: sc.Tenant, EventID: sc.EventID, EventType: sc.EventType, FromConfig: true,
		Verify: storage.VerifyConfig{
			Scheme: v.Scheme, Secrets: v.Secrets, Tolerance: tolerance(v),
			Header: v.Header, Algorithm: v.Algorithm, Encoding: v.Encoding, Prefix: v.Prefix,
		},
		CreatedAt: now, UpdatedAt: now,
	}
}

func endpointFromConfig(ec config.EndpointConfig, now time.Time) storage.Endpoint {
	ep := storage.Endpoint{
		ID: ec.ID, Tenant: ec.Tenant, URL: ec.URL, Sources: ec.Sources, EventTypes: ec.EventTypes,
		Headers: ec.Headers, Timeout: ec.Timeout.D(), MaxInFlight: ec.MaxInFlight, RateLimit: ec.RateLimit,
		Retry: ec.Retry.Policy(), FromConfig: true, CreatedAt: now, UpdatedAt: now,
	}
	if ec.Secret != "" {
		ep.Secrets = []storage.Secret{{Value: ec.Secret}}
	}
	return ep
}

// tolerance is v's tolerance where its scheme signs a timestamp, else 0.
func tolerance(v *config.VerifyConfig) time.Duration {
	if !slices.Contains(config.TimestampSchemes, v.Scheme) {
		return 0
	}
	return v.Tolerance.D()
}
