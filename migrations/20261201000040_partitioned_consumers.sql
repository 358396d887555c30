-- Partitioned shared consumers (docs/consumers.md, "Partitions"): a Shared consumer with
-- `partitions: N` > 1 has N shards, `__shared__/p<i>of<N>`, each delivering the events whose
-- stream hashes to partition i, with its own cursor. One stream's events land in one partition,
-- so per-stream order holds while N dispatchers deliver in parallel.

-- The target split, from the spec. The split in force is the one the shard rows carry: the two
-- differ while a change of N waits at its barrier.
ALTER TABLE highwater.consumers
    ADD COLUMN partitions integer NOT NULL DEFAULT 1 CHECK (partitions BETWEEN 1 AND 256);

ALTER TABLE highwater.consumer_shards
    ADD COLUMN partition_index integer,
    ADD COLUMN partition_count integer,
    -- While N changes: the position every shard of the old split delivers up to, and no further.
    -- On the shard row itself, so that a cursor update racing with the change re-checks it (an
    -- UPDATE blocked by the change's row lock re-evaluates its WHERE on the new row version).
    ADD COLUMN barrier_tx xid8,
    ADD COLUMN barrier_id bigint,
    ADD CONSTRAINT consumer_shards_partition CHECK (
        (partition_index IS NULL AND partition_count IS NULL)
        OR (partition_count BETWEEN 2 AND 256 AND partition_index >= 0 AND partition_index < partition_count)),
    ADD CONSTRAINT consumer_shards_barrier CHECK ((barrier_tx IS NULL) = (barrier_id IS NULL));

-- Live dispatchers per group, for sharing partitions fairly: each dispatcher refreshes its row
-- every second or so and deletes it when it stops; a row older than a few refreshes is a
-- dispatcher that went away (killed), whose partitions the others take over.
CREATE TABLE highwater.dispatchers (
    instance_id    text PRIMARY KEY CHECK (instance_id <> ''),
    consumer_group text NOT NULL,
    started_at     timestamptz NOT NULL DEFAULT now(),
    heartbeat_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX dispatchers_group ON highwater.dispatchers (consumer_group, heartbeat_at);

-- The functions live in migrations/definitions/, applied after the ordered migrations:
-- stream_partition.sql, partition_instance.sql, is_shared_shard.sql, shard_events_after.sql,
-- repartition.sql, and applied_bound.sql (each partition shard counts only its own events).
