-- Moves a Shared consumer towards its target split (consumers.partitions). Idempotent; called
-- when a definition is applied and by the dispatchers (at each reload, and when a shard reaches
-- its barrier). Returns:
--   'none'     the shards carry the target split (or there are none yet: registration creates it);
--   'pending'  a barrier is set; the old split's shards deliver up to it;
--   'switched' every old shard stood at the barrier: they were replaced by the new split, each
--              new shard starting at the barrier. Nothing before it is delivered again, nothing
--              after it was delivered by the old split.
-- With p_refuse_dead (an apply), a change while a shard is dead raises HW020: the dead shard could
-- never reach the barrier. Serialised per consumer by the consumer row's lock.
-- Since 20261201000040_partitioned_consumers.sql.
CREATE OR REPLACE FUNCTION highwater.repartition(p_consumer text, p_refuse_dead boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_target    integer;
    v_suspended boolean;
    v_count     integer;
    v_current   integer;
    v_dead      text;
    v_tx        xid8;
    v_id        bigint;
    v_waiting   integer;
BEGIN
    SELECT c.partitions, c.suspended INTO v_target, v_suspended
      FROM highwater.consumers c WHERE c.name = p_consumer AND c.delivery = 'Shared' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'none';
    END IF;
    -- Lock the split's rows: a cursor update that commits before this counts in the barrier; one
    -- that waits for this lock re-checks the barrier written below.
    PERFORM 1 FROM highwater.consumer_shards s
      WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id) FOR UPDATE;
    SELECT count(*), max(coalesce(s.partition_count, 1)) INTO v_count, v_current
      FROM highwater.consumer_shards s
     WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id);
    IF v_count = 0 THEN
        RETURN 'none';
    END IF;
    IF v_current = v_target THEN
        -- N went back to the split in force before the switch: the barrier is lifted.
        UPDATE highwater.consumer_shards s SET barrier_tx = NULL, barrier_id = NULL, updated_at = now()
         WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id) AND s.barrier_tx IS NOT NULL;
        RETURN 'none';
    END IF;
    SELECT string_agg(format('%s (dead at event %s: %s)', s.instance_id, s.failing_event_id,
                             left(coalesce(s.last_error, ''), 200)), ', ' ORDER BY s.instance_id)
      INTO v_dead
      FROM highwater.consumer_shards s
     WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id) AND s.status = 'dead';
    IF v_dead IS NOT NULL AND p_refuse_dead THEN
        RAISE EXCEPTION 'consumer "%": partitions cannot change from % to % while a partition is dead: %',
                        p_consumer, v_current, v_target, v_dead
            USING ERRCODE = 'HW020',
                  HINT = format('resolve it first (`highwater consumer restart %s --instance ID` after fixing '
                                'the sink, or `highwater consumer skip %s --instance ID`), then apply again',
                                p_consumer, p_consumer);
    END IF;
    -- The barrier: the furthest cursor of the old split (kept if already set: no cursor passed it).
    SELECT s.barrier_tx, s.barrier_id INTO v_tx, v_id
      FROM highwater.consumer_shards s
     WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id) AND s.barrier_tx IS NOT NULL
     LIMIT 1;
    IF v_tx IS NULL THEN
        SELECT s.cursor_tx, s.cursor_id INTO v_tx, v_id
          FROM highwater.consumer_shards s
         WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id)
         ORDER BY s.cursor_tx DESC, s.cursor_id DESC LIMIT 1;
        UPDATE highwater.consumer_shards s SET barrier_tx = v_tx, barrier_id = v_id, updated_at = now()
         WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id);
    END IF;
    SELECT count(*) INTO v_waiting
      FROM highwater.consumer_shards s
     WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id)
       AND (s.cursor_tx, s.cursor_id) <> (v_tx, v_id);
    IF v_waiting > 0 THEN
        RETURN 'pending';
    END IF;
    DELETE FROM highwater.consumer_shards s
     WHERE s.consumer = p_consumer AND highwater.is_shared_shard(s.instance_id);
    INSERT INTO highwater.consumer_shards
           (consumer, instance_id, partition_index, partition_count, cursor_tx, cursor_id, status, heartbeat_at)
    SELECT p_consumer, highwater.partition_instance(g, v_target),
           CASE WHEN v_target > 1 THEN g END, CASE WHEN v_target > 1 THEN v_target END,
           v_tx, v_id, CASE WHEN v_suspended THEN 'disabled' ELSE 'idle' END, now()
      FROM generate_series(0, v_target - 1) g;
    PERFORM pg_notify('highwater_control', p_consumer);
    RETURN 'switched';
END
$$;

REVOKE ALL ON FUNCTION highwater.repartition(text, boolean) FROM PUBLIC;
