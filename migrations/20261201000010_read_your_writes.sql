-- Read-your-writes: the position token of a writing transaction and "has consumer C applied
-- everything up to this token?" (docs/read-your-writes.md).
--
-- A token is an xid8 T and covers every event whose stamped tx_id is <= T. Stamped tx_ids are
-- only ever raised (stream order, 20261130000003), never lowered, so an event stamped <= T was
-- written by a transaction whose own id is <= T: once the snapshot fence is past T, the set of
-- events a token covers is final.

-- The largest raised tx_id this transaction stamped on an event, in a transaction-local setting
-- (a rolled-back savepoint restores it with its rows). Fires only for raised events: the others
-- carry the transaction's own id, which highwater.token() reads directly.
CREATE FUNCTION highwater.remember_raised_tx_id() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.tx_id > coalesce(nullif(current_setting('highwater.raised_tx_id', true), '')::xid8, '0'::xid8) THEN
        PERFORM set_config('highwater.raised_tx_id', NEW.tx_id::text, true);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_remember_raised_tx_id
    AFTER INSERT ON highwater.events
    FOR EACH ROW WHEN (NEW.tx_id > pg_current_xact_id())
    EXECUTE FUNCTION highwater.remember_raised_tx_id();

-- The calling transaction's token: the largest tx_id stamped on an event it wrote (its own id,
-- or a raised one). Call it after the last append, before or after commit of nothing else.
-- Without a transaction id (nothing written yet in this transaction) the token covers every
-- transaction that committed before this statement: the snapshot's xmax - 1; a transaction that
-- commits later has a larger id. Assigns no transaction id.
CREATE FUNCTION highwater.token() RETURNS xid8
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN pg_current_xact_id_if_assigned() IS NULL
            THEN ((pg_snapshot_xmax(pg_current_snapshot())::text::numeric - 1)::text)::xid8
        ELSE greatest(pg_current_xact_id_if_assigned(),
                      nullif(current_setting('highwater.raised_tx_id', true), '')::xid8)
    END
$$;

