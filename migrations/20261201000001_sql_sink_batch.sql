-- The SQL sink in one round trip per batch (issue 14).
--
-- A consumer's statement used to run once per event from the dispatcher: two round trips per
-- event (the SET LOCALs, then the statement). Now the dispatcher sends the whole batch as
-- arrays to `highwater.sql_sink_apply`, which runs the statement for each event server-side.
--
-- The statement is planned once per batch, not once per event: on first use in a session
-- `highwater.sql_sink_prepare` wraps it in a temporary SQL function (`pg_temp`, private to the session, gone with
-- it; no catalog change is ever shared) whose parameters are the nine the statement already
-- uses ($1 payload .. $9 created_at), and a temporary PL/pgSQL loop that calls it with a static
-- call: PL/pgSQL caches that call's plan, and a SQL function keeps its statement's plan for the
-- whole transaction. The name is a hash of the statement, so a changed definition gets new
-- functions and never runs a stale one. The dispatcher calls prepare in its own short
-- transaction before the cursor transaction: creating a function writes the catalog, which
-- takes a transaction id, and a transaction id held while a slow statement runs would hold the
-- snapshot fence back for every consumer.
--
-- Per-event semantics are those of the old client loop: per event, `highwater.tenant_id`
-- (row-level security), `highwater.correlation_id` and `highwater.causation_id` are set locally;
-- the sink's role is taken for the statement; the first failing event is reported by its index,
-- and nothing of the batch is left applied by a failed call (one subtransaction per batch, not
-- per event), so the caller re-applies exactly the events before it and records the failure.
-- `statement_timeout` is set by the caller for the whole call: a timeout while the first event
-- runs is that event's failure, as before; a timeout at a later event means the batch as a whole
-- ran long, not that this event is poison, so it is reported as `deferred`: the caller commits
-- the events before it and starts the next batch at it, with the full timeout again.
--
-- The set form (`form: set`) runs the statement once over the batch as the relation
-- `highwater_batch` (the same nine columns): a temporary view over a transaction-local setting
-- that holds the batch as JSON, so filling it writes nothing and takes no transaction id. On
-- failure, the caller asks for `single` mode: the statement runs over one-event batches, in
-- order, which finds the failing event exactly.

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
    v_message text;
    v_state text;
    v_event_args constant text :=
        'jsonb, bigint, text, text, text, text, jsonb, bigint, timestamptz';
    v_batch_args constant text :=
        'p_role text, p_single boolean, p_payload jsonb[], p_id bigint[], p_stream_type text[], '
        'p_stream_id text[], p_event_type text[], p_tenant text[], p_metadata jsonb[], '
        'p_version bigint[], p_created timestamptz[], '
        'OUT failed integer, OUT deferred boolean, OUT message text';
    -- Shared by both forms: what a failure reports. OTHERS does not cover query_canceled
    -- (statement_timeout), which is named so that a timeout is reported like any failure.
    v_handler constant text := $h$
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        GET STACKED DIAGNOSTICS message = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
        message := message || ' (SQLSTATE ' || v_state || ')';
        failed := greatest(v_cur - 1, 0);
        deferred := v_state = '57014' AND v_cur > 1;
    END;
