-- Writers send NOTIFY highwater_events only while some dispatcher sleeps waiting for one: each
-- dispatcher says here when it sleeps (a row whose lease runs), and the trigger notifies only
-- then. Why, and why no event waits on it: migrations/definitions/notify_events.sql (the trigger's
-- function, applied after the ordered migrations) and docs/delivery.md, "Wake-ups and polling".
CREATE TABLE highwater.sleepers (
    instance_id text PRIMARY KEY,
    asleep_until timestamptz NOT NULL
);

-- Whoever inserts into highwater.events runs the trigger with its own rights.
GRANT SELECT ON highwater.sleepers TO PUBLIC;
