#!/usr/bin/env bash
# End-to-end test of the NestJS orders example against a real PostgreSQL 15, a real `highwater
# dispatch` and the real application, driven over HTTP:
#   1. the client package built (the example installs it from ../../clients/typescript), npm ci
#      and tsc of the example, its committed openapi.json compared with what the code generates;
#   2. a throwaway cluster (initdb in a temporary directory, a free loopback port), `highwater
#      migrate`, db/schema.sql, the OrderPlaced event type, the consumer of consumers/;
#   3. one dispatcher, and the application twice: waiting for tokens over SQL, and through the
#      dispatcher's HTTP wait endpoint;
#   4. node's test runner over test/*.test.mjs (real requests; see the file for what is asserted).
# Exits non-zero on any failure; the cluster, the processes and the temporary files go away at
# exit whatever happened.
#
# Environment: HIGHWATER_BIN (default <repo>/target/debug/highwater), PG_BIN (default
# /usr/lib/postgresql/15/bin), E2E_ORDERS (orders per run, default 200).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
HIGHWATER_BIN="${HIGHWATER_BIN:-$repo/target/debug/highwater}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"

if [ ! -x "$HIGHWATER_BIN" ]; then
    echo "test.sh: no highwater binary at $HIGHWATER_BIN (build it with cargo, or set HIGHWATER_BIN)" >&2
    exit 1
fi
HIGHWATER_BIN="$(cd "$(dirname "$HIGHWATER_BIN")" && pwd)/$(basename "$HIGHWATER_BIN")"
for b in initdb pg_ctl psql; do
    if [ ! -x "$PG_BIN/$b" ]; then
        echo "test.sh: $PG_BIN/$b is missing (PostgreSQL 15 server binaries; set PG_BIN)" >&2
        exit 1
    fi
done

start=$SECONDS
tmp="$(mktemp -d "${TMPDIR:-/tmp}/highwater-nestjs-orders.XXXXXX")"
pgdata="$tmp/pg/data"
chmod 711 "$tmp"
pids=()

# PostgreSQL refuses to run as root: as root, the cluster belongs to the postgres (or nobody) user.
as_pg=()
if [ "$(id -u)" = 0 ]; then
    pg_user=postgres
    id -u postgres >/dev/null 2>&1 || pg_user=nobody
    as_pg=(runuser -u "$pg_user" --)
fi

cleanup() {
    local rc=$?
    set +e
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null
    done
    for pid in "${pids[@]}"; do
        # up to 5 s for a graceful stop, then SIGKILL
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
    done
    if [ "$rc" != 0 ]; then
        for log in "$tmp"/*.log; do
            [ -f "$log" ] || continue
            echo "--- $(basename "$log") (last 40 lines)" >&2
            tail -40 "$log" >&2
        done
    fi
    if [ -f "$pgdata/postmaster.pid" ]; then
        "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$pgdata" -m immediate -w stop >/dev/null 2>&1
    fi
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

# Polls URL until it answers 200 (30 s), failing early if the process PID died.
wait_http() {
    local url="$1" pid="$2" what="$3"
    for _ in $(seq 300); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "test.sh: $what exited before answering $url" >&2
            return 1
        fi
        if node -e 'fetch(process.argv[1]).then(r=>process.exit(r.status===200?0:1),()=>process.exit(1))' "$url"; then
            return 0
        fi
        sleep 0.1
    done
    echo "test.sh: $what did not answer $url within 30 s" >&2
    return 1
}

echo "== the client package (installed from clients/typescript: its dist must be built)"
(cd "$repo/clients/typescript" && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
echo "== npm ci, build"
cd "$here"
npm ci --no-audit --no-fund --loglevel=error
npm run --silent build
echo "== openapi.json is what the code declares"
node dist/openapi.js >"$tmp/openapi.json"
if ! diff -u openapi.json "$tmp/openapi.json"; then
    echo "test.sh: openapi.json is out of date: run npm run build && npm run openapi, and commit it" >&2
    exit 1
fi

echo "== PostgreSQL 15 cluster"
mkdir -p "$tmp/pg"
if [ ${#as_pg[@]} -gt 0 ]; then chown -R "$pg_user" "$tmp/pg"; fi
port="$(free_port)"
"${as_pg[@]}" "$PG_BIN/initdb" -U postgres -A trust -E UTF8 --locale=C --no-sync --no-instructions -D "$pgdata" >/dev/null
"${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$pgdata" -l "$tmp/pg/postgres.log" -w -t 60 \
    -o "-p $port -k $tmp/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    start >/dev/null
export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"

echo "== migrate, tables, event type, consumer (as the README does it)"
"$HIGHWATER_BIN" migrate
"$PG_BIN/psql" "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -f db/schema.sql
"$HIGHWATER_BIN" event-types register OrderPlaced --schema event-types/OrderPlaced.schema.json
"$HIGHWATER_BIN" consumer apply -f consumers/

echo "== highwater dispatch"
auth_token="e2e-$(node -p 'crypto.randomUUID()')"
dispatcher_port="$(free_port)"
HIGHWATER_SSE_TOKENS="$auth_token" "$HIGHWATER_BIN" dispatch --instance-id e2e-dispatcher \
    --listen "127.0.0.1:$dispatcher_port" --shutdown-grace 1s >"$tmp/dispatcher.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$dispatcher_port/readyz" "${pids[-1]}" dispatcher

# Short enough that the timeout case stays quick, long enough never to expire on a loaded machine.
export SUMMARY_WAIT_MS="${SUMMARY_WAIT_MS:-1500}"
export CREDIT_LIMIT_CENTS=1000000
echo "== the application, waiting over SQL"
app_sql_port="$(free_port)"
HOST=127.0.0.1 PORT="$app_sql_port" node dist/main.js >"$tmp/app-sql.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$app_sql_port/openapi.json" "${pids[-1]}" "the application (SQL waits)"
echo "== the application, waiting through the dispatcher"
app_http_port="$(free_port)"
HOST=127.0.0.1 PORT="$app_http_port" HIGHWATER_DISPATCHER_URL="http://127.0.0.1:$dispatcher_port" \
    HIGHWATER_TOKEN="$auth_token" node dist/main.js >"$tmp/app-http.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$app_http_port/openapi.json" "${pids[-1]}" "the application (HTTP waits)"

echo "== tests"
export APP_SQL_URL="http://127.0.0.1:$app_sql_port" APP_HTTP_URL="http://127.0.0.1:$app_http_port"
node --test --test-reporter=spec --test-concurrency=1 test/*.test.mjs
echo "== all passed in $((SECONDS - start)) s"
