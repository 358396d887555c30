-- The snapshot fence, highwater's core correctness rule in one place for the SQL side (the Rust
-- side's is the `fence!()` macro of the store, the same expression): the oldest transaction id
-- still running. Every transaction below it has ended, so an event below it can never appear
-- behind a cursor later ("Positions and the snapshot fence" in docs/delivery.md).
--
-- Why calling it changes neither a plan nor a result: a LANGUAGE sql STABLE function of one
-- expression, without SECURITY DEFINER or a SET clause, is inlined by the planner: a call is
-- replaced by its expression before planning, so `e.tx_id < highwater.fence()` is planned (and
-- prunes partitions at executor start-up) exactly as the expression written out. Were it ever not
-- inlined, a STABLE SQL function still reads the caller's active snapshot: the fence of the same
-- statement. Every name is pg_catalog-qualified, as inlining parses the body under the caller's
-- search path. EXECUTE stays granted to PUBLIC: it reads nothing but the snapshot, and callers
-- that run with the caller's rights (events_after, shard_events_after) need it.
-- Since 0.4.0 (issue 45); before, each function wrote the expression out.
CREATE OR REPLACE FUNCTION highwater.fence()
RETURNS pg_catalog.xid8
LANGUAGE sql STABLE PARALLEL SAFE
RETURN pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot());
