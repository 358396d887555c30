-- events_after for a partition and, while N changes, up to the barrier (NULL: none). Shards
-- with neither keep reading with events_after and its plan (shards::load_and_read picks).
-- STABLE: it reads the caller's snapshot. Planned generically for the reason events_after is
-- (events_after.sql; 20261202000000_generic_batch_plans.sql).
-- A consumer of one to four types reads them from the index on (event_type, tx_id, id), as
-- events_after does and for its reasons (20261204000100_type_index.sql).
-- Since 20261201000040_partitioned_consumers.sql.
CREATE OR REPLACE FUNCTION highwater.shard_events_after(p_tx xid8, p_id bigint, p_types text[], p_limit bigint,
                                                        p_skip bigint[], p_part integer, p_parts integer,
                                                        p_until_tx xid8, p_until_id bigint)
RETURNS SETOF highwater.events
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF p_limit <= 0 OR (p_until_tx IS NOT NULL AND (p_tx, p_id) >= (p_until_tx, p_until_id)) THEN
        RETURN;
    END IF;
    IF cardinality(p_types) BETWEEN 1 AND 4 THEN
        RETURN QUERY
        SELECT e.* FROM (SELECT DISTINCT u.t FROM unnest(p_types) u(t)) t
         CROSS JOIN LATERAL (
            SELECT * FROM highwater.events e
             WHERE e.event_type = t.t
               AND (e.tx_id, e.id) > (p_tx, p_id)
               AND e.tx_id >= p_tx
               AND e.tx_id < highwater.fence()
               AND (p_until_tx IS NULL OR (e.tx_id <= p_until_tx AND (e.tx_id, e.id) <= (p_until_tx, p_until_id)))
               AND (p_parts IS NULL OR highwater.stream_partition(e.stream_type, e.stream_id, p_parts) = p_part)
               AND NOT (e.id = ANY (p_skip))
             ORDER BY e.tx_id, e.id
             LIMIT p_limit) e
         ORDER BY e.tx_id, e.id
         LIMIT p_limit;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT * FROM highwater.events e
     WHERE (e.tx_id, e.id) > (p_tx, p_id)
       AND e.tx_id >= p_tx
       AND e.tx_id < highwater.fence()
       AND (p_until_tx IS NULL OR (e.tx_id <= p_until_tx AND (e.tx_id, e.id) <= (p_until_tx, p_until_id)))
       AND (cardinality(p_types) = 0 OR e.event_type = ANY (p_types))
       AND (p_parts IS NULL OR highwater.stream_partition(e.stream_type, e.stream_id, p_parts) = p_part)
       AND NOT (e.id = ANY (p_skip))
     ORDER BY e.tx_id, e.id
     LIMIT p_limit;
END
$$;
