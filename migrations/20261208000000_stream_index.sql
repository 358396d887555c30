-- Reading one stream (`events read --stream`, the console's stream page, `consumer replay` and
-- skipStream's count) looked for its events by walking the whole table: 101 ms at 100,000 events
-- in the console bench, growing with the table. An index per stream, in delivery order, makes it
-- a few index pages however large the table grows (issue 47). On the partitioned parent, so every
-- partition has it and each partition attached later (create_event_partitions) gets it at ATTACH.
--
-- It is one more index on the append path; its cost is measured in docs/benchmarks.md (scenario
-- 3). Like the type index, `migrate` builds it while holding the schema's tables: appends wait
-- for about a second per million events.
CREATE INDEX IF NOT EXISTS events_stream ON highwater.events (stream_type, stream_id, tx_id, id);
