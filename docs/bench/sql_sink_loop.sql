-- The SQL sink's per-event loop, PERFORM against assignments (and the statement inline) (docs/bench/history.md, session of
-- 2026-12-02, second). Run on any scratch database: psql -d DB -f docs/bench/sql_sink_loop.sql
-- Everything is temporary and rolled back; compare the times of the three loops.
CREATE TEMP TABLE proj (event_id bigint PRIMARY KEY, created_at timestamptz, delivered_at timestamptz);
CREATE FUNCTION pg_temp.stmt(jsonb, bigint, text, text, text, text, jsonb, bigint, timestamptz) RETURNS void LANGUAGE plpgsql AS $f$
BEGIN INSERT INTO proj (event_id, created_at, delivered_at) VALUES ($2, $9, clock_timestamp()); END $f$;
CREATE FUNCTION pg_temp.stmt_i(jsonb, bigint, text, text, text, text, jsonb, bigint, timestamptz) RETURNS int LANGUAGE plpgsql AS $f$
BEGIN INSERT INTO proj (event_id, created_at, delivered_at) VALUES ($2, $9, clock_timestamp()); RETURN 0; END $f$;
CREATE FUNCTION pg_temp.loop_perform(n int) RETURNS void LANGUAGE plpgsql AS $f$
DECLARE m jsonb := '{"correlation_id":"abc"}'; t timestamptz := now();
BEGIN
  FOR i IN 1..n LOOP
    PERFORM set_config('highwater.tenant_id', '', true),
            set_config('highwater.correlation_id', CASE WHEN jsonb_typeof(m -> 'correlation_id') = 'string' THEN m ->> 'correlation_id' ELSE '' END, true),
            set_config('highwater.causation_id', i::text, true);
    PERFORM pg_temp.stmt('{}'::jsonb, i::bigint, 'a', 'b', 'c', NULL, m, NULL, t);
  END LOOP;
END $f$;
CREATE FUNCTION pg_temp.loop_assign(n int) RETURNS void LANGUAGE plpgsql AS $f$
DECLARE m jsonb := '{"correlation_id":"abc"}'; t timestamptz := now(); x text; y int;
BEGIN
  FOR i IN 1..n LOOP
    x := set_config('highwater.tenant_id', '', true);
    x := set_config('highwater.correlation_id', CASE WHEN jsonb_typeof(m -> 'correlation_id') = 'string' THEN m ->> 'correlation_id' ELSE '' END, true);
    x := set_config('highwater.causation_id', i::text, true);
    y := pg_temp.stmt_i('{}'::jsonb, i::bigint, 'a', 'b', 'c', NULL, m, NULL, t);
  END LOOP;
END $f$;
-- The statement written in the loop: its $1..$9 are the loop function's own first nine
-- parameters, assigned per event (session of 2026-12-02, third; not built, see history.md).
CREATE FUNCTION pg_temp.loop_inline(a1 jsonb, a2 bigint, a3 text, a4 text, a5 text, a6 text, a7 jsonb, a8 bigint, a9 timestamptz, n int) RETURNS void LANGUAGE plpgsql AS $f$
DECLARE m jsonb := '{"correlation_id":"abc"}'; t timestamptz := now(); x text;
BEGIN
  FOR i IN 1..n LOOP
    x := set_config('highwater.tenant_id', '', true);
    x := set_config('highwater.correlation_id', CASE WHEN jsonb_typeof(m -> 'correlation_id') = 'string' THEN m ->> 'correlation_id' ELSE '' END, true);
    x := set_config('highwater.causation_id', i::text, true);
    a1 := '{}'::jsonb; a2 := i; a3 := 'a'; a4 := 'b'; a5 := 'c'; a6 := NULL; a7 := m; a8 := NULL; a9 := t;
    INSERT INTO proj (event_id, created_at, delivered_at) VALUES ($2, $9, clock_timestamp());
  END LOOP;
END $f$;
CREATE FUNCTION pg_temp.loop_bare(n int) RETURNS void LANGUAGE plpgsql AS $f$
DECLARE m jsonb := '{"correlation_id":"abc"}'; t timestamptz := now();
BEGIN
  FOR i IN 1..n LOOP
    INSERT INTO proj (event_id, created_at, delivered_at) VALUES (i, t, clock_timestamp());
  END LOOP;
END $f$;
\timing on
BEGIN; SELECT pg_temp.loop_perform(50000); ROLLBACK;
BEGIN; SELECT pg_temp.loop_assign(50000); ROLLBACK;
BEGIN; SELECT pg_temp.loop_inline(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 50000); ROLLBACK;
BEGIN; SELECT pg_temp.loop_bare(50000); ROLLBACK;
BEGIN; SELECT pg_temp.loop_perform(50000); ROLLBACK;
BEGIN; SELECT pg_temp.loop_assign(50000); ROLLBACK;
BEGIN; SELECT pg_temp.loop_inline(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 50000); ROLLBACK;
BEGIN; SELECT pg_temp.loop_bare(50000); ROLLBACK;
