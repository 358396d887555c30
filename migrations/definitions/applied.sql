-- True when consumer p_consumer has applied every event it selects of the transactions the token
-- covers (for a SQL sink: committed in the projection). Never early: false while any transaction
-- with an id <= the token is still running, and false while the consumer has no shard yet.
-- Errors: HW010 unknown consumer, HW011 token ahead of the database (restored from a dump, or a
-- token of another database), HW012 bad argument.
-- Since 20261201000010_read_your_writes.sql.
CREATE OR REPLACE FUNCTION highwater.applied(p_consumer text, p_token xid8, p_instance text DEFAULT NULL)
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
