#!/usr/bin/env bash
# Builds the benchmark's Go peers (watermill/, river/: small programs on the published
# watermill-sql and River modules, pinned by their go.sum) into
# ${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}/bench-peers/<hash of the recipe>/ and prints
# that directory on stdout. A second run with the same sources builds nothing.
#
# Go: the one on PATH, else /usr/local/go/bin/go, else the toolchain e2e/control-plane/build.sh
# fetched into the same cache (run that first on a machine without Go).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}
PEERS=(watermill river)

say() { printf 'bench-peers: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

key=$(
    for p in "${PEERS[@]}"; do cat "$here/$p/go.mod" "$here/$p/go.sum" "$here/$p"/*.go; done
    echo "recipe 1: CGO_ENABLED=0 -trimpath"
) 
key=$(printf '%s' "$key" | sha256sum | cut -c1-12)
out="$cache/bench-peers/$key"
mkdir -p "$cache/bench-peers"

exec 9>"$cache/bench-peers/build.lock"
flock 9

missing=()
for p in "${PEERS[@]}"; do [ -x "$out/$p-peer" ] || missing+=("$p"); done
if [ ${#missing[@]} -eq 0 ]; then
    echo "$out"
    exit 0
fi

gobin=$(command -v go || true)
[ -n "$gobin" ] || { [ -x /usr/local/go/bin/go ] && gobin=/usr/local/go/bin/go; } || true
if [ -z "$gobin" ]; then
    gobin=$(find "$cache/go/toolchain" -path '*/bin/go' -type f 2>/dev/null | sort | tail -n1 || true)
fi
[ -n "$gobin" ] || die "no Go found: install Go, or run e2e/control-plane/build.sh first (it fetches one)"

export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build" GOPATH="$cache/go/path"
export CGO_ENABLED=0 GOWORK=off GOFLAGS="-mod=readonly -modcacherw -buildvcs=false"
mkdir -p "$out.part"
for p in "${missing[@]}"; do
    say "building $p-peer with $("$gobin" env GOVERSION) …"
    (cd "$here/$p" && nice -n 10 "$gobin" build -trimpath -o "$out.part/$p-peer" .) ||
        die "building the $p peer failed (its modules come from the Go module proxy: is it reachable?)"
done
mkdir -p "$out"
mv "$out.part"/* "$out"/
rmdir "$out.part"
echo "$out"
