-- Flow control of external sinks (issue 49): one row per consumer, shared by every dispatcher of
-- its group, created on first use. Expand only: a new table; binaries that do not know it never
-- read it.
--
-- A receiver's backpressure (`429`/`503` with `Retry-After`) pauses the consumer until
-- `paused_until`, with the receiver's answer in `pause_reason` (shown by `consumer status`).
-- `spec.rateLimit` is a token bucket: `tokens` as of `refilled_at`, refilled by the time since at
-- `perSecond` up to `burst`, taken in batches by each dispatcher under the row's lock, so the
-- limit holds for the consumer as a whole, not per pod. `throttled_until` is when the last
-- dispatcher that found the bucket empty may take again; `throttled_ms` adds up the time the
-- consumer's dispatchers waited for tokens or for the receiver.
CREATE TABLE highwater.consumer_flow (
    consumer        text PRIMARY KEY REFERENCES highwater.consumers (name) ON DELETE CASCADE,
    paused_until    timestamptz,
    pause_reason    text,
    tokens          float8 NOT NULL DEFAULT 0,
    refilled_at     timestamptz NOT NULL DEFAULT now(),
    throttled_until timestamptz,
    throttled_ms    bigint NOT NULL DEFAULT 0,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
