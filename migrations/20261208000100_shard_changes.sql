-- The audit of shard changes (issue 47): who restarted, skipped, disabled, enabled, rewound or
-- rebuilt a consumer's shard, when and why, with the state and cursor before and after. Written in
-- the same transaction as the change (store/src/ops/transitions.rs, rebuild.rs), so a change
-- without its row cannot commit; redrive and discard keep recording theirs on the dead letters.
-- Expand only: a new table; binaries that do not know it never read it (their changes are then
-- only in their log lines, as before).
--
-- No foreign key to consumers: the audit outlives a deleted consumer. Rows are few (one per shard
-- per human action) and kept until deleted by hand.
CREATE TABLE highwater.shard_changes (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    changed_at    timestamptz NOT NULL DEFAULT now(),
    consumer      text NOT NULL,
    instance_id   text NOT NULL,
    action        text NOT NULL,
    detail        text,
    from_status   text NOT NULL,
    to_status     text NOT NULL,
    cursor_before_tx xid8 NOT NULL,
    cursor_before_id bigint NOT NULL,
    cursor_after_tx  xid8 NOT NULL,
    cursor_after_id  bigint NOT NULL,
    changed_by    text NOT NULL,
    reason        text
);
CREATE INDEX shard_changes_consumer ON highwater.shard_changes (consumer, id);
