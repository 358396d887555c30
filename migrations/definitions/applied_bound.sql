-- The applied bound of a consumer: every event selected by its types with tx_id below the bound
-- has been applied by every shard that matters (the shared shards; for a PerInstance consumer the
-- named instance, or all of them when p_instance is NULL). Per shard: the fence, lowered to the
-- tx_id of the first selected event beyond the cursor; each partition shard of a partitioned
-- Shared consumer counts only its own events. NULL: no such consumer; '0': no shard yet (nothing
-- applied anywhere: never reported early). STABLE, so every statement inside reads the caller's
-- one snapshot: cursor and fence agree. The cursor is read into variables (bind parameters): an
-- index condition on (tx_id, id).
-- A consumer of one type looks in the index on (event_type, tx_id, id) (20261204000100_type_index.sql):
-- the walk of (tx_id, id) passes every other type's event after a lagging cursor.
-- History: 20261201000010_read_your_writes.sql, partitions in 20261201000040_partitioned_consumers.sql.
CREATE OR REPLACE FUNCTION highwater.applied_bound(p_consumer text, p_instance text DEFAULT NULL)
RETURNS xid8
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_fence    xid8 := highwater.fence();
    v_bound    xid8 := highwater.fence();
    v_types    text[];
    v_shared   boolean;
    v_tx       xid8;
    v_id       bigint;
    v_part     integer;
    v_parts    integer;
    v_first    xid8;
    v_shards   integer := 0;
BEGIN
    SELECT c.event_types, c.delivery = 'Shared' INTO v_types, v_shared
      FROM highwater.consumers c WHERE c.name = p_consumer;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    FOR v_tx, v_id, v_part, v_parts IN
        SELECT s.cursor_tx, s.cursor_id, s.partition_index, s.partition_count
          FROM highwater.consumer_shards s
         WHERE s.consumer = p_consumer
           AND CASE WHEN v_shared THEN highwater.is_shared_shard(s.instance_id)
                    ELSE p_instance IS NULL OR s.instance_id = p_instance END
    LOOP
        v_shards := v_shards + 1;
        IF cardinality(v_types) = 1 THEN
            SELECT e.tx_id INTO v_first FROM highwater.events e
             WHERE e.event_type = v_types[1]
               AND (e.tx_id, e.id) > (v_tx, v_id) AND e.tx_id >= v_tx AND e.tx_id < v_fence
               AND (v_parts IS NULL OR highwater.stream_partition(e.stream_type, e.stream_id, v_parts) = v_part)
             ORDER BY e.tx_id, e.id LIMIT 1;
        ELSE
            SELECT e.tx_id INTO v_first FROM highwater.events e
             WHERE (e.tx_id, e.id) > (v_tx, v_id) AND e.tx_id >= v_tx AND e.tx_id < v_fence
               AND (cardinality(v_types) = 0 OR e.event_type = ANY (v_types))
               AND (v_parts IS NULL OR highwater.stream_partition(e.stream_type, e.stream_id, v_parts) = v_part)
             ORDER BY e.tx_id, e.id LIMIT 1;
        END IF;
        IF FOUND AND v_first < v_bound THEN
            v_bound := v_first;
        END IF;
    END LOOP;
    IF v_shards = 0 THEN
        RETURN '0'::xid8;
    END IF;
    RETURN v_bound;
END
$$;

REVOKE ALL ON FUNCTION highwater.applied_bound(text, text) FROM PUBLIC;
