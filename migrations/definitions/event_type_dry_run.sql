-- The dry run of a version being registered (event_types::apply_type, in the registration's
-- transaction, after its version row is written): every stored event of the type (and of its
-- former names) appended with an earlier version, through the upcasts up to `p_version`, then
-- checked against that version's schema. Returns the first event that fails (an upcast that
-- raises, or a payload the schema refuses), none when all fit. Reads only: a failing upcast is
-- caught in a subtransaction that is rolled back.
CREATE OR REPLACE FUNCTION highwater.event_type_dry_run(p_event_type text, p_version integer)
RETURNS TABLE (event_id bigint, from_version integer, problem text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_schema  jsonb;
    v_payload jsonb;
    v_err     text;
    v_event   record;
BEGIN
    SELECT s.json_schema INTO v_schema FROM highwater.event_type_versions s
     WHERE s.event_type = p_event_type AND s.version = p_version;
    FOR v_event IN
        SELECT e.id, coalesce(e.schema_version, 1) AS version, e.payload FROM highwater.events e
         WHERE e.event_type IN (SELECT p_event_type
                                UNION ALL
                                SELECT a.alias FROM highwater.event_type_aliases a WHERE a.event_type = p_event_type)
           AND coalesce(e.schema_version, 1) < p_version
         ORDER BY e.tx_id, e.id
    LOOP
        BEGIN
            v_payload := highwater.upcast(p_event_type, v_event.version, v_event.payload, p_version);
        EXCEPTION WHEN OTHERS THEN
            event_id := v_event.id;
            from_version := v_event.version;
            problem := format('the upcast failed: %s (SQLSTATE %s)', SQLERRM, SQLSTATE);
            RETURN NEXT;
            RETURN;
        END;
        IF v_schema IS NOT NULL THEN
            v_err := highwater.json_schema_check(v_schema, v_payload);
            IF v_err IS NOT NULL THEN
                event_id := v_event.id;
                from_version := v_event.version;
                problem := format('the payload %s fails the schema of version %s: %s',
                                  left(v_payload::text, 200), p_version, v_err);
                RETURN NEXT;
                RETURN;
            END IF;
        END IF;
    END LOOP;
END
$$;
