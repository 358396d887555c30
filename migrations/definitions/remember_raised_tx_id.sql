-- The largest raised tx_id this transaction stamped on an event, in a transaction-local setting
-- (a rolled-back savepoint restores it with its rows), for highwater.token (token.sql). Fires
-- only for raised events (trigger_events_remember_raised_tx_id.sql): the others carry the
-- transaction's own id, which highwater.token() reads directly.
-- Since 20261201000010_read_your_writes.sql.
CREATE OR REPLACE FUNCTION highwater.remember_raised_tx_id() RETURNS trigger
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
