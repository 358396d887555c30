-- highwater.events becomes a table partitioned by range of tx_id, so that retention drops whole
-- partitions instead of deleting rows, and stream versions move to their own table so that the
-- expected-version check stays exact (a unique index on a partitioned table must include the
-- partition key, so "one row per (stream, version)" can no longer be an index on events).
--
-- Why tx_id and not created_at or id (docs/operations.md, "Partitioned retention", has the
-- measurements): readers ask for `(tx_id, id) > cursor AND tx_id < fence`, so with tx_id ranges
-- a read touches only the partitions between its cursor and the fence, whatever their number;
-- and a partition is droppable on a plain numeric condition, every shard's cursor and the fence
-- past its upper bound, with no scan of its rows.
--
-- Converting an existing installation: the current table is attached as the first partition
-- (`events_legacy`, every tx_id below the next transaction id) without copying a row; its
-- identity sequence's next value carries over to the new table, so ids keep increasing and
-- cursors `(tx_id, id)` keep their meaning. The migration holds ACCESS EXCLUSIVE on the events
-- table for its duration: appends and reads wait. It scans the table once (attach validates the
-- range) and builds one index (`events_id`): minutes per hundred million events.

-- `highwater migrate` holds this lock already (its prelude takes every table in the order
-- highwater.append does, with lock_timeout set, and retries). Applied by hand (psql -1 -f), the
-- lock_timeout below keeps the wait short: the statement fails instead of queueing writers, or of
-- a lock-order inversion with an appender rolling the appender's transaction back.
SELECT set_config('lock_timeout', '500ms', true) WHERE current_setting('lock_timeout') IN ('0', '0ms');
LOCK TABLE highwater.events IN ACCESS EXCLUSIVE MODE;

-- The head of each versioned stream: its version and the (possibly raised) tx_id of that version.
-- One row per stream, so concurrent appenders of one stream serialise on this row exactly as they
-- did on the unique index, and the stream-order rule reads its predecessor's tx_id here instead
-- of probing every partition.
CREATE TABLE highwater.stream_versions (
    stream_type text NOT NULL,
    stream_id   text NOT NULL,
    version     bigint NOT NULL CHECK (version > 0),
    tx_id       xid8 NOT NULL,
    PRIMARY KEY (stream_type, stream_id)
);

INSERT INTO highwater.stream_versions (stream_type, stream_id, version, tx_id)
SELECT DISTINCT ON (stream_type, stream_id) stream_type, stream_id, stream_version, tx_id
  FROM highwater.events
 WHERE stream_version IS NOT NULL
 ORDER BY stream_type, stream_id, stream_version DESC;

-- How partitions are sized and how far ahead they are created (one row).
CREATE TABLE highwater.event_partitioning (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    -- Transaction ids per partition. Size it so that one partition spans about a day of the
    -- cluster's write transactions (docs/operations.md): 10,000,000 is ~28 h at 100 tx/s.
    width     bigint NOT NULL DEFAULT 10000000 CHECK (width >= 100),
    -- Partitions kept ready above the next transaction id.
    ahead     integer NOT NULL DEFAULT 2 CHECK (ahead BETWEEN 1 AND 100)
);
INSERT INTO highwater.event_partitioning DEFAULT VALUES;

-- Every range partition with its bounds as numbers: retention compares these, never names.
CREATE TABLE highwater.event_partitions (
    name       text PRIMARY KEY,
    lo         xid8 NOT NULL,
    hi         xid8 NOT NULL CHECK (hi > lo),
    created_at timestamptz NOT NULL DEFAULT now()
);

DO $$
DECLARE
    v_next_id bigint;
    v_bound   xid8 := pg_snapshot_xmax(pg_current_snapshot());
    v_width   bigint;
    v_ahead   integer;
    v_target  numeric;
    v_top     xid8;
    v_hi      xid8;
    v_name    text;
