-- The SQL sink in one round trip per batch (issue 14).
--
-- A consumer's statement used to run once per event from the dispatcher: two round trips per
-- event (the SET LOCALs, then the statement). Now the dispatcher names the batch (its events'
-- ids and the range of their transaction ids) in one call of `highwater.sql_sink_apply`, which
-- reads those events from highwater.events itself (they never travel back to the server) and
-- runs the statement for each of them server-side.
--
-- The statement is planned once per session, not once per event: on first use in a session
-- `highwater.sql_sink_prepare` wraps it in a temporary PL/pgSQL function (`pg_temp`, private to
-- the session and gone with it; no catalog change is ever shared) whose parameters are the nine
-- the statement already uses ($1 payload .. $9 created_at), and a temporary PL/pgSQL loop that
-- calls it with a static call; PL/pgSQL caches both plans. The name is a hash of the statement, so a changed
-- definition gets new functions and never runs a stale one. The dispatcher calls prepare in its
-- own short transaction before the cursor transaction: creating a function writes the catalog,
-- which takes a transaction id, and a transaction id held while a slow statement runs would hold
-- the snapshot fence back for every consumer.
--
-- Per-event semantics are those of the old client loop: per event, `highwater.tenant_id`
-- (row-level security), `highwater.correlation_id` and `highwater.causation_id` are set locally;
-- the sink's role is taken for the statement (the events are read before, as the dispatcher's
-- role, which the sink's role need not be able to read highwater.events); the first failing
-- event is reported by its index, and nothing of the batch is left applied by a failed call (one
-- subtransaction per batch, not per event), so the caller re-applies exactly the events before
-- it and records the failure. `statement_timeout` is set by the caller for the whole call: a
-- timeout while the first event runs is that event's failure, as before; a timeout at a later
-- event means the batch as a whole ran long, not that this event is poison, so it is reported as
-- `deferred`: the caller commits the events before it and starts the next batch at it, with the
-- full timeout again.
--
-- The set form (`form: set`) runs the statement once over the batch as the relation
-- `highwater_batch` (the same nine columns): a temporary view of highwater.events restricted to
-- the batch named in transaction-local settings, so naming the batch writes nothing and takes no
-- transaction id. On failure, the caller asks for `single` mode: the statement runs over
-- one-event batches, in order, which finds the failing event exactly.

-- The functions' name for a statement.
CREATE FUNCTION highwater.sql_sink_name(p_form text, p_statement text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT 'hw_sink_' || md5(p_form || ':' || p_statement) $$;

-- Creates the session's functions for a statement unless they exist; returns NULL, or why the
-- statement cannot run (creating the functions checks its syntax, tables and columns).
CREATE FUNCTION highwater.sql_sink_prepare(p_form text, p_statement text)
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
        EXECUTE format('CREATE FUNCTION pg_temp.%I(%s) RETURNS void LANGUAGE plpgsql AS %L',
                       p_name, v_sig,
                       E'#variable_conflict use_column\nDECLARE highwater_discarded record;\nBEGIN\n'
                       || CASE WHEN v_rows THEN 'FOR highwater_discarded IN ' || v_statement
                                                || E'\nLOOP END LOOP;'
                               ELSE v_statement || E'\n;' END
                       || E'\nEND');
        EXECUTE format($body$
CREATE FUNCTION pg_temp.%I(%s) LANGUAGE plpgsql AS $loop$
%s
    BEGIN
        PERFORM set_config('role', coalesce(p_role, 'none'), true);
        FOREACH r IN ARRAY coalesce(v_batch, '{}') LOOP
            v_cur := v_cur + 1;
            PERFORM set_config('highwater.tenant_id', coalesce(r.tenant_id, ''), true),
                    set_config('highwater.correlation_id',
                               CASE WHEN jsonb_typeof(r.metadata -> 'correlation_id') = 'string'
                                    THEN r.metadata ->> 'correlation_id' ELSE '' END, true),
                    set_config('highwater.causation_id', r.id::text, true);
            PERFORM pg_temp.%I(r.payload, r.id, r.stream_type, r.stream_id, r.event_type,
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

-- Applies a batch through the consumer's statement, prepared in this session by
-- `highwater.sql_sink_prepare` (see above). The batch is the events `p_ids`, whose transaction
-- ids lie in [p_lo, p_hi]; they are applied in (tx_id, id) order. `failed` is NULL when every
-- event was applied; otherwise it is the 0-based index of the first event that failed, nothing
-- of the batch is applied, and `message` says why.
CREATE FUNCTION highwater.sql_sink_apply(
    p_form      text,
    p_statement text,
    p_role      text,
    p_single    boolean,
    p_lo        xid8,
    p_hi        xid8,
    p_ids       bigint[],
    OUT failed   integer,
    OUT deferred boolean,
    OUT message  text
)
LANGUAGE plpgsql
AS $fn$
BEGIN
    EXECUTE format('SELECT * FROM pg_temp.%I($1, $2, $3, $4, $5)',
                   highwater.sql_sink_name(p_form, p_statement) || '_batch')
       INTO failed, deferred, message
      USING p_role, p_single, p_lo, p_hi, p_ids;
END
$fn$;
