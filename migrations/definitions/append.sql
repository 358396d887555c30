-- Appends one event inside the caller's transaction and returns its id.
-- Errors (SQLSTATE): HW001 unknown event type, HW002 payload fails the type's schema or is not
-- valid, HW003 expected stream version does not match, HW030 a value over its size limit
-- (append_limits.sql). Nothing is stored on error.
--
-- Why it is written as it is (issue 14, part 4; docs/benchmarks.md "After the append work"):
--
-- 1. No `SET search_path` clause. A function with a SET clause saves, sets and restores the
--    setting on every call (a new search path computed twice per append). The function is still
--    SECURITY DEFINER, so nothing in it may resolve through the caller's search path: every
--    table is schema-qualified, every function and operator is pg_catalog-qualified (OPERATOR(
--    pg_catalog.=) and so on, NULLIF replaced: it looks `=` up in the search path), every type
--    of a variable or cast names its schema. Temporary schemas are never searched for functions
--    or operators, and qualified names never look in them. The schema check, which recurses
--    through highwater.json_schema_error (unqualified operators), goes through
--    highwater.json_schema_check, which keeps the SET clause: only types with a schema pay it.
-- 2. The event type's lookup and the insert are one statement for the common case (no schema,
--    no expected version): INSERT ... SELECT from the registry row. When it inserts nothing the
--    type is unknown or has a schema, and the slow path below looks it up as before.
-- 3. Each of the three settings is read once.
--
-- Versioned appends (expected version) take the slow path: the stream's head row read from
-- highwater.stream_versions (one index probe whatever the partitions), the stream-order tx_id
-- computed before the insert so that the row is routed to that tx_id's partition, the head moved
-- by the trigger events_advance_stream_version (advance_stream_version.sql).
--
-- Event versions (20261205000000_event_type_versions.sql): the event records its type's latest
-- version (event_types.latest_version, NULL while the type has only version 1), read from the
-- registry row the common path reads anyway: no cost added. `json_schema` is the latest version's
-- schema. Appending an earlier version: the overload with p_schema_version.
--
-- The body (issue 45): this form is the eight-argument overload with p_schema_version NULL
-- (append_schema_version.sql), which holds the checks, the fast path and the inserts described
-- here; the two were copies of each other. It calls that one rather than being a LANGUAGE sql
-- wrapper: a SQL function inlined into the caller's query would run with the caller's rights and
-- so need EXECUTE on the eight-argument form, which roles granted only this one (before it
-- existed) do not have; as SECURITY DEFINER it is not inlined anyway. The call costs one PL/pgSQL
-- call per append (docs/benchmarks.md, "One append body").
--
-- History: 20261130000002_append.sql (the first, with SET search_path and a unique index on
-- events for the expected version), 20261201000020_partitioned_events.sql (the head row of
-- highwater.stream_versions, as a unique index on a partitioned table must hold the partition
-- key), 20261201000030_append_cost.sql (the three points above).
CREATE OR REPLACE FUNCTION highwater.append(
    p_stream_type      text,
    p_stream_id        text,
    p_event_type       text,
    p_payload          jsonb,
    p_metadata         jsonb DEFAULT NULL,
    p_tenant_id        text DEFAULT NULL,
    p_expected_version bigint DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
-- Runs with the owner's rights, so a writer needs only EXECUTE (and USAGE on the schema), never
-- direct rights on highwater.events (nor EXECUTE on the eight-argument form it calls). No SET
-- clause: the one name below is qualified, as are all of the body's.
SECURITY DEFINER
AS $$
BEGIN
    RETURN highwater.append(p_stream_type, p_stream_id, p_event_type, p_payload, p_metadata, p_tenant_id,
                            p_expected_version, NULL::pg_catalog.int4);
END
$$;

REVOKE ALL ON FUNCTION highwater.append(text, text, text, jsonb, jsonb, text, bigint) FROM PUBLIC;
