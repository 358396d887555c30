#!/usr/bin/env bash
# Benchmarks of @highwater/client (issue 37 "Performance"), in one run on one throwaway cluster:
#   1. append through each adapter (pg, Drizzle, Kysely, Knex, TypeORM, Prisma) vs the same
#      driver's hand-written `SELECT highwater.append(...)` vs its plain INSERT into a seed-style
#      outbox table (bench/append.mjs; no dispatcher runs, as in the Rust benchmark's scenario 3);
#   2. the wait helpers' added latency at 1,000 writes/s against a real `highwater dispatch`
#      (bench/wait.mjs).
# Prints markdown tables (docs/bench/history.md, "Client libraries (TypeScript)", has its runs).
# PostgreSQL settings as the Rust benchmark's: fsync, synchronous_commit and full_page_writes off.
#
# Environment: HIGHWATER_BIN (default <repo>/target/debug/highwater), PG_BIN (default
# /usr/lib/postgresql/15/bin); APPEND_ARGS (default "--connections 1,4 --slice 1.5 --rounds 5"),
# WAIT_ARGS (default "--rate 1000 --seconds 20 --mode none,sql,http").
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pkg="$(cd "$here/.." && pwd)"
repo="$(cd "$pkg/../.." && pwd)"
HIGHWATER_BIN="${HIGHWATER_BIN:-$repo/target/debug/highwater}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
[ -x "$HIGHWATER_BIN" ] || { echo "bench.sh: no highwater binary at $HIGHWATER_BIN (set HIGHWATER_BIN)" >&2; exit 1; }
[ -x "$PG_BIN/initdb" ] || { echo "bench.sh: no PostgreSQL server binaries in $PG_BIN (set PG_BIN)" >&2; exit 1; }

start=$SECONDS
tmp="$(mktemp -d "${TMPDIR:-/tmp}/highwater-client-bench.XXXXXX")"
pgdata="$tmp/pg/data"
chmod 711 "$tmp"
dispatcher=""

as_pg=()
if [ "$(id -u)" = 0 ]; then
    pg_user=postgres
    id -u postgres >/dev/null 2>&1 || pg_user=nobody
    as_pg=(runuser -u "$pg_user" --)
fi

cleanup() {
    local rc=$?
    set +e
    if [ -n "$dispatcher" ]; then
        kill "$dispatcher" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$dispatcher" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$dispatcher" 2>/dev/null
        [ "$rc" = 0 ] || tail -30 "$tmp/dispatcher.log" >&2
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

cd "$pkg"
echo "== npm ci, build (the adapters' drivers are the package's devDependencies)" >&2
npm ci --no-audit --no-fund --loglevel=error >&2
npm run --silent build >&2
# The Prisma driver's client (bench/prisma/schema.prisma), generated without Prisma's engine
# download (as in test.sh) and compiled to JavaScript.
PRISMA_SCHEMA_ENGINE_BINARY="$pkg/test/prisma/no-schema-engine.sh" CHECKPOINT_DISABLE=1 \
    PRISMA_HIDE_UPDATE_MESSAGE=1 npx --no-install prisma generate --schema "$here/prisma/schema.prisma" >&2
rm -rf "$here/prisma/build"
npx --no-install tsc --target ES2022 --module NodeNext --moduleResolution NodeNext --skipLibCheck \
    --types node --outDir "$here/prisma/build" "$here/prisma/generated/client.ts"

echo "== PostgreSQL 15 cluster" >&2
mkdir -p "$tmp/pg"
if [ ${#as_pg[@]} -gt 0 ]; then chown -R "$pg_user" "$tmp/pg"; fi
port="$(free_port)"
"${as_pg[@]}" "$PG_BIN/initdb" -U postgres -A trust -E UTF8 --locale=C --no-sync --no-instructions -D "$pgdata" >/dev/null
"${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$pgdata" -l "$tmp/pg/postgres.log" -w -t 60 \
    -o "-p $port -k $tmp/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=512MB -c max_connections=200 -c track_commit_timestamp=on" \
    start >/dev/null
export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
"$HIGHWATER_BIN" migrate >&2
"$PG_BIN/psql" "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -f "$here/setup.sql"
# No JSON Schema: as the Rust benchmark's OrderPlaced, the server's type check without validation.
"$HIGHWATER_BIN" event-types register OrderPlaced >&2
"$HIGHWATER_BIN" event-types register OrderPaid >&2
"$HIGHWATER_BIN" consumer apply -f "$here/consumers.yaml" >&2

# The machine's load beside the figures: on a shared machine it explains the wall times.
load() { echo "load average $(cut -d' ' -f1-3 /proc/loadavg) ($1)"; }
echo "## append: adapter vs direct SELECT highwater.append vs outbox INSERT"
load "before"
# shellcheck disable=SC2086
node "$here/append.mjs" ${APPEND_ARGS:---connections 1,4 --slice 1.5 --rounds 5}

load "after the append part"
echo "== highwater dispatch" >&2
export AUTH_TOKEN="bench-$(node -p 'crypto.randomUUID()')"
dport="$(free_port)"
HIGHWATER_SSE_TOKENS="$AUTH_TOKEN" "$HIGHWATER_BIN" dispatch --instance-id bench --listen "127.0.0.1:$dport" \
    --shutdown-grace 1s >"$tmp/dispatcher.log" 2>&1 &
dispatcher=$!
export DISPATCHER_URL="http://127.0.0.1:$dport"
for _ in $(seq 300); do
    node -e 'fetch(process.argv[1]).then(r=>process.exit(r.status===200?0:1),()=>process.exit(1))' "$DISPATCHER_URL/readyz" && break
    kill -0 "$dispatcher" || { echo "bench.sh: the dispatcher exited" >&2; exit 1; }
    sleep 0.1
done

echo
echo "## wait: the helpers' added latency"
# shellcheck disable=SC2086
node "$here/wait.mjs" ${WAIT_ARGS:---rate 1000 --seconds 20 --mode none,sql,http}
load "after the wait part"
echo
echo "highwater: $("$HIGHWATER_BIN" --version 2>/dev/null || echo "$HIGHWATER_BIN"); node $(node --version); $(nproc) CPUs; $((SECONDS - start)) s in all"
