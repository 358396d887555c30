-- A cursor moved: wakes the waiters of highwater.applied (notify_applied.sql).
-- Since 20261201000010_read_your_writes.sql.
CREATE OR REPLACE TRIGGER consumer_shards_notify_applied_update
    AFTER UPDATE OF cursor_tx, cursor_id ON highwater.consumer_shards
    FOR EACH ROW WHEN (OLD.cursor_tx IS DISTINCT FROM NEW.cursor_tx OR OLD.cursor_id IS DISTINCT FROM NEW.cursor_id)
    EXECUTE FUNCTION highwater.notify_applied();
