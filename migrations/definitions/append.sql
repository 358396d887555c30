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
-- schema. Appending an earlier version: the overload with p_schema_version
-- (append_schema_version.sql).
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
-- direct rights on highwater.events: every event goes through these checks. No SET clause: every
-- name below is qualified instead (see the top of this file).
SECURITY DEFINER
AS $$
DECLARE
    v_known   boolean;
    v_schema  pg_catalog.jsonb;
    v_err     pg_catalog.text;
    v_meta    pg_catalog.jsonb := coalesce(p_metadata, '{}'::pg_catalog.jsonb);
    v_setting pg_catalog.text;
    v_tenant  pg_catalog.text := p_tenant_id;
    v_current bigint;
    v_version bigint;
    v_head_tx pg_catalog.xid8;
    v_id      bigint;
    v_latest  integer;
BEGIN
    -- The size limits (append_limits.sql, which says why and raises HW030): tested inline, so an
    -- append within them pays four length reads and no function call. A payload that reached
    -- here compressed (passed from a table's column) is measured uncompressed there.
    IF pg_catalog.octet_length(p_stream_type) OPERATOR(pg_catalog.>) 200
       OR pg_catalog.octet_length(p_stream_id) OPERATOR(pg_catalog.>) 1024
       OR pg_catalog.octet_length(p_event_type) OPERATOR(pg_catalog.>) 200
       OR pg_catalog.pg_column_size(p_payload) OPERATOR(pg_catalog.>) 67108864
       OR pg_catalog.pg_column_compression(p_payload) IS NOT NULL THEN
        PERFORM highwater.append_limits(p_stream_type, p_stream_id, p_event_type, p_payload);
    END IF;
    IF p_stream_type IS NULL OR p_stream_type OPERATOR(pg_catalog.=) ''
       OR p_stream_id IS NULL OR p_stream_id OPERATOR(pg_catalog.=) ''
       OR p_payload IS NULL
       OR pg_catalog.jsonb_typeof(v_meta) OPERATOR(pg_catalog.<>) 'object' THEN
        -- The error path: an unknown type is reported first, as it always was.
        PERFORM FROM highwater.event_types t WHERE t.event_type OPERATOR(pg_catalog.=) p_event_type;
        IF NOT FOUND THEN
            PERFORM highwater.unknown_event_type(p_event_type);
        END IF;
        IF p_stream_type IS NULL OR p_stream_type OPERATOR(pg_catalog.=) ''
           OR p_stream_id IS NULL OR p_stream_id OPERATOR(pg_catalog.=) '' THEN
            RAISE EXCEPTION 'stream type and stream id must not be empty'
                USING ERRCODE = 'HW002', HINT = 'pass the aggregate type and its id, e.g. (''order'', ''42'')';
        END IF;
        IF p_payload IS NULL THEN
            RAISE EXCEPTION 'payload of event type "%" is NULL', p_event_type
                USING ERRCODE = 'HW002', HINT = 'pass a JSON value; use ''{}'' for an event without data';
        END IF;
        RAISE EXCEPTION 'metadata must be a JSON object, got %', pg_catalog.jsonb_typeof(v_meta)
            USING ERRCODE = 'HW002';
    END IF;

    -- A handler running inside a SQL sink sets these, so what it appends is linked to its cause.
    IF NOT v_meta OPERATOR(pg_catalog.?) 'correlation_id' THEN
        v_setting := pg_catalog.current_setting('highwater.correlation_id', true);
        IF v_setting IS NULL OR v_setting OPERATOR(pg_catalog.=) '' THEN
            v_setting := pg_catalog.gen_random_uuid()::pg_catalog.text;
        END IF;
        v_meta := v_meta OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('correlation_id', v_setting);
    END IF;
    IF NOT v_meta OPERATOR(pg_catalog.?) 'causation_id' THEN
        v_setting := pg_catalog.current_setting('highwater.causation_id', true);
        IF v_setting OPERATOR(pg_catalog.<>) '' THEN
            v_meta := v_meta OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('causation_id', v_setting);
        END IF;
    END IF;
    IF v_tenant IS NULL THEN
        v_tenant := pg_catalog.current_setting('highwater.tenant_id', true);
        IF v_tenant OPERATOR(pg_catalog.=) '' THEN
            v_tenant := NULL;
        END IF;
    END IF;

    IF p_expected_version IS NULL THEN
        -- The common case in one statement: inserts nothing when the type is unknown or has a
        -- schema to check (the slow path below).
        INSERT INTO highwater.events (stream_type, stream_id, event_type, tenant_id, payload, metadata,
                                      schema_version)
        SELECT p_stream_type, p_stream_id, t.event_type, v_tenant, p_payload, v_meta, t.latest_version
          FROM highwater.event_types t
         WHERE t.event_type OPERATOR(pg_catalog.=) p_event_type AND t.json_schema IS NULL
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;

    SELECT true, t.json_schema, t.latest_version INTO v_known, v_schema, v_latest
      FROM highwater.event_types t WHERE t.event_type OPERATOR(pg_catalog.=) p_event_type;
    IF v_known IS NULL THEN
        PERFORM highwater.unknown_event_type(p_event_type);
    END IF;
    IF v_schema IS NOT NULL THEN
        v_err := highwater.json_schema_check(v_schema, p_payload);
        IF v_err IS NOT NULL THEN
            RAISE EXCEPTION 'payload of event type "%" fails its JSON Schema: %', p_event_type, v_err
                USING ERRCODE = 'HW002',
                      HINT = pg_catalog.format('fix the payload, or register a new version with '
                                               '`highwater event-types register %s --version N --schema FILE`',
                                               p_event_type);
        END IF;
    END IF;

    IF p_expected_version IS NULL THEN
        INSERT INTO highwater.events (stream_type, stream_id, event_type, tenant_id, payload, metadata,
                                      schema_version)
        VALUES (p_stream_type, p_stream_id, p_event_type, v_tenant, p_payload, v_meta, v_latest)
        RETURNING id INTO v_id;
        RETURN v_id;
    END IF;

    -- The stream's head row: one index probe whatever the partitions.
    SELECT s.version, s.tx_id INTO v_current, v_head_tx FROM highwater.stream_versions s
     WHERE s.stream_type OPERATOR(pg_catalog.=) p_stream_type
       AND s.stream_id OPERATOR(pg_catalog.=) p_stream_id;
    IF coalesce(v_current, 0) OPERATOR(pg_catalog.<>) p_expected_version THEN
        RAISE EXCEPTION 'stream %/% is at version %, expected %',
            p_stream_type, p_stream_id, coalesce(v_current, 0), p_expected_version
            USING ERRCODE = 'HW003',
                  HINT = 'another writer appended first: reload the stream and retry';
    END IF;
    v_version := p_expected_version OPERATOR(pg_catalog.+) 1;
    -- The stream-order tx_id is computed here, before the insert, so that the row is routed to
    -- the partition of that tx_id; the trigger events_advance_stream_version moves the head and
    -- refuses (HW003) if another writer took this version meanwhile. GREATEST compares with the
    -- type's default ordering, not an operator looked up by name.
    INSERT INTO highwater.events
        (tx_id, stream_type, stream_id, stream_version, event_type, tenant_id, payload, metadata, schema_version)
    VALUES (greatest(pg_catalog.pg_current_xact_id(), v_head_tx), p_stream_type, p_stream_id,
            v_version, p_event_type, v_tenant, p_payload, v_meta, v_latest)
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;

REVOKE ALL ON FUNCTION highwater.append(text, text, text, jsonb, jsonb, text, bigint) FROM PUBLIC;
