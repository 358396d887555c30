-- The SQL sink applies a batch and moves the cursor in one statement, sent with its settings as
-- one simple query: one round trip, one implicit transaction, no BEGIN or COMMIT of its own
-- (issue 14). When every event applied but the cursor move was refused (an operator's command
-- or a deletion changed the shard while the batch ran), that statement must fail, or the
-- implicit transaction would commit the batch without the move: it calls this, which raises.
-- The dispatcher knows the SQLSTATE and treats it as "the shard changed" (nothing applied).
-- Since 20261202000020_sql_sink_refused.sql.
CREATE OR REPLACE FUNCTION highwater.sql_sink_refused() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RAISE EXCEPTION 'highwater: the shard changed while its batch ran (an operator''s command or a deletion); nothing of the batch was applied'
        USING ERRCODE = 'HW001';
END
$$;
