#!/usr/bin/env bash
# Builds the pinned helm (v3) from its Go module, once, into the e2e tool cache, and prints its
# path on stdout. The chart tests (e2e/tests/chart_static/) run it when no helm is found.
#
#   charts/build-helm.sh     build helm unless the pinned version is already there
#
# Cache: ${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}: the binary in tools/helm (with
# tools/helm.version naming the version it was built at), the Go module and build caches in go/
# (shared with e2e/control-plane/build.sh), the build log in logs/helm.log. Needs Go 1.26+ on
# PATH or the toolchain e2e/control-plane/build.sh fetched into the cache (an older Go switches
# toolchains through the module proxy). The build is CPU-heavy: it runs under `nice`, one at a
# time per cache.
set -euo pipefail

HELM_VERSION=v3.22.0

cache=${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}
tools="$cache/tools"
mkdir -p "$tools" "$cache/logs"

say() { printf 'build-helm: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}
built() { [ -x "$tools/helm" ] && [ "$(cat "$tools/helm.version" 2>/dev/null)" = "$HELM_VERSION" ]; }

if built; then
    echo "$tools/helm"
    exit 0
fi

# One build at a time per cache (several test binaries may ask at once); a waiter then finds
# the finished binary.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$cache/helm-build.lock"
    if ! flock -n 9; then
        say "waiting for another helm build in $cache to finish"
        flock 9
    fi
    if built; then
        echo "$tools/helm"
        exit 0
    fi
fi

# Go: the one on PATH, else the toolchain e2e/control-plane/build.sh fetched into the same cache.
if ! command -v go >/dev/null 2>&1; then
    for g in "$cache"/go/toolchain/golang.org/toolchain@*/bin/go; do
        if [ -x "$g" ]; then PATH="$(dirname "$g"):$PATH"; fi
    done
fi
command -v go >/dev/null 2>&1 || die "Go is not installed: install Go 1.26+ (helm $HELM_VERSION is built from its module; e2e/control-plane/build.sh can fetch one), or set HIGHWATER_HELM to a helm v3 binary"

export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build" GOPATH="$cache/go/path"
export CGO_ENABLED=0 GOWORK=off GOFLAGS="-modcacherw -buildvcs=false" GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
log="$cache/logs/helm.log"
started=$SECONDS

say "downloading helm.sh/helm/v3@$HELM_VERSION (log: $log)"
gomod=$(cd / && nice -n 10 go mod download -json "helm.sh/helm/v3@$HELM_VERSION" 2>>"$log" |
    sed -nE 's/^\s*"GoMod": "(.*)",?$/\1/p') || true
[ -f "$gomod" ] || die "could not download helm.sh/helm/v3@$HELM_VERSION (see $log)"

# helm's Makefile stamps the version and the default Kubernetes version (from client-go v0.X.Y:
# 1.X), which `helm template` and `helm lint` check a chart's kubeVersion against.
client_go=$(sed -nE 's#^\s*k8s\.io/client-go v0\.([0-9]+)\..*#\1#p' "$gomod" | head -n 1)
[ -n "$client_go" ] || die "no k8s.io/client-go requirement in $gomod"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$client_go"
done

say "building helm $HELM_VERSION (a few minutes; log: $log)"
rm -f "$tools/helm.version"
if ! GOBIN="$tools" nice -n 10 go install -trimpath -ldflags "$ldflags" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >>"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed (see $log)"
fi
got=$("$tools/helm" version --template '{{.Version}}' 2>/dev/null || true)
[ "$got" = "$HELM_VERSION" ] || die "built helm reports version '$got', expected $HELM_VERSION"
echo "$HELM_VERSION" >"$tools/helm.version"
say "helm $HELM_VERSION built in $((SECONDS - started))s: $tools/helm"
echo "$tools/helm"
