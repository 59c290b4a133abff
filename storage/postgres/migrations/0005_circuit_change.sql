-- What the latest outcome counted for an endpoint's circuit changed:
-- 1 it opened the circuit from closed, 2 it closed an open one, 0
-- neither. Written with the counts in the outcome's statement, which
-- returns it, so that the operational event of an opened or closed
-- circuit is stored in that same write, once, whichever gateway's
-- outcome made the change.
ALTER TABLE endpoint_gates ADD COLUMN change smallint NOT NULL DEFAULT 0;
