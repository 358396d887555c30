-- Batch reads keep one plan shape whatever the cursor: the index on (tx_id, id) read in order,
-- stopped after the batch.
--
-- PL/pgSQL plans a function's statement with the call's values for its first executions (custom
-- plans). The estimate for "events after (tx, id)" comes from the statistics of tx_id, which
-- know nothing of id: when one transaction holds many events (a bulk import) and the cursor is
-- inside it, PostgreSQL estimates a handful of rows, reads every remaining event of that
-- transaction and sorts them to return one batch — 18 ms instead of 0.6 ms per batch of 1,000
-- with 100,000 events left in the transaction, so a drain of one large transaction grew with
-- its square. The generic plan is the ordered index scan for every cursor; partitions behind the
-- cursor are still pruned at execution. (dispatcher/tests/bulk_transaction.rs)
ALTER FUNCTION highwater.events_after(xid8, bigint, text[], bigint, bigint[])
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION highwater.shard_events_after(xid8, bigint, text[], bigint, bigint[], integer, integer, xid8, bigint)
    SET plan_cache_mode = force_generic_plan;
