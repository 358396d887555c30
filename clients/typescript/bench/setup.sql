-- The seed-style outbox table of the append comparison (as the Debezium outbox EventRouter reads
-- it: id uuid, aggregatetype, aggregateid, type, payload), and the wait benchmark's read model.
CREATE TABLE outbox (
    id            uuid PRIMARY KEY,
    aggregatetype text NOT NULL,
    aggregateid   text NOT NULL,
    type          text NOT NULL,
    payload       jsonb NOT NULL
);
CREATE TABLE bench_applied (
    event_id   bigint PRIMARY KEY,
    created_at timestamptz NOT NULL,
    applied_at timestamptz NOT NULL
);
