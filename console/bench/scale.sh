#!/usr/bin/env bash
# The console at scale (issue 47, docs/benchmarks.md "The console at scale"): a throwaway
# PostgreSQL 15 with 1,000 consumers (10 of them 10,000 events behind, the rest caught up),
# 100,000 events and 1,000,000 dead letters (1,000 per consumer, a tenth redriven), then
# `highwater console` and each page asked RUNS times over loopback; prints a Markdown table of
# the median and the worst time to the last byte (curl's time_total: on loopback, the server's
# time plus a few hundred microseconds of transfer).
#
# Environment: HIGHWATER_BIN (default <repo>/target/debug/highwater; a release build measures
# what ships), PG_BIN (default /usr/lib/postgresql/15/bin), RUNS (default 7).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
HIGHWATER_BIN="${HIGHWATER_BIN:-$repo/target/debug/highwater}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
RUNS="${RUNS:-7}"
for f in "$HIGHWATER_BIN" "$PG_BIN/initdb" "$PG_BIN/pg_ctl" "$PG_BIN/psql"; do
    [ -x "$f" ] || { echo "console/bench/scale.sh: $f is missing (cargo build; PG_BIN)" >&2; exit 1; }
done

tmp="$(mktemp -d "${TMPDIR:-/tmp}/highwater-console-scale.XXXXXX")"
pgdata="$tmp/pg/data"
chmod 711 "$tmp"
pids=()
as_pg=()
if [ "$(id -u)" = 0 ]; then
    pg_user=postgres
    id -u postgres >/dev/null 2>&1 || pg_user=nobody
    as_pg=(runuser -u "$pg_user" --)
fi
cleanup() {
    local rc=$?
    set +e
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    [ -f "$pgdata/postmaster.pid" ] && "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$pgdata" -m immediate -w stop >/dev/null 2>&1
    [ "$rc" != 0 ] && [ -f "$tmp/console.log" ] && tail -n 20 "$tmp/console.log"
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
mkdir -p "$tmp/pg"
if [ ${#as_pg[@]} -gt 0 ]; then chown -R "$pg_user" "$tmp/pg"; fi
port="$(free_port)"
"${as_pg[@]}" "$PG_BIN/initdb" -U postgres -A trust -E UTF8 --locale=C --no-sync --no-instructions -D "$pgdata" >/dev/null
"${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$pgdata" -l "$tmp/pg/postgres.log" -w -t 60 \
    -o "-p $port -k $tmp/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_wal_size=4GB" \
    start >/dev/null
export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
psql() { "$PG_BIN/psql" "$DATABASE_URL" -X -q -At -v ON_ERROR_STOP=1 "$@"; }

"$HIGHWATER_BIN" migrate >/dev/null
"$HIGHWATER_BIN" event-types register Tick >/dev/null
"$HIGHWATER_BIN" event-types register Other >/dev/null
echo "setting up: 1,000 consumers, 100,000 events, 1,000,000 dead letters" >&2
for i in $(seq 0 999); do
    printf -- '---\napiVersion: highwater.dev/v1alpha1\nkind: EventConsumer\nmetadata: {name: c-%03d}\nspec: {delivery: Shared, eventTypes: [Tick], sink: {log: {}}}\n' "$i"
done >"$tmp/consumers.yaml"
"$HIGHWATER_BIN" consumer apply -f "$tmp/consumers.yaml" >/dev/null
for batch in $(seq 0 9); do
    psql -c "SELECT count(highwater.append('tick', 't-' || (g % 5000), 'Tick',
                    jsonb_build_object('n', g, 'note', repeat('x', 100)), NULL, NULL, NULL))
               FROM generate_series($((batch * 10000 + 1)), $(((batch + 1) * 10000))) g" >/dev/null
done
# Every consumer caught up but ten, which are 10,000 events behind.
psql -c "UPDATE highwater.consumer_shards s SET cursor_tx = h.tx_id, cursor_id = h.id
           FROM (SELECT tx_id, id FROM highwater.events ORDER BY tx_id DESC, id DESC LIMIT 1) h" >/dev/null
psql -c "UPDATE highwater.consumer_shards s SET cursor_tx = e.tx_id, cursor_id = e.id
           FROM (SELECT tx_id, id FROM highwater.events ORDER BY tx_id DESC, id DESC OFFSET 10000 LIMIT 1) e
          WHERE s.consumer IN (SELECT name FROM highwater.consumers ORDER BY name LIMIT 10)" >/dev/null
psql -c "INSERT INTO highwater.dead_letters (consumer, instance_id, event_id, attempts, error, redriven_at, redrive_by)
         SELECT format('c-%s', lpad((g % 1000)::text, 3, '0')), '__shared__', g / 1000 + 1, 3,
                'sink refused: boom ' || (g % 7),
                CASE WHEN g % 10 = 0 THEN now() END, CASE WHEN g % 10 = 0 THEN 'bench' END
           FROM generate_series(0, 999999) g" >/dev/null
psql -c "VACUUM ANALYZE" >/dev/null

if [ -n "${SCALE_HOLD:-}" ]; then
    echo "DATABASE_URL=$DATABASE_URL (held until $SCALE_HOLD exists)" >&2
    while [ ! -e "$SCALE_HOLD" ]; do sleep 1; done
fi
console_port="$(free_port)"
"$HIGHWATER_BIN" console --listen "127.0.0.1:$console_port" >"$tmp/console.log" 2>&1 &
pids+=($!)
base="http://127.0.0.1:$console_port"
for _ in $(seq 1 100); do curl -fsS -o /dev/null "$base/healthz" 2>/dev/null && break; sleep 0.1; done
# The console's first overview runs doctor's checks (later ones refresh them in the background):
# not what a page costs, so it is not timed.
curl -fsS -o /dev/null "$base/"
# The second page of every dead letter: the "Next page" link of the first.
after="$(curl -fsS "$base/dead-letters" | grep -o 'after=[^"]*' | head -1 | sed 's/&amp;/\&/g')"

pages=(
    "/" "/overview/table" "/overview/table?sort=lag" "/consumers/c-500" "/consumers/c-000"
    "/dead-letters" "/dead-letters?$after" "/dead-letters?consumer=c-500" "/dead-letters?type=Tick"
    "/dead-letters?error=boom%203" "/dead-letters?consumer=c-500&error=boom%203" "/dead-letters?state=redriven"
    "/dead-letters?state=any" "/dead-letters?error=no-such-text" "/dead-letters?type=Other"
    "/dead-letters?consumer=c-500&error=no-such-text" "/streams?type=tick&id=t-42" "/events/50000" "/correlations/none"
    "/event-types" "/event-types/Tick"
)
echo "| Page | median (ms) | worst (ms) |"
echo "|---|---:|---:|"
for p in "${pages[@]}"; do
    times=()
    for _ in $(seq 1 "$RUNS"); do
        code_time="$(curl -sS -o /dev/null -w '%{http_code} %{time_total}' "$base$p")"
        code="${code_time%% *}"
        case "$code" in 200 | 303) ;; *) echo "GET $p answered $code" >&2; exit 1 ;; esac
        times+=("${code_time#* }")
    done
    printf '%s\n' "${times[@]}" | sort -n | awk -v p="$p" '{ t[NR] = $1 * 1000 }
        END { printf "| `%s` | %.0f | %.0f |\n", p, t[int((NR + 1) / 2)], t[NR] }'
done
