-- Read-your-writes (docs/read-your-writes.md): the position token of a writing transaction.
--
-- A token is an xid8 T and covers every event whose stamped tx_id is <= T. Stamped tx_ids are
-- only ever raised (stream order, advance_stream_version.sql), never lowered, so an event stamped
-- <= T was written by a transaction whose own id is <= T: once the snapshot fence is past T, the
-- set of events a token covers is final.
--
-- The calling transaction's token: the largest tx_id stamped on an event it wrote (its own id,
-- or a raised one, which the trigger events_remember_raised_tx_id keeps in a setting). Call it
-- after the last append, before or after commit of nothing else.
-- Without a transaction id (nothing written yet in this transaction) the token covers every
-- transaction that committed before this statement: the snapshot's xmax - 1; a transaction that
-- commits later has a larger id. Assigns no transaction id.
-- Since 20261201000010_read_your_writes.sql.
CREATE OR REPLACE FUNCTION highwater.token() RETURNS xid8
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
