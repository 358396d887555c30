-- Wake-up hint for waiters (highwater.applied): a cursor moved or a shard appeared. The payload
-- is the consumer's name; a transaction that moves several shards of one consumer sends one.
-- Since 20261201000010_read_your_writes.sql.
CREATE OR REPLACE FUNCTION highwater.notify_applied() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('highwater_applied', NEW.consumer);
    RETURN NULL;
END
$$;
