package badger

import (
	"encoding/binary"
	"time"
)

// Key layout. Every key starts with a two-letter prefix and a colon; parts
// after it are joined with sep (0x00), which no ID or tenant contains.
// Gateway IDs (evt_, dlv_) sort by creation time, so a prefix scan in key
// order is a scan in time order.
//
// Event records come first in key order, and their IDs grow with time, so
// new records are always the last keys of the first range of keys that
// ingest writes. Badger cuts a compaction's output tables by size, not at
// prefixes: a table ending with new keys of one prefix and starting the
// new keys of the next covers everything stored between them in deeper
// levels, and compacting it down rewrites all of that. Older builds kept
// event records under "ev:", after the tenant index "et:" (and the
// random dedupe keys): nearly every such compaction rewrote every stored
// event (docs/benchmarks.md, "Key order"). Here, only small index keys lie in
// such gaps.
var (
	// ae:<evt>                      → event (binary record, with the raw body)
	prefixEvent = []byte("ae:")
	// ap:<evt>\0<n>                 → part n of an event record too big
	// to stay in the LSM tree whole (events.go); n is 4 bytes big-endian
	prefixEventPart = []byte("ap:")
	// ev:<evt>: event records written by older builds, read where they
	// are until retention purges them (events.go)
	legacyPrefixEvent = []byte("ev:")
	// et:<tenant>\0<evt>            → "" (events of a tenant, for scoped listing)
	prefixTenantEvent = []byte("et:")
	// dd:<tenant>\0<source>\0<id>   → dedupeRecord, with a Badger TTL
	prefixDedupe = []byte("dd:")
	// dl:<dlv>                      → delivery (JSON)
	prefixDelivery = []byte("dl:")
	// de:<evt>\0<dlv>               → "" (deliveries of an event)
	prefixEventDelivery = []byte("de:")
	// dp:<endpoint>\0<dlv>          → "" (deliveries of an endpoint)
	prefixEndpointDelivery = []byte("dp:")
	// dt:<tenant>\0<dlv>            → "" (deliveries of a tenant, for scoped
	// listing; built for older stores at open: tenantindex.go)
	prefixTenantDelivery = []byte("dt:")
	// dq:<endpoint>\0<due>\0<dlv>   → "" (the outbox: one entry per live
	// delivery, at its next attempt or, while claimed, at its lease expiry;
	// due is 8 bytes big-endian Unix nanoseconds)
	prefixQueue = []byte("dq:")
	// at:<dlv>\0<n>                 → attempt (JSON); n is 4 bytes big-endian
	prefixAttempt = []byte("at:")
	// ep:<endpoint>                 → endpoint (JSON)
	prefixEndpoint = []byte("ep:")
	// sr:<source>                   → source (JSON)
	prefixSource = []byte("sr:")
	// ik:<tenant>\0<key>            → idemRecord (admin Idempotency-Key), with a TTL
	prefixIdem = []byte("ik:")
	// eh:<endpoint>                 → endpointHold (JSON): a receiver's
	// Retry-After pause, with a TTL
	prefixEndpointHold = []byte("eh:")
	// rp:<rpl>                      → replay job (JSON)
	prefixReplay = []byte("rp:")
	// zz:ping                       → last Ping write
	keyPing = []byte("zz:ping")
)

const sep = 0x00

func key(prefix []byte, parts ...string) []byte {
	n := len(prefix)
	for _, p := range parts {
		n += len(p) + 1
	}
	k := make([]byte, 0, n)
	k = append(k, prefix...)
	for i, p := range parts {
		if i > 0 {
			k = append(k, sep)
		}
		k = append(k, p...)
	}
	return k
}

func eventKey(id string) []byte { return key(prefixEvent, id) }
func eventPartKey(id string, n int) []byte {
	return binary.BigEndian.AppendUint32(append(key(prefixEventPart, id), sep), uint32(n))
}
func tenantEventKey(tenant, id string) []byte { return key(prefixTenantEvent, tenant, id) }
func dedupeKey(tenant, source, id string) []byte {
	return key(prefixDedupe, tenant, source, id)
}
func deliveryKey(id string) []byte                { return key(prefixDelivery, id) }
func eventDeliveryKey(evt, dlv string) []byte     { return key(prefixEventDelivery, evt, dlv) }
func endpointDeliveryKey(ep, dlv string) []byte   { return key(prefixEndpointDelivery, ep, dlv) }
func tenantDeliveryKey(tenant, dlv string) []byte { return key(prefixTenantDelivery, tenant, dlv) }
func endpointKey(id string) []byte                { return key(prefixEndpoint, id) }
func sourceKey(id string) []byte                  { return key(prefixSource, id) }
func idemKey(tenant, k string) []byte             { return key(prefixIdem, tenant, k) }
func replayKey(id string) []byte                  { return key(prefixReplay, id) }
func endpointHoldKey(id string) []byte            { return key(prefixEndpointHold, id) }

// queuePrefix is the outbox of one endpoint: dq:<endpoint>\0.
func queuePrefix(endpoint string) []byte {
	k := key(prefixQueue, endpoint)
	return append(k, sep)
}

// queueKey is the outbox entry of a delivery due at t.
func queueKey(endpoint string, t time.Time, dlv string) []byte {
	k := queuePrefix(endpoint)
	k = binary.BigEndian.AppendUint64(k, uint64(dueNanos(t)))
	k = append(k, sep)
	return append(k, dlv...)
}

// parseQueueKey returns the due time and delivery ID of an outbox key
// under prefix p.
func parseQueueKey(p, k []byte) (time.Time, string, bool) {
	rest := k[len(p):]
	if len(rest) < 10 || rest[8] != sep {
		return time.Time{}, "", false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(rest[:8]))), string(rest[9:]), true
}

// queueSeek is the first outbox key of endpoint due at or after the Unix
// nanosecond from (a floor).
func queueSeek(endpoint string, from int64) []byte {
	return binary.BigEndian.AppendUint64(queuePrefix(endpoint), uint64(from))
}

// attemptKey is attempt n of a delivery.
func attemptKey(dlv string, n int) []byte {
	k := key(prefixAttempt, dlv)
	k = append(k, sep)
	return binary.BigEndian.AppendUint32(k, uint32(n))
}
