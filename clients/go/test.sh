#!/usr/bin/env bash
# Tests of the highwater Go client against a real PostgreSQL 15 and real highwater processes:
#   1. gofmt, `go mod verify`, `go vet` (module cache filled from go.sum's pinned versions);
#   2. a throwaway cluster (initdb in a temporary directory, a free loopback port), `highwater
#      migrate`, the test event types, tables and consumers (testdata/);
#   3. `go test ./...` (the tests start their own dispatchers);
#   4. example/, a separate module that requires this one through a replace directive: built and
#      run against the same database with a dispatcher, as an application would use the module;
#   5. the README's route: its Install commands run as written in a new module beside a clean copy
#      of this directory (clients/clean-copy.sh), its Example block compiled as written and run
#      by testdata/readme/main.go with that dispatcher (a committed write is applied, a refused
#      write's error comes back).
# Exits non-zero on any failure; the cluster, the dispatchers and the temporary files go away at
# exit whatever happened.
#
# Environment: HIGHWATER_BIN (default <repo>/target/debug/highwater), PG_BIN (default
# /usr/lib/postgresql/15/bin), GO (default go).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
HIGHWATER_BIN="${HIGHWATER_BIN:-$repo/target/debug/highwater}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
GO="${GO:-go}"

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
if ! command -v "$GO" >/dev/null; then
    echo "test.sh: no Go toolchain ($GO); go.mod needs Go 1.25 or newer" >&2
    exit 1
fi

start=$SECONDS
tmp="$(mktemp -d "${TMPDIR:-/tmp}/highwater-go-test.XXXXXX")"
pgdata="$tmp/pg/data"
chmod 711 "$tmp"

# PostgreSQL refuses to run as root: as root, the cluster belongs to the postgres (or nobody) user.
as_pg=()
if [ "$(id -u)" = 0 ]; then
    pg_user=postgres
    id -u postgres >/dev/null 2>&1 || pg_user=nobody
    as_pg=(runuser -u "$pg_user" --)
fi

gotest=
cleanup() {
    local rc=$?
    set +e
    if [ -n "${gotest:-}" ]; then
        kill -KILL -- "-$gotest" 2>/dev/null
        wait "$gotest" 2>/dev/null
    fi
    # Dispatchers left behind by tests that died before stopping them (their pid files), and
    # the example's.
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

# A port nothing listens on now: bind port 0 on the loopback and give it back.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

cd "$here"
echo "== gofmt, go mod verify, go vet"
unformatted="$(gofmt -l .)"
if [ -n "$unformatted" ]; then
    echo "test.sh: not gofmt'd:" $unformatted >&2
    exit 1
fi
"$GO" mod download
"$GO" mod verify
"$GO" vet ./...
(cd example && "$GO" vet ./...)

echo "== PostgreSQL 15 cluster"
mkdir -p "$tmp/pg" "$tmp/pids"
if [ ${#as_pg[@]} -gt 0 ]; then chown -R "$pg_user" "$tmp/pg"; fi
port="$(free_port)"
"${as_pg[@]}" "$PG_BIN/initdb" -U postgres -A trust -E UTF8 --locale=C --no-sync --no-instructions -D "$pgdata" >/dev/null
"${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$pgdata" -l "$tmp/pg/postgres.log" -w -t 60 \
    -o "-p $port -k $tmp/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    start >/dev/null
export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"

"$HIGHWATER_BIN" migrate
"$PG_BIN/psql" "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -f testdata/setup.sql
for schema in testdata/event-types/*.schema.json; do
    "$HIGHWATER_BIN" event-types register "$(basename "$schema" .schema.json)" --schema "$schema"
done
while read -r name; do
    [ -n "$name" ] && "$HIGHWATER_BIN" event-types register "$name"
done <testdata/event-types/no-schema.txt
"$HIGHWATER_BIN" consumer apply -f testdata/consumers.yaml

echo "== go test"
export HIGHWATER_BIN HW_TEST_TMP="$tmp"
# -count=1: never a cached result, the database is new each run. In its own process group and in
# the background, so that a signal to this script stops the test binary and its dispatchers at
# once (bash runs a trap only when the foreground command ends; `wait` it interrupts).
setsid "$GO" test -count=1 -v ./... >"$tmp/go-test.log" 2>&1 &
gotest=$!
test_rc=0
wait "$gotest" || test_rc=$?
gotest=
# Shown: each top-level test's result and every failure line; the whole output is in the log.
grep -E '^(--- |FAIL|ok|PASS|panic)|_test\.go:' "$tmp/go-test.log" || true
if [ "$test_rc" != 0 ]; then
    echo "test.sh: go test failed; its full output:" >&2
    cat "$tmp/go-test.log" >&2
    exit "$test_rc"
fi
passed=$(grep -c -- '^ *--- PASS' "$tmp/go-test.log" || true)
echo "go test: $passed tests and subtests passed"

echo "== example/: a module requiring this one (replace directive), built and run"
(cd example && "$GO" build -buildvcs=false -o "$tmp/example" .)
dport="$(free_port)"
"$HIGHWATER_BIN" dispatch --listen "127.0.0.1:$dport" --instance-id go-example --shutdown-grace 1s \
    2>"$tmp/example-dispatcher.log" &
dpid=$!
touch "$tmp/pids/$dpid"
out="$("$tmp/example")"
echo "$out"
case "$out" in
    *"applied true"*) ;;
    *) echo "test.sh: the example did not see its write applied" >&2; cat "$tmp/example-dispatcher.log" >&2; exit 1 ;;
esac

echo "== the README: its install commands and its example, in a new module beside a clean copy"
# README.md's "Install" block run as written in a new module ($tmp/readme/app) beside a copy of
# this directory as a fresh clone has it (clients/clean-copy.sh), at the README's path
# (../highwater/clients/go): the replace directive the README names. The module's code is the
# README's "Example" block as written (example.go, after a package clause: it cannot drift from
# what readers copy) and testdata/readme/main.go, which runs it against this cluster while the
# dispatcher above runs: a committed write comes back applied, a refused one as its error.
readme="$tmp/readme"
bash "$repo/clients/clean-copy.sh" "$here" "$readme/highwater"
mkdir -p "$readme/app"
{
    printf 'package main\n\n'
    bash "$repo/clients/readme-block.sh" README.md Example go
} >"$readme/app/example.go"
cp testdata/readme/main.go "$readme/app/main.go"
install_block="$(bash "$repo/clients/readme-block.sh" README.md Install sh)"
go_dir="$(dirname "$(command -v "$GO")")"
(
    cd "$readme/app"
    export PATH="$go_dir:$PATH" # the README says `go`
    go mod init example.com/readme-app
    bash -euo pipefail -c "$install_block"
    go vet .
    go build -o "$tmp/readme-example" .
)
"$tmp/readme-example"

kill -TERM "$dpid" && wait "$dpid" || true
rm -f "$tmp/pids/$dpid"

echo "== all passed in $((SECONDS - start)) s"
