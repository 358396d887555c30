-- Partitioned shared consumers (docs/consumers.md, "Partitions"): a Shared consumer with
-- `partitions: N` > 1 has N shards, `__shared__/p<i>of<N>`, each delivering the events whose
-- stream hashes to partition i, with its own cursor. One stream's events land in one partition,
-- so per-stream order holds while N dispatchers deliver in parallel.

-- The target split, from the spec. The split in force is the one the shard rows carry: the two
-- differ while a change of N waits at its barrier.
ALTER TABLE highwater.consumers
    ADD COLUMN partitions integer NOT NULL DEFAULT 1 CHECK (partitions BETWEEN 1 AND 256);

ALTER TABLE highwater.consumer_shards
    ADD COLUMN partition_index integer,
    ADD COLUMN partition_count integer,
    -- While N changes: the position every shard of the old split delivers up to, and no further.
    -- On the shard row itself, so that a cursor update racing with the change re-checks it (an
    -- UPDATE blocked by the change's row lock re-evaluates its WHERE on the new row version).
    ADD COLUMN barrier_tx xid8,
    ADD COLUMN barrier_id bigint,
    ADD CONSTRAINT consumer_shards_partition CHECK (
        (partition_index IS NULL AND partition_count IS NULL)
        OR (partition_count BETWEEN 2 AND 256 AND partition_index >= 0 AND partition_index < partition_count)),
    ADD CONSTRAINT consumer_shards_barrier CHECK ((barrier_tx IS NULL) = (barrier_id IS NULL));

-- The partition of a stream among n. Stable across versions and processes (hashtextextended with
-- seed 0 is part of PostgreSQL's on-disk hash partitioning contract); the unit separator keeps
-- ('a', 'b/c') and ('a/b', 'c') apart. Computed when read rather than stored: no table rewrite
-- on upgrade and no cost on append; a partition's read filters the events of the others (it
-- reads N× the rows of its batch, docs/benchmarks.md "Partitioned consumers").
CREATE FUNCTION highwater.stream_partition(p_stream_type text, p_stream_id text, p_partitions integer)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ((hashtextextended(p_stream_type || E'\x1f' || p_stream_id, 0) & 9223372036854775807)
        % greatest(p_partitions, 1))::integer;

CREATE FUNCTION highwater.partition_instance(p_index integer, p_count integer)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN p_count <= 1 THEN '__shared__' ELSE format('__shared__/p%sof%s', p_index, p_count) END;

-- A shard of a Shared consumer (partitioned or not), as opposed to a PerInstance shard.
CREATE FUNCTION highwater.is_shared_shard(p_instance text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN p_instance = '__shared__' OR starts_with(p_instance, '__shared__/');

-- events_after for a partition and, while N changes, up to the barrier (NULL: none). Shards
-- with neither keep reading with events_after and its plan (shards::load_and_read picks).
-- STABLE: it reads the caller's snapshot.
CREATE FUNCTION highwater.shard_events_after(p_tx xid8, p_id bigint, p_types text[], p_limit bigint,
                                             p_skip bigint[], p_part integer, p_parts integer,
                                             p_until_tx xid8, p_until_id bigint)
RETURNS SETOF highwater.events
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_limit <= 0 OR (p_until_tx IS NOT NULL AND (p_tx, p_id) >= (p_until_tx, p_until_id)) THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT * FROM highwater.events e
     WHERE (e.tx_id, e.id) > (p_tx, p_id)
       AND e.tx_id >= p_tx
       AND e.tx_id < pg_snapshot_xmin(pg_current_snapshot())
       AND (p_until_tx IS NULL OR (e.tx_id <= p_until_tx AND (e.tx_id, e.id) <= (p_until_tx, p_until_id)))
       AND (cardinality(p_types) = 0 OR e.event_type = ANY (p_types))
       AND (p_parts IS NULL OR highwater.stream_partition(e.stream_type, e.stream_id, p_parts) = p_part)
       AND NOT (e.id = ANY (p_skip))
     ORDER BY e.tx_id, e.id
     LIMIT p_limit;
END
$$;

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
CREATE FUNCTION highwater.repartition(p_consumer text, p_refuse_dead boolean DEFAULT false)
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

-- Live dispatchers per group, for sharing partitions fairly: each dispatcher refreshes its row
-- every second or so and deletes it when it stops; a row older than a few refreshes is a
-- dispatcher that went away (killed), whose partitions the others take over.
CREATE TABLE highwater.dispatchers (
    instance_id    text PRIMARY KEY CHECK (instance_id <> ''),
    consumer_group text NOT NULL,
    started_at     timestamptz NOT NULL DEFAULT now(),
    heartbeat_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX dispatchers_group ON highwater.dispatchers (consumer_group, heartbeat_at);

-- applied_bound with partitions: each partition shard counts only its own events.
CREATE OR REPLACE FUNCTION highwater.applied_bound(p_consumer text, p_instance text DEFAULT NULL)
RETURNS xid8
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_fence    xid8 := pg_snapshot_xmin(pg_current_snapshot());
    v_bound    xid8 := pg_snapshot_xmin(pg_current_snapshot());
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
        SELECT e.tx_id INTO v_first FROM highwater.events e
         WHERE (e.tx_id, e.id) > (v_tx, v_id) AND e.tx_id >= v_tx AND e.tx_id < v_fence
           AND (cardinality(v_types) = 0 OR e.event_type = ANY (v_types))
           AND (v_parts IS NULL OR highwater.stream_partition(e.stream_type, e.stream_id, v_parts) = v_part)
         ORDER BY e.tx_id, e.id LIMIT 1;
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
