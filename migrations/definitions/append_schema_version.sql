-- highwater.append with the schema version to append (issue 36, part 2): the eight arguments,
-- none with a default (a default here would make every shorter call of the seven-argument
-- append ambiguous). p_schema_version NULL is the type's latest version, as the seven-argument
-- form; an earlier registered version is checked against its own schema and recorded; a version
-- that is not registered is HW004.
--
-- The one body of both appends (issue 45): the seven-argument form (append.sql), which every
-- caller that does not name a version uses, binaries of 0.4.0 included, calls this one with
-- p_schema_version NULL. Its one-statement fast path is here, taken when neither an expected
-- version nor a schema version is asked for. Why it is written as it is (no SET clause, every
-- name qualified, the fast path, each setting read once): the header of append.sql. The writer's
-- W3C trace context goes into the metadata as `traceparent`/`tracestate` (trace_context.sql).
CREATE OR REPLACE FUNCTION highwater.append(
    p_stream_type      text,
    p_stream_id        text,
    p_event_type       text,
    p_payload          jsonb,
    p_metadata         jsonb,
    p_tenant_id        text,
    p_expected_version bigint,
    p_schema_version   integer
) RETURNS bigint
LANGUAGE plpgsql
-- Runs with the owner's rights, so a writer needs only EXECUTE (and USAGE on the schema), never
-- direct rights on highwater.events: every event goes through these checks. No SET clause: every
-- name below is qualified instead (see the top of append.sql).
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
    -- The writer's trace (issue 48): from the metadata or the setting, checked by
    -- highwater.trace_context, which is called only when there is one (a malformed one is left
    -- out with a NOTICE, never an error). The tracestate setting is read only with a traceparent.
    IF v_meta OPERATOR(pg_catalog.?) 'traceparent' THEN
        v_meta := highwater.trace_context(v_meta, NULL, NULL);
    ELSE
        v_setting := pg_catalog.current_setting('highwater.traceparent', true);
        IF v_setting OPERATOR(pg_catalog.<>) '' THEN
            v_meta := highwater.trace_context(v_meta, v_setting,
                                              pg_catalog.current_setting('highwater.tracestate', true));
        END IF;
    END IF;
    IF v_tenant IS NULL THEN
        v_tenant := pg_catalog.current_setting('highwater.tenant_id', true);
        IF v_tenant OPERATOR(pg_catalog.=) '' THEN
            v_tenant := NULL;
        END IF;
    END IF;

    IF p_expected_version IS NULL AND p_schema_version IS NULL THEN
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
    IF p_schema_version IS NOT NULL
       AND p_schema_version OPERATOR(pg_catalog.<>) coalesce(v_latest, 1) THEN
        -- An earlier version: its own schema. (A type registered by a binary without versions has
        -- no version rows; its only version, 1, is the registry row's schema.)
        SELECT true, s.json_schema INTO v_known, v_schema
          FROM highwater.event_type_versions s
         WHERE s.event_type OPERATOR(pg_catalog.=) p_event_type
           AND s.version OPERATOR(pg_catalog.=) p_schema_version
           AND p_schema_version OPERATOR(pg_catalog.<) coalesce(v_latest, 1);
        IF NOT FOUND THEN
            RAISE EXCEPTION 'event type "%" has no version % (its latest is %)',
                p_event_type, p_schema_version, coalesce(v_latest, 1)
                USING ERRCODE = 'HW004',
                      HINT = pg_catalog.format('append a registered version (1 to %s, or NULL for the latest), '
                                               'or register version %s first: `highwater event-types register %s '
                                               '--version %s --schema FILE`', coalesce(v_latest, 1),
                                               p_schema_version, p_event_type, p_schema_version);
        END IF;
        v_latest := p_schema_version;
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

REVOKE ALL ON FUNCTION highwater.append(text, text, text, jsonb, jsonb, text, bigint, integer) FROM PUBLIC;
