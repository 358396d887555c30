-- Payload validation and the append function that every language calls inside its own transaction.

-- Validates `doc` against the JSON Schema subset documented in docs/events.md and returns the first
-- violation as text (NULL when valid). It lives in the database so that every writer, whatever its
-- language, is held to the same schema; `highwater event-types register` refuses schemas that use
-- keywords outside this subset, so nothing is silently unchecked.
CREATE FUNCTION highwater.json_schema_error(schema jsonb, doc jsonb, path text DEFAULT '$')
RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    actual text := jsonb_typeof(doc);
    t text;
    k text;
    v jsonb;
    err text;
    matched boolean;
    i integer;
BEGIN
    IF schema IS NULL OR schema = 'true'::jsonb OR schema = '{}'::jsonb THEN
        RETURN NULL;
    END IF;
    IF schema = 'false'::jsonb THEN
        RETURN format('%s: no value is allowed here', path);
    END IF;

    IF schema ? 'type' THEN
        matched := false;
        FOR t IN SELECT x FROM jsonb_array_elements_text(
                CASE WHEN jsonb_typeof(schema -> 'type') = 'array' THEN schema -> 'type'
                     ELSE jsonb_build_array(schema -> 'type') END) AS x
        LOOP
            IF t = actual
               OR (t = 'integer' AND actual = 'number'
                   AND (doc #>> '{}')::numeric = trunc((doc #>> '{}')::numeric)) THEN
                matched := true;
            END IF;
        END LOOP;
        IF NOT matched THEN
            RETURN format('%s: expected type %s, got %s', path, schema -> 'type', actual);
        END IF;
    END IF;

    IF schema ? 'enum' AND NOT EXISTS (
        SELECT 1 FROM jsonb_array_elements(schema -> 'enum') AS e WHERE e = doc) THEN
        RETURN format('%s: %s is not one of %s', path, doc, schema -> 'enum');
    END IF;
    IF schema ? 'const' AND schema -> 'const' <> doc THEN
        RETURN format('%s: expected %s, got %s', path, schema -> 'const', doc);
    END IF;

    IF actual = 'object' THEN
        FOR k IN SELECT jsonb_array_elements_text(schema -> 'required') LOOP
            IF NOT doc ? k THEN
                RETURN format('%s: required property "%s" is missing', path, k);
            END IF;
        END LOOP;
        FOR k, v IN SELECT key, value FROM jsonb_each(schema -> 'properties') LOOP
            IF doc ? k THEN
                err := highwater.json_schema_error(v, doc -> k, path || '.' || k);
                IF err IS NOT NULL THEN RETURN err; END IF;
            END IF;
        END LOOP;
        IF schema ? 'additionalProperties' THEN
            FOR k IN SELECT jsonb_object_keys(doc) LOOP
                IF NOT coalesce((schema -> 'properties') ? k, false) THEN
                    IF schema -> 'additionalProperties' = 'false'::jsonb THEN
                        RETURN format('%s: property "%s" is not allowed', path, k);
                    END IF;
                    err := highwater.json_schema_error(schema -> 'additionalProperties', doc -> k,
                                                       path || '.' || k);
                    IF err IS NOT NULL THEN RETURN err; END IF;
                END IF;
            END LOOP;
        END IF;
        IF schema ? 'minProperties' AND (SELECT count(*) FROM jsonb_object_keys(doc))
                < (schema ->> 'minProperties')::int THEN
            RETURN format('%s: fewer than %s properties', path, schema ->> 'minProperties');
        END IF;
        IF schema ? 'maxProperties' AND (SELECT count(*) FROM jsonb_object_keys(doc))
                > (schema ->> 'maxProperties')::int THEN
            RETURN format('%s: more than %s properties', path, schema ->> 'maxProperties');
        END IF;
    ELSIF actual = 'array' THEN
        IF schema ? 'minItems' AND jsonb_array_length(doc) < (schema ->> 'minItems')::int THEN
            RETURN format('%s: fewer than %s items', path, schema ->> 'minItems');
        END IF;
        IF schema ? 'maxItems' AND jsonb_array_length(doc) > (schema ->> 'maxItems')::int THEN
            RETURN format('%s: more than %s items', path, schema ->> 'maxItems');
        END IF;
        IF schema ? 'items' THEN
            FOR i IN 0 .. jsonb_array_length(doc) - 1 LOOP
                err := highwater.json_schema_error(schema -> 'items', doc -> i,
                                                   path || '[' || i || ']');
                IF err IS NOT NULL THEN RETURN err; END IF;
            END LOOP;
        END IF;
    ELSIF actual = 'string' THEN
        IF schema ? 'minLength' AND char_length(doc #>> '{}') < (schema ->> 'minLength')::int THEN
            RETURN format('%s: shorter than %s characters', path, schema ->> 'minLength');
        END IF;
        IF schema ? 'maxLength' AND char_length(doc #>> '{}') > (schema ->> 'maxLength')::int THEN
            RETURN format('%s: longer than %s characters', path, schema ->> 'maxLength');
        END IF;
        IF schema ? 'pattern' AND NOT (doc #>> '{}') ~ (schema ->> 'pattern') THEN
            RETURN format('%s: %s does not match pattern %s', path, doc, schema -> 'pattern');
        END IF;
    ELSIF actual = 'number' THEN
        IF schema ? 'minimum' AND (doc #>> '{}')::numeric < (schema ->> 'minimum')::numeric THEN
            RETURN format('%s: %s is less than the minimum %s', path, doc, schema -> 'minimum');
        END IF;
        IF schema ? 'maximum' AND (doc #>> '{}')::numeric > (schema ->> 'maximum')::numeric THEN
            RETURN format('%s: %s is greater than the maximum %s', path, doc, schema -> 'maximum');
        END IF;
        IF schema ? 'exclusiveMinimum'
           AND (doc #>> '{}')::numeric <= (schema ->> 'exclusiveMinimum')::numeric THEN
            RETURN format('%s: %s is not greater than %s', path, doc, schema -> 'exclusiveMinimum');
        END IF;
        IF schema ? 'exclusiveMaximum'
           AND (doc #>> '{}')::numeric >= (schema ->> 'exclusiveMaximum')::numeric THEN
            RETURN format('%s: %s is not less than %s', path, doc, schema -> 'exclusiveMaximum');
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- Appends one event inside the caller's transaction and returns its id.
-- Errors (SQLSTATE): HW001 unknown event type, HW002 payload fails the type's schema or is not
-- valid, HW003 expected stream version does not match. Nothing is stored on error.
CREATE FUNCTION highwater.append(
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
-- direct rights on highwater.events: every event goes through these checks.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_known   boolean;
    v_schema  jsonb;
    v_err     text;
    v_meta    jsonb := coalesce(p_metadata, '{}'::jsonb);
    v_current bigint;
    v_version bigint;
    v_id      bigint;
BEGIN
    SELECT true, json_schema INTO v_known, v_schema
      FROM highwater.event_types WHERE event_type = p_event_type;
    IF v_known IS NULL THEN
        RAISE EXCEPTION 'unknown event type "%"', p_event_type
            USING ERRCODE = 'HW001',
                  HINT = format('register it first: `highwater event-types register %s` '
                                '(optionally with --schema FILE)', p_event_type);
    END IF;
    IF p_stream_type IS NULL OR p_stream_type = '' OR p_stream_id IS NULL OR p_stream_id = '' THEN
        RAISE EXCEPTION 'stream type and stream id must not be empty'
            USING ERRCODE = 'HW002', HINT = 'pass the aggregate type and its id, e.g. (''order'', ''42'')';
    END IF;
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'payload of event type "%" is NULL', p_event_type
            USING ERRCODE = 'HW002', HINT = 'pass a JSON value; use ''{}'' for an event without data';
    END IF;
    IF jsonb_typeof(v_meta) <> 'object' THEN
        RAISE EXCEPTION 'metadata must be a JSON object, got %', jsonb_typeof(v_meta)
            USING ERRCODE = 'HW002';
    END IF;
    IF v_schema IS NOT NULL THEN
        v_err := highwater.json_schema_error(v_schema, p_payload, '$');
        IF v_err IS NOT NULL THEN
            RAISE EXCEPTION 'payload of event type "%" fails its JSON Schema: %', p_event_type, v_err
                USING ERRCODE = 'HW002',
                      HINT = 'fix the payload, or register a new schema with '
                             '`highwater event-types register ' || p_event_type || ' --schema FILE`';
        END IF;
    END IF;

    -- A handler running inside a SQL sink sets these, so what it appends is linked to its cause.
    IF NOT v_meta ? 'correlation_id' THEN
        v_meta := v_meta || jsonb_build_object('correlation_id',
            coalesce(nullif(current_setting('highwater.correlation_id', true), ''),
                     gen_random_uuid()::text));
    END IF;
    IF NOT v_meta ? 'causation_id'
       AND nullif(current_setting('highwater.causation_id', true), '') IS NOT NULL THEN
        v_meta := v_meta || jsonb_build_object('causation_id',
            current_setting('highwater.causation_id', true));
    END IF;

    IF p_expected_version IS NOT NULL THEN
        SELECT max(stream_version) INTO v_current FROM highwater.events
         WHERE stream_type = p_stream_type AND stream_id = p_stream_id;
        IF coalesce(v_current, 0) <> p_expected_version THEN
            RAISE EXCEPTION 'stream %/% is at version %, expected %',
                p_stream_type, p_stream_id, coalesce(v_current, 0), p_expected_version
                USING ERRCODE = 'HW003',
                      HINT = 'another writer appended first: reload the stream and retry';
        END IF;
        v_version := p_expected_version + 1;
    END IF;

    IF v_version IS NULL THEN
        INSERT INTO highwater.events
            (stream_type, stream_id, event_type, tenant_id, payload, metadata)
        VALUES (p_stream_type, p_stream_id, p_event_type,
                coalesce(p_tenant_id, nullif(current_setting('highwater.tenant_id', true), '')),
                p_payload, v_meta)
        RETURNING id INTO v_id;
    ELSE
        -- ON CONFLICT rather than an exception block: no subtransaction per append.
        INSERT INTO highwater.events
            (stream_type, stream_id, stream_version, event_type, tenant_id, payload, metadata)
        VALUES (p_stream_type, p_stream_id, v_version, p_event_type,
                coalesce(p_tenant_id, nullif(current_setting('highwater.tenant_id', true), '')),
                p_payload, v_meta)
        ON CONFLICT (stream_type, stream_id, stream_version) WHERE stream_version IS NOT NULL
        DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NULL THEN
            RAISE EXCEPTION 'stream %/% already has version %', p_stream_type, p_stream_id, v_version
                USING ERRCODE = 'HW003',
                      HINT = 'another writer appended first: reload the stream and retry';
        END IF;
    END IF;
    RETURN v_id;
END
$$;

REVOKE ALL ON FUNCTION highwater.append(text, text, text, jsonb, jsonb, text, bigint) FROM PUBLIC;
