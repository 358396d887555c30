-- A shard appeared: wakes the waiters of highwater.applied (notify_applied.sql).
-- Since 20261201000010_read_your_writes.sql.
CREATE OR REPLACE TRIGGER consumer_shards_notify_applied_insert
    AFTER INSERT ON highwater.consumer_shards
    FOR EACH ROW EXECUTE FUNCTION highwater.notify_applied();
