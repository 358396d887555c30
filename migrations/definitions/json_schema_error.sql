-- Validates `doc` against the JSON Schema subset documented in docs/events.md and returns the first
-- violation as text (NULL when valid). It lives in the database so that every writer, whatever its
-- language, is held to the same schema; `highwater event-types register` refuses schemas that use
-- keywords outside this subset, so nothing is silently unchecked.
--
-- Its operators are not qualified and it has no SET clause of its own: highwater.append, which
-- runs with the caller's search path, calls it through highwater.json_schema_check, which pins
-- the search path (json_schema_check.sql). Since 20261130000002_append.sql.
CREATE OR REPLACE FUNCTION highwater.json_schema_error(schema jsonb, doc jsonb, path text DEFAULT '$')
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
