-- A listing filtered by the provider's event ID (GET /events?event_id=)
-- finds its events through this index, newest first, whatever the tenant
-- and source.
CREATE INDEX events_event_id ON events (event_id, id);
