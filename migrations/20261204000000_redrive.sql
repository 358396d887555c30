-- Dead letters redriven (issue 36): a dead letter is delivered again through its consumer's sink
-- on request, and kept, marked with who asked, why and when it was delivered. Expand only:
-- nullable columns and a partial index; binaries that do not know them never set them.
--
-- A request is pending while `redrive_at` is set: the dispatcher running the shard
-- `redrive_instance` delivers it once `redrive_at` has passed (the CLI spaces them for --rate),
-- then clears both and sets `redriven_at`, in the transaction of a SQL sink's apply or right
-- after an external sink's acknowledgement. A failed redrive clears them too and leaves the new
-- error in `error`: a dead letter again.
ALTER TABLE highwater.dead_letters
    ADD COLUMN redrive_requested_at timestamptz,
    ADD COLUMN redrive_by           text,
    ADD COLUMN redrive_reason       text,
    ADD COLUMN redrive_at           timestamptz,
    ADD COLUMN redrive_instance     text,
    ADD COLUMN redriven_at          timestamptz;

-- The pending requests of a shard, found by its dispatcher without reading every dead letter.
CREATE INDEX dead_letters_redrive_pending ON highwater.dead_letters (consumer, redrive_instance, redrive_at)
    WHERE redrive_at IS NOT NULL;
