-- Stream order and the expected-version check in one place (trigger
-- events_advance_stream_version, BEFORE INSERT of every versioned event): moves the stream's head
-- in highwater.stream_versions to this event's version, refusing a version that is not above the
-- head (two writers appending the same version: the second waits on the head row for the first
-- to commit, then is refused, exactly as the unique index of 20261130000001 did), and raises the
-- event's tx_id to its predecessor's. highwater.append computes the raised tx_id itself before
-- inserting, so the row is routed to the right partition; for a direct INSERT whose raised tx_id
-- would cross into another partition PostgreSQL refuses the insert ("moving row to another
-- partition during a BEFORE FOR EACH ROW trigger is not supported") rather than misorder it.
--
-- Why the tx_id is raised (20261130000003_stream_order.sql, whose trigger this replaced):
-- readers deliver in (tx_id, id) order, and tx_id is the writer's transaction id, assigned when
-- the transaction first writes, not when it commits. A transaction that took its id early (it
-- wrote business rows first) and appends version N+1 after a later-numbered transaction committed
-- version N would give N+1 the smaller tx_id: delivered before N. So a versioned event takes the
-- larger of its own transaction id and its predecessor's. That never lets a reader pass it early:
-- its tx_id is still at least its own running transaction's id, which holds the fence below it
-- until it commits; and the predecessor, committed and visible to this transaction, has the
-- smaller id, so (tx_id, id) puts version N first.
--
-- No SET clause, for the same reason and with the same qualification as highwater.append
-- (append.sql, point 1; it is SECURITY DEFINER too): it runs once per versioned event.
-- History: 20261201000020_partitioned_events.sql, without SET clause since 20261201000030.
CREATE OR REPLACE FUNCTION highwater.advance_stream_version() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
AS $$
DECLARE
    v_tx      pg_catalog.xid8;
    v_current bigint;
BEGIN
    INSERT INTO highwater.stream_versions AS s (stream_type, stream_id, version, tx_id)
    VALUES (NEW.stream_type, NEW.stream_id, NEW.stream_version, NEW.tx_id)
    ON CONFLICT (stream_type, stream_id) DO UPDATE
       SET version = excluded.version, tx_id = greatest(s.tx_id, excluded.tx_id)
     WHERE s.version OPERATOR(pg_catalog.<) excluded.version
    RETURNING s.tx_id INTO v_tx;
    IF v_tx IS NULL THEN
        SELECT s.version INTO v_current FROM highwater.stream_versions s
         WHERE s.stream_type OPERATOR(pg_catalog.=) NEW.stream_type
           AND s.stream_id OPERATOR(pg_catalog.=) NEW.stream_id;
        RAISE EXCEPTION 'stream %/% already has version % (it is at version %)',
            NEW.stream_type, NEW.stream_id, NEW.stream_version, v_current
            USING ERRCODE = 'HW003',
                  HINT = 'another writer appended first: reload the stream and retry';
    END IF;
    IF v_tx OPERATOR(pg_catalog.>) NEW.tx_id THEN
        NEW.tx_id := v_tx;
    END IF;
    RETURN NEW;
END
$$;
