-- An endpoint's gates as every gateway sees them: the token bucket of its
-- rate_limit and its circuit breaker. A claim reads and updates them under
-- the endpoint's claim lock, and an attempt's outcome counts for the
-- circuit in the outcome's own write, so that they hold across all the
-- gateways together. A row is made by the first gated claim.
CREATE TABLE endpoint_gates (
    endpoint    text   COLLATE "C" PRIMARY KEY,
    -- rate tokens left at refilled (the bucket holds a tenth of a
    -- second's worth, at least one)
    tokens      double precision NOT NULL,
    refilled    bigint NOT NULL,
    -- consecutive failed attempts while the circuit is closed
    failures    int    NOT NULL DEFAULT 0,
    -- NULL: closed; else open until then, half-open after
    open_until  bigint,
    -- the current cool-down (doubles with each failed probe)
    cool        bigint NOT NULL DEFAULT 0,
    -- the half-open probe in flight, and its lease
    probe       text   COLLATE "C",
    probe_until bigint,
    -- the circuit policy of the gateways that claim (their config)
    threshold   int    NOT NULL,
    min_cool    bigint NOT NULL,
    max_cool    bigint NOT NULL
);

-- An endpoint enabled again, moved to another URL or deleted starts
-- afresh: the failures that opened its circuit and the pause its receiver
-- asked for were the old endpoint's.
CREATE FUNCTION reset_endpoint_gates() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was jsonb := convert_from(OLD.doc, 'UTF8')::jsonb;
    now_doc jsonb;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        now_doc := convert_from(NEW.doc, 'UTF8')::jsonb;
        IF NOT ((coalesce((was ->> 'disabled')::bool, false) AND NOT coalesce((now_doc ->> 'disabled')::bool, false))
                OR (was ->> 'url') IS DISTINCT FROM (now_doc ->> 'url')
                OR (was ->> 'created_at') IS DISTINCT FROM (now_doc ->> 'created_at')) THEN
            RETURN NULL;
        END IF;
    END IF;
    DELETE FROM endpoint_gates WHERE endpoint = OLD.id;
    DELETE FROM endpoint_holds WHERE endpoint = OLD.id;
    RETURN NULL;
END $$;

CREATE TRIGGER endpoints_reset_gates AFTER UPDATE OR DELETE ON endpoints
    FOR EACH ROW EXECUTE FUNCTION reset_endpoint_gates();
