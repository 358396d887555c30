-- Creates the session's functions for a SQL sink's statement unless they exist; returns NULL, or
-- why the statement cannot run (creating the functions checks its syntax, tables and columns).
--
-- The SQL sink in one round trip per batch (issue 14; 20261201000001_sql_sink_batch.sql). The
-- dispatcher names the batch (its events' ids and the range of their transaction ids) in one call
-- of `highwater.sql_sink_apply`, which reads those events from highwater.events itself (they
-- never travel back to the server) and runs the statement for each of them server-side.
--
-- The statement is planned once per session, not once per event: on first use in a session this
-- wraps it in a temporary PL/pgSQL function (`pg_temp`, private to the session and gone with it;
-- no catalog change is ever shared) whose parameters are the nine the statement already uses ($1
-- payload .. $9 created_at), and a temporary PL/pgSQL loop that calls it with a static call;
-- PL/pgSQL caches both plans. The name is a hash of the statement (sql_sink_name.sql), so a
-- changed definition gets new functions and never runs a stale one. The dispatcher calls prepare
-- in its own short transaction before the cursor transaction: creating a function writes the
-- catalog, which takes a transaction id, and a transaction id held while a slow statement runs
-- would hold the snapshot fence back for every consumer.
--
-- Per-event semantics are those of the old client loop: per event, `highwater.tenant_id`
-- (row-level security), `highwater.correlation_id` and `highwater.causation_id` are set locally,
-- and `highwater.traceparent`/`highwater.tracestate` for an event with the writer's trace (issue 48);
-- the sink's role is taken for the statement (the events are read before, as the dispatcher's
-- role, which the sink's role need not be able to read highwater.events); the first failing
-- event is reported by its index, and nothing of the batch is left applied by a failed call (one
-- subtransaction per batch, not per event), so the caller re-applies exactly the events before
-- it and records the failure. `statement_timeout` is set by the caller for the whole call: a
-- timeout while the first event runs is that event's failure; a timeout at a later event means
-- the batch as a whole ran long, not that this event is poison, so it is reported as `deferred`:
-- the caller commits the events before it and starts the next batch at it, with the full timeout
-- again.
--
-- The set form (`form: set`) runs the statement once over the batch as the relation
-- `highwater_batch` (the same nine columns): a temporary view of highwater.events restricted to
-- the batch named in transaction-local settings, so naming the batch writes nothing and takes no
-- transaction id. On failure, the caller asks for `single` mode: the statement runs over
-- one-event batches, in order, which finds the failing event exactly.
--
-- The per-event loop assigns (`v_set := set_config(...)`, `v_done := f(...)`) instead of
-- PERFORMing (20261202000030_sql_sink_simple_calls.sql): a PERFORM is a query, for which PL/pgSQL
-- starts and ends an executor; an assignment of an expression without a table is evaluated by
-- PL/pgSQL's simple-expression path instead. Measured in psql on 50,000 events in one
-- transaction (the per-event settings and the bench's INSERT): 10.4 µs per event with PERFORM,
-- 5.8-7.0 µs with assignments, 3.2-4.7 µs for the bare INSERT loop. So the statement's function
-- returns 0 instead of nothing.
--
-- Both forms read the batch as one ordered range of highwater.events
-- (20261202000040_sql_sink_range_read.sql), from the first event's position to the last's, both
-- bounds index conditions of the (tx_id, id) index, in order. Before, `tx_id BETWEEN lo AND hi
-- AND id = ANY (ids)` compared each row against the ids one by one (quadratic in the batch
-- size), and in the view, where the ids come from a setting, the setting's text was parsed again
-- for every row: 38 ms for the view over a batch of 1,000 against 0.4 ms for the range alone
-- (docs/benchmarks.md).
-- - per event: the loop reads the range as it goes and walks the ids beside it; an event of the
--   range that is not the next id (another type, another partition, seen by a read model's
--   bootstrap) is passed over, so the ids are still what decides, in one pass over each. The
--   query's portal opens as the dispatcher's role, before the first event takes the sink's
--   role, so the sink's role still needs no right on highwater.events. An id the range did not
--   hold (an event gone since the dispatcher read it) fails the call as a whole, after the
--   block that reports events' failures, so no event is blamed for it.
-- - a batch that is a small part of its range (a consumer of a few of many types: its batch of
--   100 spans 20,000 events in the bench's scenario 12) is read by its events' positions
--   instead, each `(tx_id, id)` pair looked up with an equality on both columns of the
--   (tx_id, id) index (OFFSET 0 keeps the lookups), then sorted back into the batch's order: a
--   join PostgreSQL may flatten is free to return them in another, and the loop then misses one
--   (tests/type_paths.rs). Walking the range cost every event of every other type once per
--   consumer (20261204000100_type_index.sql). The test is on the ids' span, first to last (a
--   batch whose ids are close lies in a range about as long), and only picks the cheaper read:
--   both return the batch's events in its order. Until 0.4.0 (`hw_sink5_`) the lookup had the
--   ids only, `id = u.id AND tx_id BETWEEN lo AND hi`: on the generic plan that became the
--   index condition `tx_id >= lo AND tx_id <= hi AND id = u.id` of the (tx_id, id) index, a scan
--   of the batch's whole transaction range for every id, which costs nothing while each event
--   has a transaction of its own and everything once transactions hold several events (issue
--   44: 309 ms for a batch of 100 with 500 events a transaction, 2.2 ms with one). The pairs
--   come from the dispatcher (`highwater.sql_sink_apply_positions`); a caller that names the
--   batch by ids alone (`highwater.sql_sink_apply`) has them read in one walk of the range.
-- - set: the view keeps the range and tests membership with `id IN (SELECT unnest(ids))`, which
--   PostgreSQL evaluates once (a hash or a join), whatever plan the statement gets.
--
-- Changing the code generated here: change the prefix in sql_sink_name.sql too.
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
        'p_role text, p_single boolean, p_lo xid8, p_hi xid8, p_ids bigint[], p_tx_ids xid8[], '
        'OUT failed integer, OUT deferred boolean, OUT message text';
    v_declare constant text := $d$
DECLARE
    v_cur integer := 0;
    v_n constant integer := coalesce(cardinality(p_ids), 0);
    v_role boolean := true;
    v_state text;
    v_set text;
    v_done integer;
    v_missing boolean := false;
    v_traced boolean := false;
    -- Dense batches walk their range, sparse ones are looked up by position (see above).
    v_walk constant boolean := abs(p_ids[v_n] - p_ids[1]) < 4 * v_n;
    r highwater.events;
    -- A consumer with `eventVersions` (docs/consumers.md): the payloads go through their
    -- upcasts (highwater.upcast_for); without, the setting is empty and the payload is as stored.
    -- They are computed here, before the sink's role is taken: the role has no rights on the
    -- schema (the upcasts read the registry), and the code it runs never names it.
    v_versions constant jsonb := nullif(current_setting('highwater.event_versions', true), '')::jsonb;
    v_upcast jsonb[];
BEGIN
    deferred := false;
    -- A batch named by its ids alone (`highwater.sql_sink_apply`, which a previous release's
    -- dispatcher calls during a rolling upgrade): its transaction ids are read once, from one
    -- walk of its range (OFFSET 0 keeps the walk whole: a join clause pushed into it would scan
    -- the range once per id), NULL for an id the range does not hold.
    IF p_tx_ids IS NULL AND v_n > 0 AND (NOT v_walk OR v_versions IS NOT NULL) THEN
        p_tx_ids := ARRAY(SELECT w.tx_id FROM unnest(p_ids) WITH ORDINALITY u(id, i)
                            LEFT JOIN (SELECT e.tx_id, e.id FROM highwater.events e
                                        WHERE (e.tx_id, e.id) >= (p_lo, p_ids[1]) AND e.tx_id >= p_lo
                                          AND (e.tx_id, e.id) <= (p_hi, p_ids[v_n]) AND e.tx_id <= p_hi
                                       OFFSET 0) w ON w.id = u.id
                           ORDER BY u.i);
    END IF;
    IF v_versions IS NOT NULL THEN
        -- One payload per event of the batch, in its order, each looked up by its position
        -- (NULL for one not found: the loop reports the batch's missing events as before).
        v_upcast := ARRAY(SELECT x.payload FROM unnest(p_tx_ids, p_ids) WITH ORDINALITY u(tx_id, id, i)
                           LEFT JOIN LATERAL (
                               SELECT highwater.upcast_for(e.event_type, e.schema_version, e.payload, v_versions) AS payload
                                 FROM highwater.events e
                                WHERE e.tx_id = u.tx_id AND e.id = u.id AND e.tx_id >= p_lo AND e.tx_id <= p_hi) x ON true
                          ORDER BY u.i);
        IF to_regclass('pg_temp.highwater_upcast') IS NOT NULL THEN
            DELETE FROM pg_temp.highwater_upcast;
            INSERT INTO pg_temp.highwater_upcast SELECT u.id, u.payload FROM unnest(p_ids, v_upcast) u(id, payload);
        END IF;
    END IF;
$d$;
    -- The batch's range in delivery order; `CONTINUE` passes over the range's events that are
    -- not the next of the batch. Both forms loop over it when they go one event at a time.
    v_range constant text := $r$
        FOR r IN SELECT * FROM (
                   SELECT * FROM highwater.events e
                    WHERE v_walk
                      AND (e.tx_id, e.id) >= (p_lo, p_ids[1]) AND e.tx_id >= p_lo
                      AND (e.tx_id, e.id) <= (p_hi, p_ids[v_n]) AND e.tx_id <= p_hi
                    ORDER BY e.tx_id, e.id) w
                 UNION ALL
                 SELECT * FROM (
                   SELECT e.* FROM unnest(p_tx_ids, p_ids) WITH ORDINALITY u(tx_id, id, i)
                    CROSS JOIN LATERAL (
                       SELECT * FROM highwater.events e
                        WHERE NOT v_walk AND e.tx_id = u.tx_id AND e.id = u.id
                          AND e.tx_id >= p_lo AND e.tx_id <= p_hi
                       OFFSET 0) e
                    ORDER BY u.i) p LOOP
            CONTINUE WHEN v_cur >= v_n OR r.id <> p_ids[v_cur + 1];
            v_cur := v_cur + 1;
$r$;
    -- What a failure reports. OTHERS does not cover query_canceled (statement_timeout), which
    -- is named so that a timeout is reported like any failure. Events the range did not hold
    -- fail the call outside the handler: that is the batch's error, not an event's.
    v_handler constant text := $h$
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        GET STACKED DIAGNOSTICS message = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
        message := message || ' (SQLSTATE ' || v_state || ')';
        failed := greatest(v_cur - 1, 0);
        deferred := v_state = '57014' AND v_cur > 1;
    END;
    IF failed IS NULL AND %s AND v_cur <> v_n THEN
        RAISE EXCEPTION 'highwater: events of the batch were not found: event %% is gone (the %% before it in the batch of %% were there)',
            p_ids[v_cur + 1], v_cur, v_n;
    END IF;
END $h$;
BEGIN
    IF to_regprocedure(format('pg_temp.%I(text, boolean, xid8, xid8, bigint[], xid8[])', p_name || '_batch')) IS NOT NULL THEN
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
%s
            -- The sink's role from its first event on: the range's query opened before it.
            IF v_role THEN
                v_set := set_config('role', coalesce(p_role, 'none'), true);
                v_role := false;
            END IF;
            v_set := set_config('highwater.tenant_id', coalesce(r.tenant_id, ''), true);
            v_set := set_config('highwater.correlation_id',
                                CASE WHEN jsonb_typeof(r.metadata -> 'correlation_id') = 'string'
                                     THEN r.metadata ->> 'correlation_id' ELSE '' END, true);
            v_set := set_config('highwater.causation_id', r.id::text, true);
            -- The writer's trace (trace_context.sql), set only for an event that has one and
            -- cleared after it: an untraced batch pays one key test per event.
            IF r.metadata ? 'traceparent' OR v_traced THEN
                v_traced := r.metadata ? 'traceparent';
                v_set := set_config('highwater.traceparent', coalesce(r.metadata ->> 'traceparent', ''), true);
                v_set := set_config('highwater.tracestate', coalesce(r.metadata ->> 'tracestate', ''), true);
            END IF;
            v_done := pg_temp.%I(CASE WHEN v_versions IS NULL THEN r.payload ELSE v_upcast[v_cur] END, r.id, r.stream_type, r.stream_id, r.event_type,
                                 r.tenant_id, r.metadata, r.stream_version, r.created_at);
        END LOOP;
        PERFORM set_config('role', 'none', true), set_config('highwater.tenant_id', '', true);
        IF v_traced THEN
            PERFORM set_config('highwater.traceparent', '', true), set_config('highwater.tracestate', '', true);
        END IF;
    %s
$loop$ $body$, p_name || '_batch', v_batch_args, v_declare, v_range, p_name, format(v_handler, 'true'));
    ELSIF p_form = 'set' THEN
        -- The batch's upcast payloads (a consumer with `eventVersions`), written by the batch
        -- function before it takes the sink's role; the view joins them only while the setting
        -- says so (a one-time filter: other consumers' statements never read the table).
        CREATE TEMPORARY TABLE IF NOT EXISTS highwater_upcast (id bigint PRIMARY KEY, payload jsonb);
        EXECUTE $v$
            CREATE OR REPLACE TEMPORARY VIEW highwater_batch AS
            SELECT coalesce(u.payload, e.payload) AS payload,
                   e.id, e.stream_type, e.stream_id, e.event_type, e.tenant_id,
                   e.metadata, e.stream_version, e.created_at
              FROM highwater.events e
              LEFT JOIN pg_temp.highwater_upcast u
                ON u.id = e.id AND coalesce(current_setting('highwater.event_versions', true), '') <> ''
             WHERE (e.tx_id, e.id) >= (current_setting('highwater.batch_lo')::xid8,
                                       current_setting('highwater.batch_first')::bigint)
               AND e.tx_id >= current_setting('highwater.batch_lo')::xid8
               AND (e.tx_id, e.id) <= (current_setting('highwater.batch_hi')::xid8,
                                       current_setting('highwater.batch_last')::bigint)
               AND e.tx_id <= current_setting('highwater.batch_hi')::xid8
               AND e.id IN (SELECT unnest(current_setting('highwater.batch_ids')::bigint[]))$v$;
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
                    set_config('highwater.batch_first', p_ids[1]::text, true),
                    set_config('highwater.batch_last', p_ids[v_n]::text, true),
                    set_config('highwater.batch_ids', p_ids::text, true);
            -- Every event of the batch must be there, as the per-event loop requires: a
            -- statement over a batch that lost events (pruned after the read) would apply the
            -- rest and the cursor would pass the missing ones. One count of the batch's range;
            -- the first missing event is looked for only when one is.
            IF (SELECT count(*) FROM pg_temp.highwater_batch) <> v_n THEN
                v_missing := true;
                SELECT u.i - 1 INTO v_cur FROM unnest(p_ids) WITH ORDINALITY u(id, i)
                 WHERE u.id NOT IN (SELECT b.id FROM pg_temp.highwater_batch b) ORDER BY u.i LIMIT 1;
            ELSE
                PERFORM set_config('role', coalesce(p_role, 'none'), true);
                PERFORM pg_temp.%I();
            END IF;
        ELSE
%s
                -- The view narrowed to this one event.
                PERFORM set_config('highwater.batch_lo', r.tx_id::text, true),
                        set_config('highwater.batch_hi', r.tx_id::text, true),
                        set_config('highwater.batch_first', r.id::text, true),
                        set_config('highwater.batch_last', r.id::text, true),
                        set_config('highwater.batch_ids', ARRAY[r.id]::text, true),
                        set_config('role', coalesce(p_role, 'none'), true);
                PERFORM pg_temp.%I();
                PERFORM set_config('role', 'none', true);
            END LOOP;
        END IF;
        PERFORM set_config('role', 'none', true), set_config('highwater.batch_ids', '{}', true);
    %s
$loop$ $body$, p_name || '_batch', v_batch_args, v_declare, p_name, v_range, p_name,
           format(v_handler, '(p_single OR v_missing)'));
    ELSE
        RETURN format('unknown SQL sink form "%s"', p_form);
    END IF;
    RETURN NULL;
EXCEPTION WHEN OTHERS OR query_canceled THEN
    GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
    RETURN v_message || ' (SQLSTATE ' || v_state || ')';
END
$fn$;
