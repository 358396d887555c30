-- The payload of an event of type `p_event_type` stored with schema version `p_version` (NULL:
-- version 1) as the latest version of its type reads it (or version `p_to`): the upcasts of the
-- version steps above it (highwater.event_type_versions.upcast, SQL expressions over `payload`),
-- applied in order. A stored event never changes; this runs on read, the same for delivery,
-- rebuild, redrive and `events read --latest` (docs/events.md, "Versions").
--
-- An event stored under a former name (highwater.event_type_aliases) goes through the steps of
-- the type it was renamed to. A type without upcasts costs one index probe per event; readers
-- that do not ask for the latest version never call it.
-- The steps run in highwater.hw_upcasts, generated from the registry (upcast_generate.sql): one
-- call per event, each step a SQL function planned once per transaction that calls it. Until
-- 0.4.0 each step was an EXECUTE of its expression, parsed and planned for every event (issue 46).
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
    v_type text;
BEGIN
    SELECT a.event_type INTO v_type FROM highwater.event_type_aliases a WHERE a.alias = p_event_type;
    IF NOT FOUND THEN
        v_type := p_event_type;
    END IF;
    RETURN highwater.hw_upcasts(v_type, coalesce(p_version, 1), p_payload, p_to);
END
$$;

COMMENT ON FUNCTION highwater.upcast(text, integer, jsonb, integer) IS
    'The payload of an event stored at a schema version, upcast to the latest version of its type (or p_to).';