END $h$;
BEGIN
    IF to_regprocedure(format('pg_temp.%I(text, boolean, jsonb[], bigint[], text[], text[], text[], '
                              'text[], jsonb[], bigint[], timestamptz[])', p_name || '_batch')) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    IF p_form = 'perEvent' THEN
        EXECUTE format('CREATE FUNCTION pg_temp.%I(%s) RETURNS void LANGUAGE sql AS %L',
                       p_name, v_event_args, p_statement);
        EXECUTE format($body$
CREATE FUNCTION pg_temp.%I(%s) LANGUAGE plpgsql AS $loop$
DECLARE
    v_cur integer := 0;
    v_state text;
BEGIN
    deferred := false;
    BEGIN
        PERFORM set_config('role', coalesce(p_role, 'none'), true);
        FOR i IN 1 .. coalesce(cardinality(p_id), 0) LOOP
            v_cur := i;
            PERFORM set_config('highwater.tenant_id', coalesce(p_tenant[i], ''), true),
                    set_config('highwater.correlation_id',
                               CASE WHEN jsonb_typeof(p_metadata[i] -> 'correlation_id') = 'string'
                                    THEN p_metadata[i] ->> 'correlation_id' ELSE '' END, true),
                    set_config('highwater.causation_id', p_id[i]::text, true);
            PERFORM pg_temp.%I(p_payload[i], p_id[i], p_stream_type[i], p_stream_id[i],
                               p_event_type[i], p_tenant[i], p_metadata[i], p_version[i], p_created[i]);
        END LOOP;
        PERFORM set_config('role', 'none', true), set_config('highwater.tenant_id', '', true);
    %s
$loop$ $body$, p_name || '_batch', v_batch_args, p_name, v_handler);
    ELSIF p_form = 'set' THEN
        EXECUTE $v$
            CREATE OR REPLACE TEMPORARY VIEW highwater_batch AS
            SELECT * FROM json_to_recordset(current_setting('highwater.batch')::json) AS b(
                payload jsonb, id bigint, stream_type text, stream_id text, event_type text,
                tenant_id text, metadata jsonb, stream_version bigint, created_at timestamptz)$v$;
        -- The sink's role reads it; it is visible to this session only.
        GRANT SELECT ON pg_temp.highwater_batch TO PUBLIC;
        EXECUTE format('CREATE FUNCTION pg_temp.%I() RETURNS void LANGUAGE sql AS %L',
                       p_name, p_statement);
        EXECUTE format($body$
CREATE FUNCTION pg_temp.%I(%s) LANGUAGE plpgsql AS $loop$
DECLARE
    v_cur integer := 0;
    v_state text;
    v_lo integer;
    v_hi integer;
BEGIN
    deferred := false;
    BEGIN
        -- i = 0: the whole batch at once; single: one event at a time.
        FOR i IN CASE WHEN p_single THEN 1 ELSE 0 END .. CASE WHEN p_single THEN coalesce(cardinality(p_id), 0) ELSE 0 END LOOP
            v_cur := i;
            v_lo := CASE WHEN i = 0 THEN 1 ELSE i END;
            v_hi := CASE WHEN i = 0 THEN coalesce(cardinality(p_id), 0) ELSE i END;
            PERFORM set_config('highwater.batch', coalesce((
                SELECT json_agg(b)::text
                  FROM unnest(p_payload[v_lo:v_hi], p_id[v_lo:v_hi], p_stream_type[v_lo:v_hi],
                              p_stream_id[v_lo:v_hi], p_event_type[v_lo:v_hi], p_tenant[v_lo:v_hi],
                              p_metadata[v_lo:v_hi], p_version[v_lo:v_hi], p_created[v_lo:v_hi])
                       AS b(payload, id, stream_type, stream_id, event_type, tenant_id, metadata,
                            stream_version, created_at)), '[]'), true);
            PERFORM set_config('role', coalesce(p_role, 'none'), true);
            PERFORM pg_temp.%I();
            PERFORM set_config('role', 'none', true);
        END LOOP;
    %s
$loop$ $body$, p_name || '_batch', v_batch_args, p_name, v_handler);
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
-- `highwater.sql_sink_prepare` (see above). `failed` is NULL when every
-- event was applied; otherwise it is the 0-based index of the first event that failed, nothing
-- of the batch is applied, and `message` says why.
CREATE FUNCTION highwater.sql_sink_apply(
    p_form        text,
    p_statement   text,
    p_role        text,
    p_single      boolean,
    p_payload     jsonb[],
    p_id          bigint[],
    p_stream_type text[],
    p_stream_id   text[],
    p_event_type  text[],
    p_tenant      text[],
    p_metadata    jsonb[],
    p_version     bigint[],
    p_created     timestamptz[],
    OUT failed    integer,
    OUT deferred  boolean,
    OUT message   text
)
LANGUAGE plpgsql
AS $fn$
BEGIN
    EXECUTE format('SELECT * FROM pg_temp.%I($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)',
                   highwater.sql_sink_name(p_form, p_statement) || '_batch')
       INTO failed, deferred, message
      USING p_role, p_single, p_payload, p_id, p_stream_type, p_stream_id, p_event_type,
            p_tenant, p_metadata, p_version, p_created;
END
$fn$;
