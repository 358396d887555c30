#!/usr/bin/env bash
# The console in a real browser (issue 47): Debian's Chromium (/usr/bin/chromium, never a
# downloaded one) driven by playwright-core from npm, against a real PostgreSQL 15, a real
# `highwater dispatch` and a real `highwater console`:
#   1. npm ci (package-lock.json: playwright-core and htmx.org), and the htmx the console embeds
#      (console/assets/htmx.min.js) checked byte for byte against the pinned package's;
#   2. a throwaway cluster, `highwater migrate`, a SQL consumer that refuses a payload that is not
#      an object (fixtures/), three events of which one is the string "<img src=x onerror=alert(1)>",
#      which the dispatcher dead-letters;
#   3. node's test runner over console.test.mjs: the overview and the dead-letters page (the
#      payload shown as text, no dialog, no CSP violation, htmx's live refresh running), an
#      action refused without a login and with a forged CSRF token, a login with an ops token, the
#      sink fixed, the dead letter redriven from the page after its dry run, delivered exactly once;
#      a disabled consumer with a backlog of 300 events enabled from its page and its lag watched
#      falling to 0 on the overview while the dispatcher drains it; the stream and event-type
#      pages; axe-core (pinned, injected from node_modules) on every page, no violation.
# Screenshots go to $HW_CONSOLE_SCREENSHOTS (docs/console/ when the docs are refreshed; a
# temporary directory otherwise). Exits non-zero on any failure; everything it started goes away.
#
# Environment: HIGHWATER_BIN (default <repo>/target/debug/highwater), PG_BIN (default
# /usr/lib/postgresql/15/bin), CHROMIUM (default /usr/bin/chromium), HW_CONSOLE_SCREENSHOTS.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
HIGHWATER_BIN="${HIGHWATER_BIN:-$repo/target/debug/highwater}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
for f in "$HIGHWATER_BIN" "$PG_BIN/initdb" "$PG_BIN/pg_ctl" "$PG_BIN/psql" "$CHROMIUM"; do
    if [ ! -x "$f" ]; then
        echo "console/browser/test.sh: $f is missing (highwater: cargo build; PostgreSQL 15: PG_BIN; chromium: apt-get install chromium, as .ci/run does)" >&2
        exit 1
    fi
done

# shellcheck source=../../e2e/pg/throwaway.sh
. "$repo/e2e/pg/throwaway.sh"
throwaway_begin highwater-console-test

cd "$here"
npm ci --no-audit --no-fund --loglevel=error
cmp "$repo/console/assets/htmx.min.js" node_modules/htmx.org/dist/htmx.min.js ||
    { echo "console/assets/htmx.min.js is not htmx.org's as package-lock.json pins it: copy node_modules/htmx.org/dist/htmx.min.js there" >&2; exit 1; }

throwaway_pg
psql() { "$PG_BIN/psql" "$DATABASE_URL" -X -q -At -v ON_ERROR_STOP=1 "$@"; }

"$HIGHWATER_BIN" migrate >/dev/null
psql -f fixtures/setup.sql
"$HIGHWATER_BIN" event-types register OrderPlaced >/dev/null
"$HIGHWATER_BIN" event-types register Tick >/dev/null
"$HIGHWATER_BIN" consumer apply -f fixtures/consumer.yaml >/dev/null
"$HIGHWATER_BIN" consumer apply -f fixtures/drain.yaml >/dev/null
append() { "$HIGHWATER_BIN" events append --stream-type order --stream-id "$1" --type OrderPlaced --payload "$2" >/dev/null; }
append o-1 '{"order": 1, "total": 12.5}'
append o-2 '"<img src=x onerror=alert(1)>"'
append o-3 '{"order": 3, "total": 99}'

"$HIGHWATER_BIN" dispatch --instance-id browser-test --listen off >"$tmp/dispatch.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do
    [ "$(psql -c 'SELECT count(*) FROM highwater.dead_letters')" = 1 ] && [ "$(psql -c 'SELECT count(*) FROM seen')" = 2 ] && break
    sleep 0.1
done
[ "$(psql -c 'SELECT count(*) FROM highwater.dead_letters')" = 1 ] || { echo "the hostile event was not dead-lettered" >&2; exit 1; }
# The drain's backlog: 300 events its disabled shard waits on, for the page to enable and the
# overview to watch fall.
"$HIGHWATER_BIN" consumer disable ticks-drain >/dev/null
psql -c "SELECT count(highwater.append('tick', 't-' || g, 'Tick', jsonb_build_object('n', g), NULL, NULL, NULL)) FROM generate_series(1, 300) g" >/dev/null
# Tick's version 2 (a schema and an upcast), for the stream and event-type pages; an order event
# caused by the first one, in the same correlation.
"$HIGHWATER_BIN" event-types register Tick --version 2 --schema fixtures/tick-v2.schema.json \
    --upcast "payload || '{\"unit\": \"tick\"}'" >/dev/null
"$HIGHWATER_BIN" events append --stream-type order --stream-id o-1 --type OrderPlaced --payload '{"order": 1, "paid": true}' \
    --metadata "{\"correlation_id\": \"$(psql -c "SELECT metadata->>'correlation_id' FROM highwater.events WHERE id = 1")\", \"causation_id\": \"1\"}" >/dev/null

console_port="$(free_port)"
export HW_CONSOLE_TOKEN="browser-test-$RANDOM$RANDOM"
HIGHWATER_OPS_TOKENS="$HW_CONSOLE_TOKEN" "$HIGHWATER_BIN" console --listen "127.0.0.1:$console_port" >"$tmp/console.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
    node -e "fetch('http://127.0.0.1:$console_port/assets/console.css').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))" && break
    sleep 0.1
done

export HW_CONSOLE_URL="http://127.0.0.1:$console_port" CHROMIUM PSQL="$PG_BIN/psql"
export HW_CONSOLE_SCREENSHOTS="${HW_CONSOLE_SCREENSHOTS:-$tmp/screenshots}"
mkdir -p "$HW_CONSOLE_SCREENSHOTS"
node --test --test-reporter=spec --test-concurrency=1 console.test.mjs
