-- Wakes sleeping dispatchers after an insert into highwater.events, once per statement
-- (notify_events.sql). Created in 20261130000001_schema.sql, on the partitioned table since
-- 20261201000020_partitioned_events.sql.
CREATE OR REPLACE TRIGGER events_notify AFTER INSERT ON highwater.events
    FOR EACH STATEMENT EXECUTE FUNCTION highwater.notify_events();
