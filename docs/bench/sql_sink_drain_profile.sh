#!/bin/bash
# Where a SQL-sink drain's time goes, statement by statement (docs/bench/history.md, session of
# 2026-12-02, third). Needs a PostgreSQL 15 cluster started with
#   -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all
# and a `highwater` binary, or "target/release/bench highwater" (one argument, quoted).
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:PORT/DB docs/bench/sql_sink_drain_profile.sh HIGHWATER [EVENTS] [FORM]
#
# Creates the schema, appends EVENTS (default 300,000) events in transactions of 1,000, drains
# them with one Shared consumer whose sink is the bench's SQL projection in FORM (perEvent, the
# default, or set) or, with FORM noop, the bench's no-op sink (log to /dev/null), and prints the
# wall time, the dispatcher's own CPU time per event and the top statements by server time.
# With PERF=FILE set, `perf record` samples the dispatcher during the drain into FILE and the
# dispatcher's top symbols are printed too. Run it on a scratch database.
set -euo pipefail
HW=${1:?usage: $0 HIGHWATER [EVENTS] [perEvent|set|noop]}
EVENTS=${2:-300000}
FORM=${3:-perEvent}
case $FORM in
  perEvent) SINK='{sql: {form: perEvent, statement: "INSERT INTO public.bench_projection (event_id, created_at, delivered_at) VALUES ($2, $9, clock_timestamp())"}}' ;;
  set) SINK='{sql: {form: set, statement: "INSERT INTO public.bench_projection SELECT id, created_at, clock_timestamp() FROM highwater_batch"}}' ;;
  noop) SINK='{log: {target: /dev/null}}' ;;
  *) echo "FORM must be perEvent, set or noop, not $FORM" >&2; exit 2 ;;
esac
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
cat > "$yaml" <<YAML
---
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: profile}
spec:
  delivery: Shared
  group: profile
  batchSize: 1000
  startFrom: earliest
  sink: $SINK
YAML
$HW consumer delete profile >/dev/null 2>&1 || true
$HW consumer apply -f "$yaml" >/dev/null
psql -c "SELECT pg_stat_statements_reset()" >/dev/null
start=$(date +%s.%N)
HIGHWATER_LOG=warn $HW dispatch --group profile --instance-id profile-1 --listen 127.0.0.1:0 >/dev/null 2>&1 &
pid=$!
if [ -n "${PERF:-}" ]; then
  perf record -q -e cpu-clock -F 999 -p "$pid" -o "$PERF" >/dev/null 2>&1 &
  perf_pid=$!
fi
# Drained when the shard's cursor is at the last event in delivery order, (tx_id, id) compared
# as numbers (the cursor moves in the projection's transaction).
until [ "$(psql -Atc "SELECT count(*) FROM highwater.consumer_shards
                        WHERE consumer = 'profile'
                          AND (cursor_tx, cursor_id) >= (SELECT tx_id, id FROM highwater.events
                                                          ORDER BY tx_id DESC, id DESC LIMIT 1)")" = 1 ]; do
  sleep 0.2
done
end=$(date +%s.%N)
# The dispatcher's own CPU (user + system, in clock ticks) before it is stopped.
read -r utime stime < <(awk '{ print $14, $15 }' "/proc/$pid/stat")
ticks=$(getconf CLK_TCK)
if [ -n "${PERF:-}" ]; then kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true; fi
kill $pid; wait $pid 2>/dev/null || true
echo "drained $EVENTS events ($FORM) in $(echo "$end - $start" | bc) s (includes start-up and the cursor polls)"
echo "dispatcher CPU: $(echo "scale=2; ($utime + $stime) * 1000000 / $ticks / $EVENTS" | bc) µs per event"
psql -c "SELECT calls, round(total_exec_time::numeric) AS total_ms, round(mean_exec_time::numeric, 3) AS mean_ms,
                left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS statement
           FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
          WHERE d.datname = current_database() AND toplevel
          ORDER BY total_exec_time DESC LIMIT 8"
if [ -n "${PERF:-}" ]; then
  perf report -i "$PERF" --stdio --no-children --sort symbol --percent-limit 1.5 2>/dev/null | grep -v '^#' | grep -v '^$' | sed 's/[ -]*$//' | cut -c1-150 | head -30
fi
