-- The SQL sink applies a batch and moves the cursor in one statement, sent with its settings as
-- one simple query: one round trip, one implicit transaction, no BEGIN or COMMIT of its own
-- (issue 14). When every event applied but the cursor move was refused (an operator's command
-- or a deletion changed the shard while the batch ran), that statement must fail, or the
-- implicit transaction would commit the batch without the move: it calls this, which raises.
-- The dispatcher reads the SQLSTATE as "the shard changed" (nothing applied, read the shard
-- again, no backoff). Since 20261202000020_sql_sink_refused.sql.
--
-- SQLSTATE `ZH001`, in class `ZH`, which highwater reserves for its signals to its own
-- dispatcher (docs/schema.md): no other highwater function raises it, and no error of user data
-- is one. It was `HW001` until issue 44, the code `highwater.append` raises for an unknown event
-- type: a consumer's deferred trigger appending an unregistered type failed the COMMIT with it,
-- and the dispatcher took that for a refusal, retrying every poll interval, silently, forever.
-- A user's code could still raise `ZH001` on purpose, so the dispatcher also checks where it
-- came from: a refusal is this statement's error, before the move's row; the only user code
-- whose error leaves the sink's query runs later, at the implicit COMMIT (deferred triggers),
-- after the move's row was sent (engine/src/sink/sql.rs).
CREATE OR REPLACE FUNCTION highwater.sql_sink_refused() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RAISE EXCEPTION 'highwater: the shard changed while its batch ran (an operator''s command or a deletion); nothing of the batch was applied'
        USING ERRCODE = 'ZH001';
END
$$;