-- highwater.append that also returns the event's position (tx_id, id) and the transaction's token
-- so far (which covers this event and every earlier one of the transaction).
CREATE FUNCTION highwater.append_position(
    p_stream_type      text,
    p_stream_id        text,
    p_event_type       text,
    p_payload          jsonb,
    p_metadata         jsonb DEFAULT NULL,
    p_tenant_id        text DEFAULT NULL,
    p_expected_version bigint DEFAULT NULL,
    OUT id             bigint,
    OUT tx_id          xid8,
    OUT token          xid8
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    id := highwater.append(p_stream_type, p_stream_id, p_event_type, p_payload, p_metadata,
                           p_tenant_id, p_expected_version);
    SELECT e.tx_id INTO tx_id FROM highwater.events e WHERE e.id = append_position.id;
    token := highwater.token();
END
$$;

REVOKE ALL ON FUNCTION highwater.append_position(text, text, text, jsonb, jsonb, text, bigint) FROM PUBLIC;

-- The applied bound of a consumer: every event selected by its types with tx_id below the bound
-- has been applied by every shard that matters (the shared shard; for a PerInstance consumer the
-- named instance, or all of them when p_instance is NULL). Per shard: the fence, lowered to the
-- tx_id of the first selected event beyond the cursor. NULL: no such consumer; '0': no shard
-- yet (nothing applied anywhere: never reported early). STABLE, so every statement inside reads
-- the caller's one snapshot: cursor and fence agree.
CREATE FUNCTION highwater.applied_bound(p_consumer text, p_instance text DEFAULT NULL)
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
    v_first    xid8;
    v_shards   integer := 0;
BEGIN
    SELECT c.event_types, c.delivery = 'Shared' INTO v_types, v_shared
      FROM highwater.consumers c WHERE c.name = p_consumer;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    FOR v_tx, v_id IN
        SELECT s.cursor_tx, s.cursor_id FROM highwater.consumer_shards s
         WHERE s.consumer = p_consumer
           AND CASE WHEN v_shared THEN s.instance_id = '__shared__'
                    ELSE p_instance IS NULL OR s.instance_id = p_instance END
    LOOP
        v_shards := v_shards + 1;
        -- Cursor as variables (bind parameters): an index condition on (tx_id, id).
        SELECT e.tx_id INTO v_first FROM highwater.events e
         WHERE (e.tx_id, e.id) > (v_tx, v_id) AND e.tx_id < v_fence
           AND (cardinality(v_types) = 0 OR e.event_type = ANY (v_types))
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

REVOKE ALL ON FUNCTION highwater.applied_bound(text, text) FROM PUBLIC;

-- True when consumer p_consumer has applied every event it selects of the transactions the token
-- covers (for a SQL sink: committed in the projection). Never early: false while any transaction
-- with an id <= the token is still running, and false while the consumer has no shard yet.
-- Errors: HW010 unknown consumer, HW011 token ahead of the database (restored from a dump, or a
-- token of another database), HW012 bad argument.
CREATE FUNCTION highwater.applied(p_consumer text, p_token xid8, p_instance text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_next   xid8 := pg_snapshot_xmax(pg_current_snapshot());
    v_shared boolean;
    v_bound  xid8;
BEGIN
    IF p_token IS NULL OR p_consumer IS NULL THEN
        RAISE EXCEPTION 'consumer and token must not be NULL'
            USING ERRCODE = 'HW012', HINT = 'pass the consumer''s name and the token highwater.token() returned';
    END IF;
    SELECT c.delivery = 'Shared' INTO v_shared FROM highwater.consumers c WHERE c.name = p_consumer;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no consumer named "%"', p_consumer
            USING ERRCODE = 'HW010', HINT = '`highwater consumer list` shows the consumers';
    END IF;
    IF v_shared AND p_instance IS NOT NULL THEN
        RAISE EXCEPTION 'consumer "%" is Shared: it has one shard, not one per instance', p_consumer
            USING ERRCODE = 'HW012', HINT = 'leave the instance out (NULL)';
    END IF;
    IF p_token >= v_next THEN
        RAISE EXCEPTION 'token % is ahead of this database''s next transaction id %', p_token, v_next
            USING ERRCODE = 'HW011',
                  HINT = 'a token is valid only in the database that issued it; after a restore from '
                         'a logical dump transaction ids restart: take a new token (highwater.token()) '
                         'after writing';
    END IF;
    v_bound := highwater.applied_bound(p_consumer, p_instance);
    RETURN p_token < v_bound;
END
$$;

REVOKE ALL ON FUNCTION highwater.applied(text, xid8, text) FROM PUBLIC;

-- Wake-up hint for waiters (highwater.applied): a cursor moved or a shard appeared. The payload
-- is the consumer's name; a transaction that moves several shards of one consumer sends one.
CREATE FUNCTION highwater.notify_applied() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('highwater_applied', NEW.consumer);
    RETURN NULL;
END
$$;

CREATE TRIGGER consumer_shards_notify_applied_update
    AFTER UPDATE OF cursor_tx, cursor_id ON highwater.consumer_shards
    FOR EACH ROW WHEN (OLD.cursor_tx IS DISTINCT FROM NEW.cursor_tx OR OLD.cursor_id IS DISTINCT FROM NEW.cursor_id)
    EXECUTE FUNCTION highwater.notify_applied();

CREATE TRIGGER consumer_shards_notify_applied_insert
    AFTER INSERT ON highwater.consumer_shards
    FOR EACH ROW EXECUTE FUNCTION highwater.notify_applied();

-- Rebuilds and bootstraps of read models (docs/read-your-writes.md).
ALTER TABLE highwater.consumer_shards
    -- A rebuild in progress: when it started, delivered_count then, how many events it replays
    -- and where it is complete (the head when it started).
    ADD COLUMN rebuild_started_at timestamptz,
    ADD COLUMN rebuild_base       bigint,
    ADD COLUMN rebuild_total      bigint,
    ADD COLUMN rebuild_target_tx  xid8,
    ADD COLUMN rebuild_target_id  bigint,
    -- The bootstrap has not run yet: the shard is disabled until it has.
    ADD COLUMN bootstrap_pending  boolean NOT NULL DEFAULT false,
    -- The snapshot the bootstrap read the application's tables in, and the ids of the events at or
    -- above its xmin that it saw: those the read model already holds, never delivered. Visibility
    -- is the writer's, not the stamped tx_id's: the list is what the snapshot itself returned.
    -- Events below its xmin were all visible to it (a stamped tx_id is never below its writer's
    -- own id), events stamped at or above its xmax none (a raise copies the id of a transaction
    -- that committed before the writer appended), so the list holds only the window between.
    ADD COLUMN bootstrap_snapshot pg_snapshot,
    ADD COLUMN bootstrap_seen     bigint[] NOT NULL DEFAULT '{}';

-- What `events prune` (or any delete) removed, per event type: a rebuild that would replay from
-- the log refuses when events of its types are gone.
CREATE TABLE highwater.pruned (
    event_type     text PRIMARY KEY,
    events         bigint NOT NULL,
    newest_id      bigint NOT NULL,
    last_pruned_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION highwater.record_pruned() RETURNS trigger
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

CREATE TRIGGER events_record_pruned
    AFTER DELETE ON highwater.events
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION highwater.record_pruned();
