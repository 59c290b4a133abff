-- hookgate schema, version 1.
--
-- Times are bigint Unix nanoseconds (NULL = the zero time), clamped to
-- the int64 range as the embedded engine clamps them: timestamptz keeps
-- only microseconds, and leases and dedupe windows are compared to the
-- nanosecond. Text that comes from outside (provider event IDs, types,
-- headers, bodies, errors) is bytea: text refuses NUL and invalid UTF-8.
-- Ids the gateway makes are text with the "C" collation, so that they
-- sort as Go compares strings.

-- One row per inbound event ID (the dedupe claim): the unique key is the
-- claim, the stored answer its replay.
CREATE TABLE dedupe (
    tenant    bytea  NOT NULL,
    source    bytea  NOT NULL,
    event_id  bytea  NOT NULL,
    body_hash bytea  NOT NULL,
    status    int    NOT NULL,
    response  bytea  NOT NULL,
    expires   bigint NOT NULL,
    event     text   COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant, source, event_id)
);
CREATE INDEX dedupe_expires ON dedupe (expires);

CREATE TABLE events (
    id              text   COLLATE "C" PRIMARY KEY,
    tenant          text   COLLATE "C" NOT NULL,
    source          text   COLLATE "C" NOT NULL,
    event_id        bytea  NOT NULL,
    type            bytea  NOT NULL,
    received_at     bigint NOT NULL,
    content_type    bytea  NOT NULL,
    header_names    bytea[] NOT NULL,
    header_values   bytea[] NOT NULL,
    body            bytea  NOT NULL,
    idempotency_key text   COLLATE "C" NOT NULL,
    -- weight is what the event counts against a listing's page bytes.
    weight          bigint NOT NULL
);
CREATE INDEX events_tenant ON events (tenant, id);
CREATE INDEX events_received ON events (received_at, id);

-- The outbox. due is where a live delivery sits in its endpoint's queue
-- (its next attempt while pending, its lease while delivering) and NULL
-- once it is final.
CREATE TABLE deliveries (
    id              text   COLLATE "C" PRIMARY KEY,
    event           text   COLLATE "C" NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    tenant          text   COLLATE "C" NOT NULL,
    endpoint        text   COLLATE "C" NOT NULL,
    idempotency_key text   COLLATE "C" NOT NULL,
    state           text   NOT NULL,
    attempt_count   int    NOT NULL,
    created_at      bigint,
    next_attempt_at bigint,
    lease_until     bigint,
    retry_from      bigint,
    retry_base      int    NOT NULL,
    backoff         bigint NOT NULL,
    last_error      bytea  NOT NULL,
    last_status     int    NOT NULL,
    updated_at      bigint,
    due             bigint
);
CREATE INDEX deliveries_queue ON deliveries (endpoint, due, id) WHERE due IS NOT NULL;
CREATE INDEX deliveries_event ON deliveries (event, id);
CREATE INDEX deliveries_tenant ON deliveries (tenant, id);
CREATE INDEX deliveries_endpoint ON deliveries (endpoint, id);

CREATE TABLE attempts (
    delivery text COLLATE "C" NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    n        int   NOT NULL,
    doc      bytea NOT NULL,
    PRIMARY KEY (delivery, n)
);

-- A receiver's latest pause (Retry-After), per endpoint.
CREATE TABLE endpoint_holds (
    endpoint text   COLLATE "C" PRIMARY KEY,
    until    bigint NOT NULL,
    url      text   NOT NULL
);

CREATE TABLE endpoints (
    id  text  COLLATE "C" PRIMARY KEY,
    doc bytea NOT NULL
);

CREATE TABLE sources (
    id  text  COLLATE "C" PRIMARY KEY,
    doc bytea NOT NULL
);

-- Admin Idempotency-Keys: claimed under a lease, then done with the
-- stored answer until expires.
CREATE TABLE idem_keys (
    tenant   bytea  NOT NULL,
    key      bytea  NOT NULL,
    hash     bytea  NOT NULL,
    done     bool   NOT NULL,
    lease    bigint,
    status   int    NOT NULL,
    response bytea  NOT NULL,
    expires  bigint,
    since    bigint,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX idem_keys_expires ON idem_keys (expires);

CREATE TABLE replays (
    id         text   COLLATE "C" PRIMARY KEY,
    state      text   NOT NULL,
    updated_at bigint,
    doc        bytea  NOT NULL
);

-- Written by Ping: a store that takes this write takes the others.
CREATE TABLE heartbeat (
    id int PRIMARY KEY,
    at bigint NOT NULL
);
