-- Stream replay (issue 36): `consumer replay NAME --stream TYPE/ID` delivers one stream's events
-- to one consumer again, through the path of a redrive (the dispatcher that runs the shard, its
-- own sink, under the shard's claim; the cursor untouched). Expand only: a new table that
-- binaries which do not know it never read.
--
-- One row per event and delivering shard of a request. A row is pending while `due_at` is set;
-- the dispatcher running `instance_id` delivers a request's rows in `seq` order (the events'
-- (tx_id, id) order) and, in the transaction of a SQL sink's apply or right after an external
-- sink's acknowledgement, clears `due_at` and sets `replayed_at`. A failure clears `due_at` and
-- records `error` on that row and on the request's later rows of the shard (not delivered, so
-- that the stream's order holds). Who, why and when the request was made are on every row.
CREATE SEQUENCE highwater.replay_requests;

CREATE TABLE highwater.replays (
    request_id   bigint NOT NULL,
    consumer     text NOT NULL,
    instance_id  text NOT NULL,
    event_id     bigint NOT NULL,
    seq          integer NOT NULL,
    stream_type  text NOT NULL,
    stream_id    text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    requested_by text NOT NULL,
    reason       text,
    due_at       timestamptz,
    replayed_at  timestamptz,
    error        text,
    PRIMARY KEY (request_id, instance_id, event_id)
);

-- The pending rows of a shard, found by its dispatcher without reading every past replay.
CREATE INDEX replays_pending ON highwater.replays (consumer, instance_id, request_id, seq)
    WHERE due_at IS NOT NULL;
