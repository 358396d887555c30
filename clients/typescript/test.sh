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
#   4. the README's Install block run as written, each of its routes (the directory, npm pack and
#      the tarball) from a clean copy of this directory (clients/clean-copy.sh) into an empty
#      application, which imports the package by name, uses it against the cluster and
#      type-checks a TypeScript file against its declarations.
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

echo "== the README's installs, each from a clean copy into an empty application"
# The "## Install" block of README.md, run as written: each route (the commands after one of its
# comment lines) in an application directory of its own that holds a copy of this directory as a
# fresh clone has it (clients/clean-copy.sh: no node_modules/, no dist/), at the path the README
# uses (./highwater/clients/typescript). The application then imports the package by name and
# uses it against the cluster above (smoke.mjs), and type-checks smoke.ts against its
# declarations. npm reads its cache first (npm_config_*: the commands stay the README's).
export npm_config_prefer_offline=true npm_config_audit=false npm_config_fund=false npm_config_loglevel=error
pg_version="$(node -p 'require(process.argv[1]).version' "$here/node_modules/pg/package.json")"
kysely_version="$(node -p 'require(process.argv[1]).version' "$here/node_modules/kysely/package.json")"
routes=()
route=""
while IFS= read -r line; do
    case "$line" in
        "#"*) [ -n "$route" ] && routes+=("$route"); route="" ;;
        "") ;;
        *) route+="$line"$'\n' ;;
    esac
done < <(bash "$repo/clients/readme-block.sh" README.md Install sh)
[ -n "$route" ] && routes+=("$route")
if [ ${#routes[@]} -lt 2 ]; then
    echo "test.sh: README.md's Install block no longer has the directory and the tarball routes (comment lines between them)" >&2
    exit 1
fi
n=0
for route in "${routes[@]}"; do
    n=$((n + 1))
    app="$tmp/readme-$n"
    mkdir -p "$app"
    bash "$repo/clients/clean-copy.sh" "$here" "$app/highwater"
    cp test/package-smoke/package.json test/package-smoke/smoke.mjs test/package-smoke/smoke.ts \
        test/package-smoke/tsconfig.json "$app/"
    echo "-- route $n:"
    sed 's/^/   /' <<<"${route%$'\n'}"
    (
        cd "$app"
        # The application's own driver and query builder (versions as this package's lock pins).
        npm install --save-exact "pg@$pg_version" "kysely@$kysely_version"
        bash -euo pipefail -c "$route"
        pkg="node_modules/@highwater/client"
        for f in dist/index.js dist/index.d.ts dist/codegen.js codegen/requirements-python.txt; do
            if [ ! -e "$pkg/$f" ]; then
                echo "test.sh: route $n installed @highwater/client without $f (it holds: $(cd "$pkg" && find . -type f -not -path './node_modules/*' | sort | tr '\n' ' '))" >&2
                exit 1
            fi
        done
        node smoke.mjs
        npx --no-install highwater-codegen --help >/dev/null
        "$here/node_modules/.bin/tsc" -p tsconfig.json
    )
done
echo "== all passed in $((SECONDS - start)) s"