BEGIN
    SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END
      INTO v_next_id FROM highwater.events_id_seq;

    ALTER TABLE highwater.events RENAME TO events_legacy;
    ALTER TABLE highwater.events_legacy ALTER COLUMN id DROP IDENTITY;
    -- The triggers of the old table. Those of migrations/definitions/ (events_notify, and the
    -- read-your-writes ones of 20261201000010) are created on the new table after the ordered
    -- migrations, so they exist here only when upgrading an installation that had them.
    DROP TRIGGER IF EXISTS events_notify ON highwater.events_legacy;
    DROP TRIGGER events_order_after_previous_version ON highwater.events_legacy;
    DROP TRIGGER IF EXISTS events_remember_raised_tx_id ON highwater.events_legacy;
    DROP TRIGGER IF EXISTS events_record_pruned ON highwater.events_legacy;
    -- Replaced by highwater.stream_versions.
    DROP INDEX highwater.events_stream_version;
    ALTER TABLE highwater.events_legacy DROP CONSTRAINT events_event_type_fkey;
    ALTER INDEX highwater.events_tx_id_id RENAME TO events_legacy_tx_id_id;
    ALTER INDEX highwater.events_created_at RENAME TO events_legacy_created_at;

    EXECUTE format($sql$
        CREATE TABLE highwater.events (
            id             bigint GENERATED ALWAYS AS IDENTITY (START WITH %s),
            tx_id          xid8 NOT NULL DEFAULT pg_current_xact_id(),
            stream_type    text NOT NULL,
            stream_id      text NOT NULL,
            stream_version bigint CONSTRAINT events_stream_version_check CHECK (stream_version > 0),
            -- No foreign key to event_types any more: highwater.append refuses unknown types
            -- (HW001), and a foreign key makes every partition attach, detach and drop take
            -- ACCESS EXCLUSIVE on event_types after highwater.events, the opposite order of an
            -- append (event_types, then events): a deadlock with every running appender.
            event_type     text NOT NULL,
            tenant_id      text,
            payload        jsonb NOT NULL,
            metadata       jsonb NOT NULL DEFAULT '{}'::jsonb
                           CONSTRAINT events_metadata_check CHECK (jsonb_typeof(metadata) = 'object'),
            created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
        ) PARTITION BY RANGE (tx_id)$sql$, v_next_id);

    CREATE INDEX events_tx_id_id ON highwater.events (tx_id, id);
    CREATE INDEX events_created_at ON highwater.events (created_at);
    -- Lookups by id (skip, rewind to an event, dead letters). Not unique across partitions: the
    -- identity column is what makes ids unique, as it always was.
    CREATE INDEX events_id ON highwater.events (id);

    -- Every existing event has a tx_id below the next transaction id.
    EXECUTE format('ALTER TABLE highwater.events ATTACH PARTITION highwater.events_legacy
                    FOR VALUES FROM (%L) TO (%L)', '0', v_bound);
    INSERT INTO highwater.event_partitions (name, lo, hi) VALUES ('events_legacy', '0', v_bound);

    -- The first partitions, `ahead` widths above the next transaction id: what
    -- highwater.create_event_partitions() (migrations/definitions/create_event_partitions.sql)
    -- creates above an empty tail, inlined because the definitions are applied only after the
    -- ordered migrations. It names and bounds them as that function does.
    SELECT width, ahead INTO v_width, v_ahead FROM highwater.event_partitioning;
    v_target := pg_snapshot_xmax(pg_current_snapshot())::text::numeric + v_width * v_ahead;
    v_top := greatest(v_bound, pg_snapshot_xmin(pg_current_snapshot()));
    WHILE v_top::text::numeric < v_target LOOP
        v_hi := (v_top::text::numeric + v_width)::text::xid8;
        v_name := format('events_%s', v_top);
        EXECUTE format('CREATE TABLE highwater.%I (LIKE highwater.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                       v_name);
        EXECUTE format('ALTER TABLE highwater.events ATTACH PARTITION highwater.%I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_top, v_hi);
        INSERT INTO highwater.event_partitions (name, lo, hi) VALUES (v_name, v_top, v_hi);
        v_top := v_hi;
    END LOOP;

    -- The tail: every transaction id above the highest partition, so an insert never fails for
    -- want of a partition (maintenance stopped, or ids jumped after pg_resetwal). A range up to
    -- MAXVALUE rather than a DEFAULT partition: with a default partition PostgreSQL cannot read
    -- the partitions in order (an ordered Append), and a batch read sorted every row after the
    -- cursor (58 ms instead of 0.6 ms per batch of 1,000 over 30 partitions, measured).
    EXECUTE format('CREATE TABLE highwater.events_tail PARTITION OF highwater.events
                    FOR VALUES FROM (%L) TO (MAXVALUE)', v_top);
END
$$;

ALTER TABLE highwater.events_legacy DROP CONSTRAINT events_pkey;

-- Its trigger was dropped above: highwater.advance_stream_version (definitions/) replaces it.
DROP FUNCTION highwater.order_after_previous_version();

-- The functions and triggers this migration introduced or changed live in migrations/definitions/,
-- applied after the ordered migrations: create_event_partitions.sql, advance_stream_version.sql
-- (stream order and the expected-version check on highwater.stream_versions),
-- events_after.sql, append.sql (the expected version read from the head row), and the triggers of
-- the new table (trigger_events_*.sql: events_notify, events_advance_stream_version, and the
-- read-your-writes ones of 20261201000010, re-created on the partitioned table).
