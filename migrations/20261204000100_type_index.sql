-- An index path per event type (issue 38): a consumer that selects a few types reads its own
-- events from (event_type, tx_id, id) instead of walking every event after its cursor and
-- dropping the other types' (migrations/definitions/events_after.sql says when each path is
-- taken). On the partitioned parent, so every partition has it and each partition attached later
-- (create_event_partitions) gets it at ATTACH.
--
-- `migrate` holds every table of the schema from its lock prelude to its commit, so appends and
-- deliveries wait while the index builds: about 0.2 s for 220,000 events on the bench machine
-- (2 cores), so a second or so per million.
CREATE INDEX IF NOT EXISTS events_type_tx_id_id ON highwater.events (event_type, tx_id, id);
