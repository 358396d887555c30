-- errorMode: skipStream (issue 36): a dead letter blocks the later events of its stream, which are
-- parked behind it and delivered after it once it is redriven. Expand only: a nullable column,
-- a partial index, and a wider CHECK on consumers.error_mode (every value allowed before still is;
-- binaries that do not know skipStream never write it).
--
-- `blocked_by`: set on an event parked without delivery because its stream was blocked; the id of
-- the blocking dead letter's event (the first of the stream to fail). Once that one is redriven,
-- the dispatcher requests the redrive of the rows it blocked, in stream order.
ALTER TABLE highwater.dead_letters ADD COLUMN blocked_by bigint;

CREATE INDEX dead_letters_blocked_by ON highwater.dead_letters (consumer, instance_id, blocked_by)
    WHERE blocked_by IS NOT NULL;

ALTER TABLE highwater.consumers DROP CONSTRAINT IF EXISTS consumers_error_mode_check;
ALTER TABLE highwater.consumers
    ADD CONSTRAINT consumers_error_mode_check CHECK (error_mode IN ('halt', 'skip', 'skipStream'));
