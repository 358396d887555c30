-- What `events prune` (or any delete) removed, per event type, in highwater.pruned: a rebuild
-- that would replay from the log refuses when events of its types are gone.
-- Since 20261201000010_read_your_writes.sql.
CREATE OR REPLACE FUNCTION highwater.record_pruned() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO highwater.pruned AS p (event_type, events, newest_id)
    SELECT o.event_type, count(*), max(o.id) FROM old_rows o GROUP BY o.event_type
    ON CONFLICT (event_type) DO UPDATE
        SET events = p.events + EXCLUDED.events,
            newest_id = greatest(p.newest_id, EXCLUDED.newest_id),
            last_pruned_at = now();
    RETURN NULL;
END
$$;
