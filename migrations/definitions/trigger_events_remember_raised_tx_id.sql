-- Only for events whose tx_id was raised above the writer's own (remember_raised_tx_id.sql).
-- Since 20261201000010_read_your_writes.sql, on the partitioned table since
-- 20261201000020_partitioned_events.sql.
CREATE OR REPLACE TRIGGER events_remember_raised_tx_id
    AFTER INSERT ON highwater.events
    FOR EACH ROW WHEN (NEW.tx_id > pg_current_xact_id())
    EXECUTE FUNCTION highwater.remember_raised_tx_id();
