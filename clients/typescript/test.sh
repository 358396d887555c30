#!/usr/bin/env bash
# Tests of @highwater/client against a real PostgreSQL 15 and real highwater processes:
#   1. npm ci (from package-lock.json), `prisma generate` of the tests' Prisma client (the
#      prisma-client generator, wasm only: no engine binary), tsc build of the package and tests;
#   2. a throwaway cluster (initdb in a temporary directory, a free loopback port), `highwater
#      migrate`, the test event types, tables and consumers (test/fixtures/);
#   3. node's test runner over build/test/*.test.js (the tests start their own dispatchers;
#      codegen.test.js runs highwater-codegen with datamodel-code-generator from a venv made
#      from codegen/requirements-python.txt, hash-pinned, kept in a cache directory, and with
#      go-jsonschema through `go run` when go is on PATH);
#   4. npm pack, the tarball installed into an empty application, imported and used from ESM
#      and type-checked from TypeScript there; the same ESM script with the package installed
#      from its directory (as `npm install path/to/clients/typescript` does).
# Exits non-zero on any failure; the cluster, the dispatchers and the temporary files go away at
# exit whatever happened.
#
# Environment: HIGHWATER_BIN (default <repo>/target/debug/highwater), PG_BIN (default
# /usr/lib/postgresql/15/bin), PYTHON (default python3, makes the codegen venv),
# HW_CODEGEN_VENV (default ${XDG_CACHE_HOME:-~/.cache}/highwater-codegen/venv-<requirements hash>).
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
tmp="$(mktemp -d "${TMPDIR:-/tmp}/highwater-client-test.XXXXXX")"
pgdata="$tmp/pg/data"
chmod 711 "$tmp"

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
    # Dispatchers a test left behind (it died before stopping them): their pid files.
    if [ -d "$tmp/pids" ]; then
        for f in "$tmp/pids"/*; do
            [ -e "$f" ] || continue
            kill -9 "$(basename "$f")" 2>/dev/null
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

cd "$here"
echo "== npm ci"
npm ci --no-audit --no-fund --loglevel=error
echo "== prisma generate (test/prisma/schema.prisma, nothing fetched beyond npm)"
# The prisma CLI fetches its schema engine from binaries.prisma.sh before running any command,
# unless PRISMA_SCHEMA_ENGINE_BINARY names an existing file; generate never runs that engine (the
# prisma-client generator parses the schema with wasm from npm), so a stub that refuses is enough.
PRISMA_SCHEMA_ENGINE_BINARY="$here/test/prisma/no-schema-engine.sh" CHECKPOINT_DISABLE=1 \
    PRISMA_HIDE_UPDATE_MESSAGE=1 npx --no-install prisma generate --schema test/prisma/schema.prisma >/dev/null
echo "== build"
npm run --silent build
npx --no-install tsc -p tsconfig.test.json

echo "== PostgreSQL 15 cluster"
mkdir -p "$tmp/pg"
if [ ${#as_pg[@]} -gt 0 ]; then chown -R "$pg_user" "$tmp/pg"; fi
port="$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
"${as_pg[@]}" "$PG_BIN/initdb" -U postgres -A trust -E UTF8 --locale=C --no-sync --no-instructions -D "$pgdata" >/dev/null
"${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$pgdata" -l "$tmp/pg/postgres.log" -w -t 60 \
    -o "-p $port -k $tmp/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    start >/dev/null
export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"

"$HIGHWATER_BIN" migrate
"$PG_BIN/psql" "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -f test/fixtures/setup.sql
for schema in test/fixtures/event-types/*.schema.json; do
    "$HIGHWATER_BIN" event-types register "$(basename "$schema" .schema.json)" --schema "$schema"
done
while read -r name; do
    [ -n "$name" ] && "$HIGHWATER_BIN" event-types register "$name"
done <test/fixtures/event-types/no-schema.txt
"$HIGHWATER_BIN" consumer apply -f test/fixtures/consumers.yaml

echo "== datamodel-code-generator for highwater-codegen --lang python (hash-pinned venv)"
reqs="$here/codegen/requirements-python.txt"
venv="${HW_CODEGEN_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/highwater-codegen/venv-$(sha256sum "$reqs" | cut -c1-16)}"
if [ ! -x "$venv/bin/datamodel-codegen" ]; then
    rm -rf "$venv"
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: --require-hashes -r "$reqs"
fi
export HW_CODEGEN_PYTHON_GENERATOR="$venv/bin/datamodel-codegen"

echo "== tests"
export HIGHWATER_BIN HW_TEST_TMP="$tmp"
node --test --test-reporter=spec --test-concurrency=2 build/test/*.test.js

echo "== npm pack, installed into an empty application"
mkdir -p "$tmp/pack" "$tmp/app"
tarball="$tmp/pack/$(npm pack --silent --pack-destination "$tmp/pack" | tail -1)"
cp test/package-smoke/package.json test/package-smoke/smoke.mjs test/package-smoke/smoke.ts \
    test/package-smoke/tsconfig.json "$tmp/app/"
(
    cd "$tmp/app"
    # Versions as pinned in this package's lock file (already in npm's cache after npm ci).
    npm install --no-audit --no-fund --loglevel=error --prefer-offline --save-exact \
        "$tarball" "pg@$(node -p 'require(process.argv[1]).version' "$here/node_modules/pg/package.json")" \
        "kysely@$(node -p 'require(process.argv[1]).version' "$here/node_modules/kysely/package.json")"
    node smoke.mjs
    "$here/node_modules/.bin/tsc" -p tsconfig.json
)
echo "== installed from the repository path (npm links the directory)"
mkdir -p "$tmp/app-dir"
cp test/package-smoke/package.json test/package-smoke/smoke.mjs "$tmp/app-dir/"
(
    cd "$tmp/app-dir"
    npm install --no-audit --no-fund --loglevel=error --prefer-offline --save-exact \
        "$here" "pg@$(node -p 'require(process.argv[1]).version' "$here/node_modules/pg/package.json")" \
        "kysely@$(node -p 'require(process.argv[1]).version' "$here/node_modules/kysely/package.json")"
    node smoke.mjs
)
echo "== all passed in $((SECONDS - start)) s"
