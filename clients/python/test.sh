#!/usr/bin/env bash
# Tests of highwater-client (Python) against a real PostgreSQL 15 and real highwater processes:
#   1. a venv with requirements-test.txt (exact pins, hashes; cached under HW_PY_CACHE, default
#      ~/.cache/highwater-client-python, keyed by the lock file), the package installed into this
#      run's temporary directory, mypy --strict over it;
#   2. a throwaway cluster (initdb in the temporary directory, a free loopback port), `highwater
#      migrate`, the test event types, tables and consumers (tests/fixtures/);
#   3. pytest over tests/ (the tests start their own dispatchers);
#   4. sdist and wheel built (python -m build, no isolation: the pinned hatchling), each
#      installed into a fresh venv (requirements-smoke.txt) and used there (tests/smoke/smoke.py);
#   5. each `pip install` line of README.md's Install block run as written, from a clean copy of
#      this directory (clients/clean-copy.sh) into a fresh venv, offline from the smoke lock's
#      wheels; with the [psycopg,sqlalchemy] extras, smoke.py there too (its asyncio part needs
#      what the extras bring).
# Exits non-zero on any failure; the cluster, the dispatchers and the temporary files go away at
# exit whatever happened.
#
# Environment: HIGHWATER_BIN (default <repo>/target/debug/highwater), PG_BIN (default
# /usr/lib/postgresql/15/bin), PYTHON (default python3, 3.11 or newer), HW_PY_CACHE.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
HIGHWATER_BIN="${HIGHWATER_BIN:-$repo/target/debug/highwater}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PYTHON="${PYTHON:-python3}"

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
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "test.sh: $PYTHON is older than Python 3.11 (set PYTHON)" >&2
    exit 1
}

start=$SECONDS
tmp="$(mktemp -d "${TMPDIR:-/tmp}/highwater-python-client-test.XXXXXX")"
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
    # A cached venv or wheel directory this run was still building (renamed away once complete).
    [ -n "${building:-}" ] && rm -rf "$building"
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

step() { echo "== $* (at $((SECONDS - start)) s)"; }

# pip's quiet, hash-checked install of a lock file into a venv.
pip_locked() { "$1/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$2"; }

cd "$here"
step "venv (requirements-test.txt)"
# The test venv is cached, keyed by the lock file and the interpreter: a changed pin makes a new
# one. Built under a temporary name and renamed when complete, so an interrupted run leaves none
# half-installed. (Only `python -m ...` is used from it: a renamed venv's scripts would not run.)
cache="${HW_PY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/highwater-client-python}"
key="$( (cat requirements-test.txt; "$PYTHON" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)"
venv="$cache/venv-$key"
if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$cache"
    building="$(mktemp -d "$cache/building.XXXXXX")"
    "$PYTHON" -m venv "$building"
    pip_locked "$building" requirements-test.txt
    # Another run may have finished the same venv meanwhile: keep theirs.
    mv -T "$building" "$venv" 2>/dev/null || rm -rf "$building"
fi
py="$venv/bin/python"
# The package itself, installed afresh into this run's directory: the tests import what an
# installation holds, not the source tree.
"$py" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation --target "$tmp/pkg" "$here"
export PYTHONPATH="$tmp/pkg"

step "mypy --strict"
"$py" -m mypy --cache-dir "$cache/mypy-$key" src/highwater_client

