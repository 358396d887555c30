#!/bin/bash
# Where a SQL-sink drain's time goes, statement by statement (docs/benchmarks.md, session of
# 2026-12-02, third). Needs a PostgreSQL 15 cluster started with
#   -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all
# and a `highwater` binary, or "target/release/bench highwater" (one argument, quoted).
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:PORT/DB docs/bench/sql_sink_drain_profile.sh HIGHWATER [EVENTS]
#
# Creates the schema, appends EVENTS (default 300,000) events in transactions of 1,000, drains
# them with one Shared consumer whose SQL sink is the bench's per-event projection, and prints
# the wall time and the top statements by server time. Run it on a scratch database.
set -euo pipefail
HW=${1:?usage: $0 HIGHWATER [EVENTS]}
EVENTS=${2:-300000}
: "${DATABASE_URL:?set DATABASE_URL}"
psql() { command psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -q "$@"; }
$HW migrate >/dev/null
psql -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" \
     -c "DROP TABLE IF EXISTS bench_projection" \
     -c "CREATE TABLE bench_projection (event_id bigint PRIMARY KEY, created_at timestamptz NOT NULL, delivered_at timestamptz NOT NULL)"
for _ in $(seq 1 $((EVENTS / 1000))); do
  echo "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload, metadata)
        SELECT 'order', 'o-' || g, 'OrderPlaced', jsonb_build_object('amount', g, 'sku', 'sku-' || g, 'note', repeat('x', 100)),
               jsonb_build_object('correlation_id', 'c-' || g) FROM generate_series(1, 1000) g;"
done | psql
psql -c "ANALYZE"
yaml=$(mktemp)
cat > "$yaml" <<'YAML'
---
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: profile}
spec:
  delivery: Shared
  group: profile
  batchSize: 1000
  startFrom: earliest
  sink: {sql: {statement: "INSERT INTO public.bench_projection (event_id, created_at, delivered_at) VALUES ($2, $9, clock_timestamp())"}}
YAML
$HW consumer delete profile >/dev/null 2>&1 || true
$HW consumer apply -f "$yaml" >/dev/null
psql -c "SELECT pg_stat_statements_reset()" >/dev/null
start=$(date +%s.%N)
HIGHWATER_LOG=warn $HW dispatch --group profile --instance-id profile-1 --listen 127.0.0.1:0 >/dev/null 2>&1 &
pid=$!
until [ "$(psql -Atc 'SELECT count(*) FROM bench_projection')" -ge "$EVENTS" ]; do sleep 0.2; done
end=$(date +%s.%N)
kill $pid; wait $pid 2>/dev/null || true
echo "drained $EVENTS events in $(echo "$end - $start" | bc) s (includes start-up and the count polls)"
psql -c "SELECT calls, round(total_exec_time::numeric) AS total_ms, round(mean_exec_time::numeric, 3) AS mean_ms,
                left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS statement
           FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
          WHERE d.datname = current_database() AND toplevel
          ORDER BY total_exec_time DESC LIMIT 8"
