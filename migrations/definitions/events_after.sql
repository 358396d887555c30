-- The events after a cursor, below the fence, in delivery order: what a dispatcher's pass reads
-- when its cursor comes from a row of the same statement (shards::load_and_read). Written inline,
-- the cursor is a lateral reference; PostgreSQL then plans the read as parameterised, never
-- considers reading the partitions in order, and sorts every row after the cursor (122 ms per
-- batch of 1,000 over 30 partitions, measured). Here the cursor is a parameter of a query planned
-- by PL/pgSQL: partitions behind the cursor and above the fence are pruned and the rest read in
-- order (0.4 to 1.2 ms). STABLE: it runs in the caller's snapshot, so its fence is the caller's.
--
-- `plan_cache_mode = force_generic_plan` (20261202000000_generic_batch_plans.sql): batch reads
-- keep one plan shape whatever the cursor, the index on (tx_id, id) read in order, stopped after
-- the batch. PL/pgSQL plans a function's statement with the call's values for its first
-- executions (custom plans). The estimate for "events after (tx, id)" comes from the statistics
-- of tx_id, which know nothing of id: when one transaction holds many events (a bulk import) and
-- the cursor is inside it, PostgreSQL estimates a handful of rows, reads every remaining event of
-- that transaction and sorts them to return one batch — 18 ms instead of 0.6 ms per batch of
-- 1,000 with 100,000 events left in the transaction, so a drain of one large transaction grew
-- with its square. The generic plan is the ordered index scan for every cursor; partitions behind
-- the cursor are still pruned at execution. (dispatcher/tests/bulk_transaction.rs)
--
-- A consumer of a few types (issue 38) reads them from the index on (event_type, tx_id, id)
-- (20261204000100_type_index.sql): one type, that index in order, as many rows as the batch; two
-- to four types, the same per type, each stopped after the batch, and the
-- union's first batch in (tx_id, id) order. Walking (tx_id, id) and dropping the other types
-- costs the events after the cursor of every type, so with each consumer selecting a small part
-- of the types the database's work was consumers × events (docs/benchmarks.md, scenario 12).
-- The per-type reads cost up to types × batch rows and a sort of them, hence the cap; beyond
-- it, and for every type, the walk. Same fence, same cursor, same order, so the same events.
-- History: 20261201000020_partitioned_events.sql, the plan setting in 20261202000000, the type
-- paths in 20261204000100.
CREATE OR REPLACE FUNCTION highwater.events_after(p_tx xid8, p_id bigint, p_types text[], p_limit bigint,
                                                  p_skip bigint[] DEFAULT '{}')
RETURNS SETOF highwater.events
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF p_limit <= 0 THEN
        RETURN;
    END IF;
    IF cardinality(p_types) = 1 THEN
        RETURN QUERY
        SELECT * FROM highwater.events e
         WHERE e.event_type = p_types[1]
           AND (e.tx_id, e.id) > (p_tx, p_id)
           AND e.tx_id >= p_tx
           AND e.tx_id < highwater.fence()
           AND NOT (e.id = ANY (p_skip))
         ORDER BY e.tx_id, e.id
         LIMIT p_limit;
        RETURN;
    END IF;
    IF cardinality(p_types) BETWEEN 2 AND 4 THEN
        RETURN QUERY
        SELECT e.* FROM (SELECT DISTINCT u.t FROM unnest(p_types) u(t)) t
         CROSS JOIN LATERAL (
            SELECT * FROM highwater.events e
             WHERE e.event_type = t.t
               AND (e.tx_id, e.id) > (p_tx, p_id)
               AND e.tx_id >= p_tx
               AND e.tx_id < highwater.fence()
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
       AND (cardinality(p_types) = 0 OR e.event_type = ANY (p_types))
       -- Seen by a read model's bootstrap (consumer_shards.bootstrap_seen): passed over.
       AND NOT (e.id = ANY (p_skip))
     ORDER BY e.tx_id, e.id
     LIMIT p_limit;
END
$$;
