#!/bin/bash
# One sparse SQL-sink batch, timed on the generic plan (issue 44; docs/benchmarks.md, "A sparse
# batch in transactions of many events"). Needs a `highwater` binary and a scratch database:
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:PORT/DB docs/bench/sql_sink_sparse_batch.sh HIGHWATER [PER_TX] [EVENTS]
#
# Migrates, appends EVENTS (default 20,000) events over 200 types (interleaved: event g is of
# type g mod 200), PER_TX (default 500) a transaction, then applies the first 100 events of one
# type, the batch of a consumer of that type, through the per-event form's session functions
# (`INSERT INTO sparse_projection VALUES ($2)`), with plan_cache_mode = force_generic_plan, 8
# calls each rolled back, and prints the server's execution time of each (EXPLAIN ANALYZE of the
# call) and the index condition of the batch's lookup (auto_explain, nested statements). Once as
# the dispatcher calls it (`sql_sink_apply_positions` when the schema has it, else
# `sql_sink_apply`), then `sql_sink_apply` (ids only) when both exist; then the same after
# ANALYZE.
set -euo pipefail
HW=${1:?usage: $0 HIGHWATER [PER_TX] [EVENTS]}
PER_TX=${2:-500}
EVENTS=${3:-20000}
: "${DATABASE_URL:?set DATABASE_URL}"
psql() { command psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -q -X "$@"; }
$HW migrate >/dev/null
psql -c "DROP TABLE IF EXISTS sparse_projection" -c "CREATE TABLE sparse_projection (event_id bigint)"
for t in $(seq 0 $((EVENTS / PER_TX - 1))); do
  echo "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload)
        SELECT 'order', 'o-' || g, 'T' || (g % 200), '{}' FROM generate_series($((t * PER_TX)), $((t * PER_TX + PER_TX - 1))) g;"
done | psql
positions=$(psql -At -c "SELECT count(*) > 0 FROM pg_proc WHERE proname = 'sql_sink_apply_positions'")
measure() { # $1: true for sql_sink_apply_positions (the batch's positions), false for sql_sink_apply (its ids)
  psql -At <<SQL 2>&1 | grep -E "ms$|failed|Index Cond.*u\.id" | uniq -c
CREATE FUNCTION pg_temp.call(p_positions boolean) RETURNS text LANGUAGE plpgsql AS \$f\$
DECLARE
    v_tx xid8[];
    v_ids bigint[];
    v_statement constant text := 'INSERT INTO sparse_projection VALUES (\$2)';
BEGIN
    -- The batch of a consumer of one type in 200: its first 100 events.
    SELECT array_agg(tx_id ORDER BY tx_id, id), array_agg(id ORDER BY tx_id, id) INTO v_tx, v_ids
      FROM (SELECT tx_id, id FROM highwater.events WHERE event_type = 'T7' ORDER BY tx_id, id LIMIT 100) b;
    IF p_positions THEN
        RETURN format('SELECT * FROM highwater.sql_sink_apply_positions(%L, %L, NULL, false, %L, %L)',
                      'perEvent', v_statement, v_tx, v_ids);
    END IF;
    RETURN format('SELECT * FROM highwater.sql_sink_apply(%L, %L, NULL, false, %L, %L, %L)',
                  'perEvent', v_statement, v_tx[1], v_tx[cardinality(v_tx)], v_ids);
END \$f\$;
CREATE FUNCTION pg_temp.ms(p_call text) RETURNS numeric LANGUAGE plpgsql AS \$f\$
DECLARE v_plan json;
BEGIN
    EXECUTE 'EXPLAIN (ANALYZE, FORMAT JSON) ' || p_call INTO v_plan;
    RETURN round((v_plan -> 0 ->> 'Execution Time')::numeric, 2);
END \$f\$;
SELECT highwater.sql_sink_prepare('perEvent', 'INSERT INTO sparse_projection VALUES (\$2)') IS NULL AS prepared;
SET plan_cache_mode = force_generic_plan;
SELECT pg_temp.call($1) AS call \gset
$(for _ in 1 2 3 4 5 6 7 8; do echo "BEGIN; SELECT '$2: ' || pg_temp.ms(:'call') || ' ms'; ROLLBACK;"; done)
BEGIN;
SELECT coalesce(a.failed::text, 'none') AS failed FROM (:call) a \gset
SELECT 'failed: ' || :'failed' || ', events applied: ' || count(*) FROM sparse_projection;
ROLLBACK;
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_level = notice;
BEGIN;
\o /dev/null
:call;
\o
ROLLBACK;
SQL
}
calls() {
  if [ "$positions" = t ]; then measure true sql_sink_apply_positions; fi
  measure false sql_sink_apply
}
echo "== $EVENTS events, $PER_TX a transaction, not analyzed"
calls
psql -c "ANALYZE highwater.events"
echo "== after ANALYZE"
calls
