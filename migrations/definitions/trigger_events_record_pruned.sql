-- Records deleted events per type in highwater.pruned (record_pruned.sql). A dropped partition
-- fires no DELETE trigger: `events drop-partitions` records what it drops in highwater.pruned
-- itself. Since 20261201000010_read_your_writes.sql, on the partitioned table since
-- 20261201000020_partitioned_events.sql.
CREATE OR REPLACE TRIGGER events_record_pruned
    AFTER DELETE ON highwater.events
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION highwater.record_pruned();
