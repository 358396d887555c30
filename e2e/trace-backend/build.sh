#!/usr/bin/env bash
# Builds the trace backend of the tracing test (e2e/tests/tracing.rs): Jaeger v1.75's all-in-one
# (`cmd/jaeger`), from its published Go module through the wrapper module jaeger/ (its go.mod
# names it as a tool and its go.sum pins every module: `go install jaeger@v1.75.0` refuses the
# replace directives of Jaeger's own go.mod), into
# ${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}/trace-backend/<hash of the recipe>/jaeger,
# and prints that path on stdout. A second run with the same recipe builds nothing (seconds).
#
#   build.sh                   build what is missing; print the binary's path
#   build.sh --update-modules  regenerate jaeger/go.mod and go.sum (commit them)
#
# Go: the one on PATH, else /usr/local/go/bin/go, else the toolchain e2e/control-plane/build.sh
# fetched into the same cache. Cold, on 2 cores: about the time in docs/observability.md, "Tracing".
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}
VERSION=v1.75.0
PACKAGE=github.com/jaegertracing/jaeger/cmd/jaeger

say() { printf 'trace-backend: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

gobin=$(command -v go || true)
[ -n "$gobin" ] || { [ -x /usr/local/go/bin/go ] && gobin=/usr/local/go/bin/go; } || true
if [ -z "$gobin" ]; then
    gobin=$(find "$cache/go/toolchain" -path '*/bin/go' -type f 2>/dev/null | sort | tail -n1 || true)
fi
[ -n "$gobin" ] || die "no Go found: install Go, or run e2e/control-plane/build.sh first (it fetches one)"
export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build" GOPATH="$cache/go/path"
export CGO_ENABLED=0 GOWORK=off

if [ "${1:-}" = --update-modules ]; then
    cd "$here/jaeger"
    printf 'module highwater.dev/e2e/trace-backend/jaeger\n\ngo 1.24\n' >go.mod
    rm -f go.sum
    GOFLAGS="-modcacherw -buildvcs=false" "$gobin" get -tool "$PACKAGE@$VERSION"
    exit 0
fi
[ -z "${1:-}" ] || die "unknown argument $1 (usage: $0 [--update-modules])"

key=$(
    cat "$here/jaeger/go.mod" "$here/jaeger/go.sum"
    echo "recipe 1: $PACKAGE@$VERSION CGO_ENABLED=0 -trimpath -ldflags=-s -w"
)
key=$(printf '%s' "$key" | sha256sum | cut -c1-12)
out="$cache/trace-backend/$key"
mkdir -p "$cache/trace-backend"

exec 9>"$cache/trace-backend/build.lock"
flock 9

if [ -x "$out/jaeger" ]; then
    echo "$out/jaeger"
    exit 0
fi
started=$SECONDS
say "building Jaeger $VERSION with $("$gobin" env GOVERSION) (cold: several minutes) …"
mkdir -p "$out.part"
(cd "$here/jaeger" && GOFLAGS="-mod=readonly -modcacherw -buildvcs=false" \
    nice -n 10 "$gobin" build -trimpath -ldflags="-s -w" -o "$out.part/jaeger" "$PACKAGE") ||
    die "building Jaeger failed (its modules come from the Go module proxy: is it reachable?)"
mkdir -p "$out"
mv "$out.part/jaeger" "$out/jaeger"
rmdir "$out.part"
say "built in $((SECONDS - started))s"
echo "$out/jaeger"
