-- Read-your-writes: the position token of a writing transaction and "has consumer C applied
-- everything up to this token?" (docs/read-your-writes.md).
--
-- The functions and triggers (highwater.token, append_position, applied_bound, applied, the
-- triggers that remember raised tx_ids, notify waiters and record pruned events) live in
-- migrations/definitions/, one file each, applied after the ordered migrations; here are the
-- columns and the table they use.

-- Rebuilds and bootstraps of read models (docs/read-your-writes.md).
ALTER TABLE highwater.consumer_shards
    -- A rebuild in progress: when it started, delivered_count then, how many events it replays
    -- and where it is complete (the head when it started).
    ADD COLUMN rebuild_started_at timestamptz,
    ADD COLUMN rebuild_base       bigint,
    ADD COLUMN rebuild_total      bigint,
    ADD COLUMN rebuild_target_tx  xid8,
    ADD COLUMN rebuild_target_id  bigint,
    -- The bootstrap has not run yet: the shard is disabled until it has.
    ADD COLUMN bootstrap_pending  boolean NOT NULL DEFAULT false,
    -- The snapshot the bootstrap read the application's tables in, and the ids of the events at or
    -- above its xmin that it saw: those the read model already holds, never delivered. Visibility
    -- is the writer's, not the stamped tx_id's: the list is what the snapshot itself returned.
    -- Events below its xmin were all visible to it (a stamped tx_id is never below its writer's
    -- own id), events stamped at or above its xmax none (a raise copies the id of a transaction
    -- that committed before the writer appended), so the list holds only the window between.
    ADD COLUMN bootstrap_snapshot pg_snapshot,
    ADD COLUMN bootstrap_seen     bigint[] NOT NULL DEFAULT '{}';

-- What `events prune` (or any delete) removed, per event type: a rebuild that would replay from
-- the log refuses when events of its types are gone.
CREATE TABLE highwater.pruned (
    event_type     text PRIMARY KEY,
    events         bigint NOT NULL,
    newest_id      bigint NOT NULL,
    last_pruned_at timestamptz NOT NULL DEFAULT now()
);
