-- The SQL sink's per-event loop at about half its server-side cost per event (issue 14).
--
-- The loop that `highwater.sql_sink_prepare` generates ran, per event, a PERFORM of the three
-- set_config calls and a PERFORM of the statement's function. A PERFORM is a query: PL/pgSQL
-- starts and ends an executor for it. An assignment of an expression without a table (`x :=
-- set_config(...)`, `x := f(...)`) is evaluated by PL/pgSQL's simple-expression path instead,
-- without an executor. Measured in psql on 50,000 events in one transaction (the per-event
-- settings and the bench's INSERT): 10.4 µs per event with PERFORM, 5.8-7.0 µs with assignments,
-- 3.2-4.7 µs for the bare INSERT loop. Same calls, same order, same settings, same errors: the
-- statement's function now returns 0 instead of nothing so that it can be assigned.
--
-- The functions' names change with the body (`hw_sink2_`), so a session that made the old
-- functions before this migration makes the new ones on its next prepare instead of reusing
-- the old ones; the old ones go with the session.

CREATE OR REPLACE FUNCTION highwater.sql_sink_name(p_form text, p_statement text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT 'hw_sink2_' || md5(p_form || ':' || p_statement) $$;

CREATE OR REPLACE FUNCTION highwater.sql_sink_prepare(p_form text, p_statement text)
RETURNS text
LANGUAGE plpgsql
AS $fn$
DECLARE
    p_name constant text := highwater.sql_sink_name(p_form, p_statement);
    v_sig text;
    v_statement text;
    v_rows boolean;
    v_message text;
    v_state text;
    v_batch_args constant text :=
        'p_role text, p_single boolean, p_lo xid8, p_hi xid8, p_ids bigint[], '
        'OUT failed integer, OUT deferred boolean, OUT message text';
    -- Shared by both forms: the batch, in delivery order, read as the dispatcher's role.
    v_read constant text := $r$
DECLARE
    v_cur integer := 0;
    v_state text;
    v_set text;
    v_done integer;
    v_batch highwater.events[];
    r highwater.events;
BEGIN
    deferred := false;
    -- The set form reads the batch through its view; only one event at a time needs it here.
    IF p_single OR %L = 'perEvent' THEN
        SELECT array_agg(e ORDER BY e.tx_id, e.id) INTO v_batch
          FROM highwater.events e
         WHERE e.tx_id BETWEEN p_lo AND p_hi AND e.id = ANY (p_ids);
    END IF;
    IF (p_single OR %L = 'perEvent')
       AND coalesce(cardinality(v_batch), 0) <> coalesce(cardinality(p_ids), 0) THEN
        RAISE EXCEPTION 'highwater: %% of the batch''s %% events were not found',
            coalesce(cardinality(p_ids), 0) - coalesce(cardinality(v_batch), 0), cardinality(p_ids);
    END IF;
$r$;
    -- What a failure reports. OTHERS does not cover query_canceled (statement_timeout), which
    -- is named so that a timeout is reported like any failure.
    v_handler constant text := $h$
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        GET STACKED DIAGNOSTICS message = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
        message := message || ' (SQLSTATE ' || v_state || ')';
        failed := greatest(v_cur - 1, 0);
        deferred := v_state = '57014' AND v_cur > 1;
    END;
END $h$;
BEGIN
    IF to_regprocedure(format('pg_temp.%I(text, boolean, xid8, xid8, bigint[])', p_name || '_batch')) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    IF p_form = 'perEvent' THEN
        -- The statement becomes a PL/pgSQL function of the nine parameters ($1..$9 keep their
        -- meaning): PL/pgSQL keeps its plan for the session, where a SQL function would set up
        -- its executor on every call. A statement that returns rows (SELECT, RETURNING) cannot
        -- stand alone in PL/pgSQL, so it runs as a loop that discards them; a SQL function that
        -- must return rows tells which kind it is, and checks the statement on the way.
        v_sig := 'jsonb, bigint, text, text, text, text, jsonb, bigint, timestamptz';
        v_statement := rtrim(p_statement, E' \t\r\n;');
        BEGIN
            EXECUTE format('CREATE FUNCTION pg_temp.%I(%s) RETURNS SETOF record LANGUAGE sql AS %L',
                           p_name || '_check', v_sig, v_statement);
            v_rows := true;
        EXCEPTION WHEN invalid_function_definition THEN
            v_rows := false;
        END;
        EXECUTE format('CREATE FUNCTION pg_temp.%I(%s) RETURNS integer LANGUAGE plpgsql AS %L',
                       p_name, v_sig,
                       E'#variable_conflict use_column\nDECLARE highwater_discarded record;\nBEGIN\n'
                       || CASE WHEN v_rows THEN 'FOR highwater_discarded IN ' || v_statement
                                                || E'\nLOOP END LOOP;'
                               ELSE v_statement || E'\n;' END
                       || E'\nRETURN 0;\nEND');
        EXECUTE format($body$
CREATE FUNCTION pg_temp.%I(%s) LANGUAGE plpgsql AS $loop$
%s
    BEGIN
        PERFORM set_config('role', coalesce(p_role, 'none'), true);
        FOREACH r IN ARRAY coalesce(v_batch, '{}') LOOP
            v_cur := v_cur + 1;
            v_set := set_config('highwater.tenant_id', coalesce(r.tenant_id, ''), true);
            v_set := set_config('highwater.correlation_id',
                                CASE WHEN jsonb_typeof(r.metadata -> 'correlation_id') = 'string'
                                     THEN r.metadata ->> 'correlation_id' ELSE '' END, true);
            v_set := set_config('highwater.causation_id', r.id::text, true);
            v_done := pg_temp.%I(r.payload, r.id, r.stream_type, r.stream_id, r.event_type,
                                 r.tenant_id, r.metadata, r.stream_version, r.created_at);
        END LOOP;
        PERFORM set_config('role', 'none', true), set_config('highwater.tenant_id', '', true);
    %s
$loop$ $body$, p_name || '_batch', v_batch_args, format(v_read, p_form, p_form), p_name, v_handler);
    ELSIF p_form = 'set' THEN
        EXECUTE $v$
            CREATE OR REPLACE TEMPORARY VIEW highwater_batch AS
            SELECT e.payload, e.id, e.stream_type, e.stream_id, e.event_type, e.tenant_id,
                   e.metadata, e.stream_version, e.created_at
              FROM highwater.events e
             WHERE e.tx_id BETWEEN current_setting('highwater.batch_lo')::xid8
                               AND current_setting('highwater.batch_hi')::xid8
               AND e.id = ANY (current_setting('highwater.batch_ids')::bigint[])$v$;
        -- The sink's role reads the batch through the view (with the view owner's rights on
        -- highwater.events); the view is visible to this session only.
        GRANT SELECT ON pg_temp.highwater_batch TO PUBLIC;
        EXECUTE format('CREATE FUNCTION pg_temp.%I() RETURNS void LANGUAGE sql AS %L',
                       p_name, p_statement);
        EXECUTE format($body$
CREATE FUNCTION pg_temp.%I(%s) LANGUAGE plpgsql AS $loop$
%s
    BEGIN
        IF NOT p_single THEN
            PERFORM set_config('highwater.batch_lo', p_lo::text, true),
                    set_config('highwater.batch_hi', p_hi::text, true),
                    set_config('highwater.batch_ids', p_ids::text, true),
                    set_config('role', coalesce(p_role, 'none'), true);
            PERFORM pg_temp.%I();
        ELSE
            FOREACH r IN ARRAY coalesce(v_batch, '{}') LOOP
                v_cur := v_cur + 1;
                -- The batch's range, narrowed to this one event by its id.
                PERFORM set_config('highwater.batch_lo', p_lo::text, true),
                        set_config('highwater.batch_hi', p_hi::text, true),
                        set_config('highwater.batch_ids', ARRAY[r.id]::text, true),
                        set_config('role', coalesce(p_role, 'none'), true);
                PERFORM pg_temp.%I();
                PERFORM set_config('role', 'none', true);
            END LOOP;
        END IF;
        PERFORM set_config('role', 'none', true), set_config('highwater.batch_ids', '{}', true);
    %s
$loop$ $body$, p_name || '_batch', v_batch_args, format(v_read, p_form, p_form), p_name, p_name, v_handler);
    ELSE
        RETURN format('unknown SQL sink form "%s"', p_form);
    END IF;
    RETURN NULL;
EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
    RETURN v_message || ' (SQLSTATE ' || v_state || ')';
END
$fn$;
