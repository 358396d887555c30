#!/usr/bin/env bash
# One trace from a TypeScript writer to a webhook receiver, in a real Jaeger (issue 48;
# docs/observability.md, "One trace, end to end"): a throwaway PostgreSQL 15, `highwater migrate`,
# a webhook consumer `order-emails`, `highwater dispatch` exporting its spans (OTEL_*), Jaeger
# v1.75's all-in-one (e2e/trace-backend/build.sh), then node's test runner over demo.test.mjs:
# the order service appends with @highwater/client (this repository's, built here) inside its
# span, the email service receives the webhook and continues the trace; Jaeger must return the
# three spans, each the child of the one before.
#
# Environment: HIGHWATER_BIN (default <repo>/target/debug/highwater), PG_BIN (default
# /usr/lib/postgresql/15/bin), CHROMIUM (default /usr/bin/chromium), HW_TRACE_SCREENSHOT (a PNG
# of the trace: docs/observability/trace.png when the docs are refreshed; none otherwise).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# A relative screenshot path is the caller's.
case "${HW_TRACE_SCREENSHOT:-}" in "" | /*) ;; *) HW_TRACE_SCREENSHOT="$PWD/$HW_TRACE_SCREENSHOT" ;; esac
repo="$(cd "$here/../.." && pwd)"
HIGHWATER_BIN="${HIGHWATER_BIN:-$repo/target/debug/highwater}"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
for f in "$HIGHWATER_BIN" "$PG_BIN/initdb" "$PG_BIN/pg_ctl" "$PG_BIN/psql" "$CHROMIUM"; do
    if [ ! -x "$f" ]; then
        echo "e2e/trace-demo/test.sh: $f is missing (highwater: cargo build; PostgreSQL 15: PG_BIN; chromium: apt-get install chromium, as .ci/run does)" >&2
        exit 1
    fi
done
jaeger_bin="$("$repo/e2e/trace-backend/build.sh")"

# shellcheck source=../pg/throwaway.sh
. "$repo/e2e/pg/throwaway.sh"
throwaway_begin highwater-trace-demo

# The client as this repository builds it (the package's own install routes are tested by
# clients/typescript/test.sh), then the demo's pinned packages.
(cd "$repo/clients/typescript" && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error; } &&
    npm run build --silent >/dev/null)
cd "$here"
npm ci --no-audit --no-fund --loglevel=error

throwaway_pg

# Jaeger on free loopback ports, in memory (the configuration of e2e/src/jaeger.rs).
otlp_port="$(free_port)" query_port="$(free_port)" query_grpc="$(free_port)"
# Jaeger's web UI is not in its Go modules (its build is a separate npm project, jaegertracing/
# jaeger-ui, not on the npm registry): with JAEGER_UI_ASSETS naming the directory of a jaeger-ui
# build, Jaeger serves it and HW_TRACE_SCREENSHOT is a screenshot of the trace in that UI.
ui=""
if [ -n "${JAEGER_UI_ASSETS:-}" ]; then
    [ -f "$JAEGER_UI_ASSETS/index.html" ] || { echo "e2e/trace-demo/test.sh: JAEGER_UI_ASSETS=$JAEGER_UI_ASSETS has no index.html (the build/ directory of jaeger-ui)" >&2; exit 1; }
    ui="ui: {assets_path: \"$JAEGER_UI_ASSETS\"}"
fi
cat >"$tmp/jaeger.yaml" <<YAML
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces: {receivers: [otlp], processors: [batch], exporters: [jaeger_storage_exporter]}
  telemetry: {metrics: {level: none}, logs: {level: info}}
extensions:
  jaeger_query:
    storage: {traces: memstore}
    http: {endpoint: "127.0.0.1:$query_port"}
    grpc: {endpoint: "127.0.0.1:$query_grpc"}
    $ui
  jaeger_storage:
    backends: {memstore: {memory: {max_traces: 1000}}}
receivers:
  otlp: {protocols: {http: {endpoint: "127.0.0.1:$otlp_port"}}}
processors:
  batch: {timeout: 100ms}
exporters:
  jaeger_storage_exporter: {trace_storage: memstore}
YAML
"$jaeger_bin" --config "$tmp/jaeger.yaml" >"$tmp/jaeger.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do
    node -e "fetch('http://127.0.0.1:$query_port/api/services').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))" && break
    sleep 0.2
done

rx_port="$(free_port)"
"$HIGHWATER_BIN" migrate >/dev/null
"$HIGHWATER_BIN" event-types register OrderPlaced >/dev/null
cat >"$tmp/order-emails.yaml" <<YAML
apiVersion: highwater.dev/v1alpha1
kind: EventConsumer
metadata: {name: order-emails}
spec:
  delivery: Shared
  eventTypes: [OrderPlaced]
  sink: {webhook: {url: "http://127.0.0.1:$rx_port/hooks/order-placed"}}
YAML
"$HIGHWATER_BIN" consumer apply -f "$tmp/order-emails.yaml" >/dev/null
OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$otlp_port" OTEL_BSP_SCHEDULE_DELAY=100 \
    "$HIGHWATER_BIN" dispatch --instance-id trace-demo --listen off >"$tmp/dispatch.log" 2>&1 &
pids+=($!)

export RX_PORT="$rx_port" JAEGER_OTLP="http://127.0.0.1:$otlp_port" JAEGER_QUERY="http://127.0.0.1:$query_port" CHROMIUM
export HW_TRACE_SCREENSHOT="${HW_TRACE_SCREENSHOT:-}" JAEGER_UI_ASSETS="${JAEGER_UI_ASSETS:-}"
node --test --test-reporter=spec demo.test.mjs
