-- highwater schema: events, the event-type registry, consumer definitions and their cursor shards.
CREATE SCHEMA IF NOT EXISTS highwater;

CREATE TABLE highwater.event_types (
    event_type  text PRIMARY KEY CHECK (event_type ~ '^[A-Za-z][A-Za-z0-9_.:-]{0,199}$'),
    json_schema jsonb,
    description text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE highwater.events (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The writing transaction's id: readers order by (tx_id, id) below the snapshot fence.
    tx_id          xid8 NOT NULL DEFAULT pg_current_xact_id(),
    stream_type    text NOT NULL,
    stream_id      text NOT NULL,
    stream_version bigint CHECK (stream_version > 0),
    event_type     text NOT NULL REFERENCES highwater.event_types (event_type),
    -- NULL is the system tenant.
    tenant_id      text,
    payload        jsonb NOT NULL,
    metadata       jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX events_tx_id_id ON highwater.events (tx_id, id);
CREATE UNIQUE INDEX events_stream_version ON highwater.events (stream_type, stream_id, stream_version)
    WHERE stream_version IS NOT NULL;
CREATE INDEX events_created_at ON highwater.events (created_at);

CREATE TABLE highwater.consumers (
    name           text PRIMARY KEY CHECK (name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    delivery       text NOT NULL CHECK (delivery IN ('Shared', 'PerInstance')),
    consumer_group text NOT NULL DEFAULT 'default',
    max_attempts   integer NOT NULL DEFAULT 10 CHECK (max_attempts BETWEEN 1 AND 1000),
    batch_size     integer NOT NULL DEFAULT 100 CHECK (batch_size BETWEEN 1 AND 10000),
    event_types    text[] NOT NULL DEFAULT '{}',
    start_from     text NOT NULL CHECK (start_from IN ('earliest', 'latest')),
    error_mode     text NOT NULL DEFAULT 'halt' CHECK (error_mode IN ('halt', 'skip')),
    suspended      boolean NOT NULL DEFAULT false,
    sink           jsonb NOT NULL,
    -- The whole definition as applied, so a dispatcher rebuilds exactly what was declared.
    spec           jsonb NOT NULL,
    -- Where the definition came from: 'file:<path>', 'cli' or 'kubernetes:<namespace>/<name>'.
    source         text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE highwater.consumer_shards (
    consumer         text NOT NULL REFERENCES highwater.consumers (name) ON DELETE CASCADE,
    -- '__shared__' for shared consumers, the instance (pod) name for per-instance ones.
    instance_id      text NOT NULL CHECK (instance_id <> ''),
    cursor_tx        xid8 NOT NULL DEFAULT '0'::xid8,
    cursor_id        bigint NOT NULL DEFAULT 0,
    status           text NOT NULL DEFAULT 'idle'
                     CHECK (status IN ('idle', 'processing', 'dead', 'disabled')),
    attempts         integer NOT NULL DEFAULT 0,
    last_error       text,
    failing_event_id bigint,
    next_attempt_at  timestamptz,
    heartbeat_at     timestamptz,
    -- Set for shards that the operator created for a pod; only those are garbage-collected by it.
    pod_uid          text,
    delivered_count  bigint NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, instance_id)
);

CREATE INDEX consumer_shards_instance ON highwater.consumer_shards (instance_id);

-- Events parked by consumers in error mode 'skip' after their last attempt.
CREATE TABLE highwater.dead_letters (
    consumer    text NOT NULL,
    instance_id text NOT NULL,
    event_id    bigint NOT NULL,
    attempts    integer NOT NULL,
    error       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, instance_id, event_id)
);

-- The functions and triggers of the schema (first of them the wake-up hint for dispatchers,
-- highwater.notify_events and its trigger events_notify) live in migrations/definitions/, one
-- file each, applied after the ordered migrations.
