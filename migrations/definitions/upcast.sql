-- The payload of an event of type `p_event_type` stored with schema version `p_version` (NULL:
-- version 1) as the latest version of its type reads it (or version `p_to`): the upcasts of the
-- version steps above it (highwater.event_type_versions.upcast, SQL expressions over `payload`),
-- applied in order. A stored event never changes; this runs on read, the same for delivery,
-- rebuild, redrive and `events read --latest` (docs/events.md, "Versions").
--
-- An event stored under a former name (highwater.event_type_aliases) goes through the steps of
-- the type it was renamed to. A type without upcasts costs one index probe per event; readers
-- that do not ask for the latest version never call it.
-- STABLE (an upcast is an expression over the payload; one using a volatile function would be a
-- registrar's mistake the dry run cannot see). Runs with the caller's rights: the dispatcher's
-- role evaluates the registered expressions, as it runs a SQL sink's registered statements.
CREATE OR REPLACE FUNCTION highwater.upcast(p_event_type text, p_version integer, p_payload jsonb,
                                            p_to integer DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_type    text := p_event_type;
    v_payload jsonb := p_payload;
    v_step    record;
BEGIN
    SELECT a.event_type INTO v_type FROM highwater.event_type_aliases a WHERE a.alias = p_event_type;
    IF NOT FOUND THEN
        v_type := p_event_type;
    END IF;
    FOR v_step IN
        SELECT s.version, s.upcast FROM highwater.event_type_versions s
         WHERE s.event_type = v_type AND s.version > coalesce(p_version, 1)
           AND (p_to IS NULL OR s.version <= p_to) AND s.upcast IS NOT NULL
         ORDER BY s.version
    LOOP
        EXECUTE format('SELECT (%s)::jsonb FROM (SELECT $1 AS payload) AS e', v_step.upcast)
           INTO v_payload USING v_payload;
    END LOOP;
    RETURN v_payload;
END
$$;

COMMENT ON FUNCTION highwater.upcast(text, integer, jsonb, integer) IS
    'The payload of an event stored at a schema version, upcast to the latest version of its type (or p_to).';

