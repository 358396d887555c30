-- Stream order and the expected-version check for every versioned event
-- (advance_stream_version.sql). Since 20261201000020_partitioned_events.sql, which dropped the
-- trigger events_order_after_previous_version of 20261130000003_stream_order.sql for it.
CREATE OR REPLACE TRIGGER events_advance_stream_version
    BEFORE INSERT ON highwater.events
    FOR EACH ROW WHEN (NEW.stream_version IS NOT NULL)
    EXECUTE FUNCTION highwater.advance_stream_version();
