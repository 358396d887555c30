-- The payload as a consumer with `eventVersions` (docs/consumers.md) reads it: `p_want` is the
-- consumer's choice as JSON, `{"*": "latest"}` for every type or per type, `{"OrderPlaced":
-- "latest", "OrderShipped": 2}` (a number: upcast up to that version; a type not named, and
-- without "*", reads as stored). An event stored under a former name is looked up by the type it
-- was renamed to. Called only for such consumers: the read functions and the SQL sink's code
-- pass the stored payload without calling it otherwise.
CREATE OR REPLACE FUNCTION highwater.upcast_for(p_event_type text, p_version integer, p_payload jsonb,
                                                p_want jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_type text;
    v_want jsonb;
BEGIN
    SELECT a.event_type INTO v_type FROM highwater.event_type_aliases a WHERE a.alias = p_event_type;
    v_want := coalesce(p_want -> coalesce(v_type, p_event_type), p_want -> p_event_type, p_want -> '*');
    IF v_want IS NULL OR jsonb_typeof(v_want) = 'null' OR v_want = '"stored"' THEN
        RETURN p_payload;
    ELSIF jsonb_typeof(v_want) = 'number' THEN
        RETURN highwater.upcast(p_event_type, p_version, p_payload, (v_want #>> '{}')::integer);
    END IF;
    RETURN highwater.upcast(p_event_type, p_version, p_payload);
END
$$;
