#!/usr/bin/env bash
# CI: `cargo build -p highwater --bin highwater && e2e/openapi/schemathesis.sh` (needs python3 >= 3.9, PostgreSQL 15 server binaries; ~1-2 min).
#
# Checks the dispatcher's HTTP server against its OpenAPI document (docs/openapi.json, served at
# GET /openapi.json) with schemathesis:
#   1. a venv with schemathesis from requirements.txt (pip-compile --generate-hashes; installed
#      with --require-hashes), cached under $HIGHWATER_E2E_CACHE/schemathesis/<hash of the lock>;
#   2. a throwaway PostgreSQL 15 cluster (initdb in a temporary directory, a free loopback port),
#      `highwater migrate`, an event type, a Shared sql consumer and a PerInstance sse consumer;
#   3. `highwater dispatch --listen 127.0.0.1:PORT` with an SSE bearer token;
#   4. `schemathesis run` on every operation, positive and negative data (--mode all), with the
#      checks not_a_server_error, status_code_conformance, content_type_conformance,
#      response_schema_conformance, response_headers_conformance, negative_data_rejection (bad
#      input answered 4xx) and ignored_auth (the token is really checked), the token sent;
#   5. the one answer schemathesis cannot judge, checked here with curl: the event stream itself
#      (200, text/event-stream, an event). The stream never ends, and schemathesis reads a whole
#      body before checking it, so it would only see its request timeout. Fuzzed consumer names
#      are random, so schemathesis reaches the stream endpoint's 400/401/404 and never a stream;
#      the wait endpoint likewise answers at once (unknown consumer) instead of long-polling.
#      dispatcher/tests/openapi.rs reaches every documented status code of every operation.
# Exits non-zero on any failure; the cluster, the dispatcher and the temporary files go away at
# exit whatever happened.
#
# Environment: HIGHWATER_BIN (default <repo>/target/debug/highwater), PG_BIN (default
# /usr/lib/postgresql/15/bin), HIGHWATER_E2E_CACHE (default ~/.cache/highwater-e2e),
# SCHEMATHESIS_MAX_EXAMPLES (default 100 per operation), PYTHON (default python3).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
HIGHWATER_BIN="${HIGHWATER_BIN:-$repo/target/debug/highwater}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PYTHON="${PYTHON:-python3}"
cache_root="${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}/schemathesis"
max_examples="${SCHEMATHESIS_MAX_EXAMPLES:-100}"
token="schemathesis-t0ken"

if [ ! -x "$HIGHWATER_BIN" ]; then
    echo "schemathesis.sh: no highwater binary at $HIGHWATER_BIN (cargo build -p highwater --bin highwater, or set HIGHWATER_BIN)" >&2
    exit 1
fi
for b in initdb pg_ctl psql; do
    if [ ! -x "$PG_BIN/$b" ]; then
        echo "schemathesis.sh: $PG_BIN/$b is missing (PostgreSQL 15 server binaries; set PG_BIN)" >&2
        exit 1
    fi
done

start=$SECONDS
tmp="$(mktemp -d "${TMPDIR:-/tmp}/highwater-schemathesis.XXXXXX")"
pgdata="$tmp/pg/data"
chmod 711 "$tmp"
dispatcher_pid=

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
    if [ -n "$dispatcher_pid" ]; then
        kill "$dispatcher_pid" 2>/dev/null
        wait "$dispatcher_pid" 2>/dev/null
    fi
    if [ -f "$pgdata/postmaster.pid" ]; then
        "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$pgdata" -m immediate -w stop >/dev/null 2>&1
    fi
    if [ "$rc" != 0 ] && [ -f "$tmp/dispatch.log" ]; then
        echo "== dispatcher log (last 40 lines)" >&2
        tail -40 "$tmp/dispatch.log" >&2
    fi
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