step "PostgreSQL 15 cluster"
mkdir -p "$tmp/pg"
if [ ${#as_pg[@]} -gt 0 ]; then chown -R "$pg_user" "$tmp/pg"; fi
port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"${as_pg[@]}" "$PG_BIN/initdb" -U postgres -A trust -E UTF8 --locale=C --no-sync --no-instructions -D "$pgdata" >/dev/null
"${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$pgdata" -l "$tmp/pg/postgres.log" -w -t 60 \
    -o "-p $port -k $tmp/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    start >/dev/null
export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"

"$HIGHWATER_BIN" migrate
"$PG_BIN/psql" "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -f tests/fixtures/setup.sql
for schema in tests/fixtures/event-types/*.schema.json; do
    "$HIGHWATER_BIN" event-types register "$(basename "$schema" .schema.json)" --schema "$schema"
done
while read -r name; do
    [ -n "$name" ] && "$HIGHWATER_BIN" event-types register "$name"
done <tests/fixtures/event-types/no-schema.txt
"$HIGHWATER_BIN" consumer apply -f tests/fixtures/consumers.yaml

step "tests"
export HIGHWATER_BIN HW_TEST_TMP="$tmp"
# Nothing written into the source tree (no .pytest_cache, no __pycache__); the package comes
# from $tmp/pkg (src/ is not on sys.path).
PYTHONDONTWRITEBYTECODE=1 "$py" -m pytest -p no:cacheprovider tests

step "sdist and wheel, each installed into a fresh venv"
unset PYTHONPATH  # the fresh venvs see only what they installed
# The smoke lock's wheels, downloaded once into the cache (hash-checked again at each install).
smoke_wheels="$cache/wheels-$( (cat requirements-smoke.txt; "$PYTHON" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-16)"
if [ ! -d "$smoke_wheels" ]; then
    building="$(mktemp -d "$cache/building.XXXXXX")"
    "$py" -m pip download --quiet --disable-pip-version-check --require-hashes --no-deps \
        -r requirements-smoke.txt -d "$building"
    mv -T "$building" "$smoke_wheels" 2>/dev/null || rm -rf "$building"
fi
"$py" -m build --no-isolation --sdist --wheel --outdir "$tmp/dist" . >"$tmp/build.log" 2>&1 || {
    cat "$tmp/build.log" >&2
    exit 1
}
wheel=("$tmp/dist"/highwater_client-*.whl)
sdist=("$tmp/dist"/highwater_client-*.tar.gz)
for artifact in "${wheel[0]}" "${sdist[0]}"; do
    app="$tmp/app-$(basename "$artifact")"
    "$PYTHON" -m venv "$app"
    "$app/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
        --no-index --find-links "$smoke_wheels" -r requirements-smoke.txt
    # --no-build-isolation: the sdist builds with the pinned hatchling, offline.
    "$app/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation "$artifact"
    (cd "$tmp" && "$app/bin/python" "$here/tests/smoke/smoke.py")
done

step "the README's pip install lines, each from a clean copy into a fresh venv"
# Each `pip install` line of README.md's "## Install" block, run as written in an application
# directory holding a copy of this directory as a fresh clone has it (clients/clean-copy.sh), at
# the README's path (./highwater/clients/python), with the `pip` of a venv of its own. pip reads
# only the smoke lock's hash-checked wheels (PIP_NO_INDEX, PIP_FIND_LINKS: for the build backend
# too), so the extras resolve to the locked versions, and an extra that leaves out what the
# README's routes need (greenlet, for AsyncSession) fails here.
mapfile -t installs < <(bash "$repo/clients/readme-block.sh" README.md Install sh | grep '^pip install ')
case "${installs[*]}" in
    *"[psycopg,sqlalchemy]"*) ;;
    *) echo "test.sh: README.md's Install block has no \`pip install\` line with the [psycopg,sqlalchemy] extras" >&2; exit 1 ;;
esac
n=0
for line in "${installs[@]}"; do
    n=$((n + 1))
    app="$tmp/readme-$n"
    mkdir -p "$app"
    bash "$repo/clients/clean-copy.sh" "$here" "$app/highwater"
    "$PYTHON" -m venv "$app/venv"
    echo "-- $line"
    (
        cd "$app"
        PATH="$app/venv/bin:$PATH" PIP_NO_INDEX=1 PIP_FIND_LINKS="$smoke_wheels" PIP_QUIET=1 \
            PIP_DISABLE_PIP_VERSION_CHECK=1 bash -euo pipefail -c "$line"
    )
    case "$line" in
        # With the drivers: the whole smoke, sync and asyncio.
        *"[psycopg,sqlalchemy]"*) (cd "$tmp" && "$app/venv/bin/python" "$here/tests/smoke/smoke.py") ;;
        # Alone (no driver): it installs and imports.
        *) (cd "$tmp" && "$app/venv/bin/python" -c 'import highwater_client, highwater_client.aio; print("installed alone:", highwater_client.__file__)') ;;
    esac
done
echo "== all passed in $((SECONDS - start)) s"
