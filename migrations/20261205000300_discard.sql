-- Discarding a dead letter (issue 36): an operator decides that a dead letter is not to be
-- delivered at all (`consumer discard`), typically the blocker of an `errorMode: skipStream`
-- stream whose cause cannot be fixed. The row is kept as the record of that decision, with who,
-- why and when. Expand only: nullable columns without defaults (no rewrite); binaries that do
-- not know them never set them.
--
-- A dead letter is discarded while `discarded_at` is set: it is never redriven, no longer blocks
-- its stream, and the events parked behind it (`blocked_by`) are released as after a redrive of
-- it.
ALTER TABLE highwater.dead_letters
    ADD COLUMN discarded_at   timestamptz,
    ADD COLUMN discarded_by   text,
    ADD COLUMN discard_reason text;
