#!/bin/bash
# How much of the machine the latency scenario's writers take by themselves, before any
# dispatcher runs (docs/bench/history.md, "The machine at 10,000 appends a second"). Needs a scratch
# PostgreSQL 15 cluster with the bench's settings (fsync, synchronous_commit and full_page_writes
# off, shared_buffers 1GB) and a `highwater` binary, or "target/release/bench highwater" (one
# argument, quoted):
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:PORT/DB docs/bench/writer_cpu.sh HIGHWATER [RATE] [ROUNDS]
#
# For each statement (SELECT 1, the hand-written outbox INSERT, a direct INSERT into
# highwater.events, highwater.append) runs the scenario's writers — 8 pgbench clients, 2
# threads, one statement per transaction at RATE (default 10,000) a second for 15 s — and prints
# the rate reached and the share of the 2 cores busy (100 − vmstat's idle, averaged over the
# run). No consumer exists, so no commit sends NOTIFY (as while a dispatcher is busy).
set -euo pipefail
HW=${1:?usage: $0 HIGHWATER [RATE] [ROUNDS]}
RATE=${2:-10000}
ROUNDS=${3:-2}
: "${DATABASE_URL:?set DATABASE_URL}"
PGBENCH=${PGBENCH:-/usr/lib/postgresql/15/bin/pgbench}
psql() { command psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -q "$@"; }
$HW migrate >/dev/null
$HW event-types register OrderPlaced >/dev/null
psql -c "DROP TABLE IF EXISTS outbox" \
     -c "CREATE TABLE outbox (id bigserial PRIMARY KEY, aggregate_id text NOT NULL, type text NOT NULL,
                              payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())" \
     -c "CREATE INDEX ON outbox (created_at)"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
payload="'{\"order_id\": 1, \"amount\": 42}'::jsonb"
echo "SELECT 1;" > "$dir/select1.sql"
echo "INSERT INTO outbox (aggregate_id, type, payload) VALUES ('o-' || :client_id, 'OrderPlaced', $payload);" > "$dir/outbox.sql"
echo "INSERT INTO highwater.events (stream_type, stream_id, event_type, payload, metadata)
      VALUES ('order', 'o-' || :client_id, 'OrderPlaced', $payload,
              jsonb_build_object('correlation_id', gen_random_uuid()::text));" > "$dir/insert.sql"
echo "SELECT highwater.append('order', 'o-' || :client_id, 'OrderPlaced', $payload);" > "$dir/append.sql"
printf '%-8s %-8s %12s %8s\n' round writer "reached/s" busy%
for round in $(seq 1 "$ROUNDS"); do
  for w in select1 outbox insert append; do
    vmstat 2 9 > "$dir/vmstat" &
    tps=$("$PGBENCH" -n -M prepared -c 8 -j 2 -R "$RATE" -T 15 -f "$dir/$w.sql" "$DATABASE_URL" 2>/dev/null |
          awk '/^tps/ {printf "%.0f", $3}')
    wait
    busy=$(awk 'NR > 3 {s += $15; n++} END {printf "%.0f", 100 - s / n}' "$dir/vmstat")
    printf '%-8s %-8s %12s %8s\n' "$round" "$w" "$tps" "$busy"
  done
done