echo "== schemathesis venv"
lock_hash="$(sha256sum "$here/requirements.txt" | cut -c1-16)"
venv="$cache_root/$lock_hash"
# A venv's scripts name its directory, so it is built in place; .complete marks a finished install.
if [ ! -f "$venv/.complete" ]; then
    rm -rf "$venv"
    mkdir -p "$cache_root"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps \
        -r "$here/requirements.txt"
    touch "$venv/.complete"
fi
"$venv/bin/schemathesis" --version

echo "== PostgreSQL 15 cluster"
mkdir -p "$tmp/pg"
if [ ${#as_pg[@]} -gt 0 ]; then chown -R "$pg_user" "$tmp/pg"; fi
port="$(free_port)"
"${as_pg[@]}" "$PG_BIN/initdb" -U postgres -A trust -E UTF8 --locale=C --no-sync --no-instructions -D "$pgdata" >/dev/null
"${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$pgdata" -l "$tmp/pg/postgres.log" -w -t 60 \
    -o "-p $port -k $tmp/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    start >/dev/null
export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"

"$HIGHWATER_BIN" migrate
"$HIGHWATER_BIN" event-types register OrderPlaced
cat >"$tmp/consumers.yaml" <<'YAML'
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata:
  name: order-log
spec:
  delivery: Shared
  eventTypes: [OrderPlaced]
  sink:
    log: {target: stderr}
---
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata:
  name: order-stream
spec:
  delivery: PerInstance
  eventTypes: [OrderPlaced]
  sink:
    sse: {buffer: 64}
YAML
"$HIGHWATER_BIN" consumer apply -f "$tmp/consumers.yaml"

echo "== highwater dispatch"
http_port="$(free_port)"
base="http://127.0.0.1:$http_port"
HIGHWATER_SSE_TOKENS="$token" HIGHWATER_LOG="info,sqlx=warn" \
    "$HIGHWATER_BIN" dispatch --instance-id schemathesis --listen "127.0.0.1:$http_port" >"$tmp/dispatch.log" 2>&1 &
dispatcher_pid=$!
for _ in $(seq 1 300); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/readyz")" = 200 ]; then break; fi
    kill -0 "$dispatcher_pid" 2>/dev/null || { echo "schemathesis.sh: the dispatcher exited" >&2; exit 1; }
    sleep 0.1
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/readyz")" = 200 ] || { echo "schemathesis.sh: /readyz never turned 200" >&2; exit 1; }

echo "== the event stream (schemathesis cannot judge a body that never ends)"
curl -s -N --max-time 3 -H "Authorization: Bearer $token" -D "$tmp/sse.headers" -o "$tmp/sse.body" \
    "$base/v1/consumers/order-stream/events" &
curl_pid=$!
sleep 1
"$PG_BIN/psql" "$DATABASE_URL" -X -q -c "SELECT highwater.append('orders', '1', 'OrderPlaced', '{}')" >/dev/null
wait "$curl_pid" || true # --max-time ends it
grep -qi '^HTTP/1.1 200' "$tmp/sse.headers" || { echo "schemathesis.sh: the stream did not answer 200" >&2; cat "$tmp/sse.headers" >&2; exit 1; }
grep -qi '^content-type: text/event-stream' "$tmp/sse.headers" || { echo "schemathesis.sh: the stream is not text/event-stream" >&2; exit 1; }
grep -q '^event: OrderPlaced' "$tmp/sse.body" || { echo "schemathesis.sh: no event arrived on the stream" >&2; cat "$tmp/sse.body" >&2; exit 1; }
echo "stream: 200 text/event-stream, the appended event arrived"

echo "== schemathesis run"
cd "$tmp"
"$venv/bin/schemathesis" --config-file "$here/schemathesis.toml" run "$base/openapi.json" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance,negative_data_rejection,ignored_auth \
    --mode all \
    --header "Authorization: Bearer $token" \
    --max-examples "$max_examples" \
    --request-timeout 10 \
    --seed 37 \
    --generation-database none \
    --no-color
echo "== passed in $((SECONDS - start)) s"
