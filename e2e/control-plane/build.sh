#!/usr/bin/env bash
# Builds the e2e control plane from published Go modules: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok (fake nodes) and kubelet (the real node of
# e2e/tests/real_node.rs), at the versions in
# versions.env, through the wrapper modules beside this script (etcd/, kubernetes/, kwok/; their
# go.sum pins every module).
#
#   build.sh                   build what is missing; print the binaries' directory on stdout
#   build.sh --update-modules  regenerate the wrapper go.mod/go.sum from versions.env (commit them)
#
# Everything lives under ${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}: the Go module and
# build caches (go/), the binaries (bin/<versions>-<hash>/, one directory per recipe, so a version
# change builds into a new directory and a second run with the same versions builds nothing), the
# build logs (logs/) and, on a machine without Go, the pinned Go toolchain (go/toolchain/).
# Progress goes to stderr; stdout carries only the binaries' directory.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=versions.env
source "$here/versions.env"
: "${GO_VERSION:?versions.env sets no GO_VERSION}" "${ETCD_VERSION:?}" "${KUBERNETES_VERSION:?}" "${KWOK_VERSION:?}"
# The staging modules (k8s.io/api, k8s.io/client-go, …) are published as v0.X.Y for v1.X.Y.
STAGING_VERSION="v0.${KUBERNETES_VERSION#v1.}"

# name|wrapper module|package|version; built in this order (the smallest first, so a broken Go
# setup fails in seconds, not after kube-apiserver).
COMPONENTS=(
    "etcd|etcd|.|$ETCD_VERSION"
    "kubectl|kubernetes|k8s.io/kubernetes/cmd/kubectl|$KUBERNETES_VERSION"
    "kube-apiserver|kubernetes|k8s.io/kubernetes/cmd/kube-apiserver|$KUBERNETES_VERSION"
    "kube-controller-manager|kubernetes|k8s.io/kubernetes/cmd/kube-controller-manager|$KUBERNETES_VERSION"
    "kube-scheduler|kubernetes|k8s.io/kubernetes/cmd/kube-scheduler|$KUBERNETES_VERSION"
    "kubelet|kubernetes|k8s.io/kubernetes/cmd/kubelet|$KUBERNETES_VERSION"
    "kwok|kwok|sigs.k8s.io/kwok/cmd/kwok|$KWOK_VERSION"
)

cache=${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}
mkdir -p "$cache/bin" "$cache/logs"
started=$SECONDS

say() { printf 'control-plane: %s\n' "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}
elapsed() { printf '%ds' $((SECONDS - ${1:-$started})); }

# --- the recipe's key: versions, wrapper modules and this list of components -----------------
recipe_key() {
    {
        cat "$here/versions.env" "$here"/etcd/go.mod "$here"/etcd/go.sum "$here"/etcd/*.go
        cat "$here"/kubernetes/go.mod "$here"/kubernetes/go.sum
        cat "$here"/kwok/go.mod "$here"/kwok/go.sum
        # Bump when the way of building changes (flags, environment), to rebuild everything.
        printf '%s\n' "${COMPONENTS[@]}" "recipe 1: CGO_ENABLED=0 -trimpath -ldflags=-s -w + version"
    } | sha256sum | cut -c1-12
}

# --- one build at a time per cache (test binaries and CI may start several); taken before ------
# looking, so a waiter sees what the other build finished.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$cache/build.lock"
    if ! flock -n 9; then
        say "waiting for another build in $cache to finish"
        flock 9
    fi
fi

mode=build
case ${1:-} in
"") ;;
--update-modules) mode=update ;;
*) die "unknown argument $1 (usage: $0 [--update-modules])" ;;
esac
missing=()
if [ $mode = build ]; then
    bindir="$cache/bin/kubernetes-$KUBERNETES_VERSION-etcd-$ETCD_VERSION-$(recipe_key)"
    for c in "${COMPONENTS[@]}"; do
        [ -x "$bindir/${c%%|*}" ] || missing+=("$c")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        echo "$bindir"
        exit 0
    fi
fi

# --- Go: the pinned toolchain --------------------------------------------------------------------
export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build" GOPATH="$cache/go/path"
export CGO_ENABLED=0 GOWORK=off GOFLAGS="-mod=readonly -modcacherw -buildvcs=false"
export GOTOOLCHAIN="go$GO_VERSION"
proxy=${GOPROXY:-https://proxy.golang.org}
proxy=${proxy%%[,|]*}
case $proxy in off | direct | "") proxy=https://proxy.golang.org ;; esac

go_minor() { "$1" env GOVERSION 2>/dev/null | sed -nE 's/^go1\.([0-9]+).*/\1/p'; }
gobin=$(command -v go || true)
if [ -z "$gobin" ] || [ "$(GOTOOLCHAIN=local go_minor "$gobin")" -lt 21 ] 2>/dev/null; then
    # No Go that can switch toolchains (1.21+): fetch the pinned one as the go command would,
    # from the module proxy's golang.org/toolchain module.
    case $(uname -m) in
    x86_64) arch=amd64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) die "no Go toolchain for $(uname -m); install Go $GO_VERSION" ;;
    esac
    os=$(uname -s | tr '[:upper:]' '[:lower:]')
    tc="v0.0.1-go$GO_VERSION.$os-$arch"
    gobin="$cache/go/toolchain/golang.org/toolchain@$tc/bin/go"
    if [ ! -x "$gobin" ]; then
        for tool in curl unzip; do
            command -v "$tool" >/dev/null 2>&1 || die "Go is not installed and $tool is missing to fetch Go $GO_VERSION: install Go $GO_VERSION, or $tool"
        done
        say "fetching Go $GO_VERSION from $proxy …"
        mkdir -p "$cache/go/toolchain"
        zip="$cache/go/toolchain/$tc.zip"
        curl -fsSL --retry 3 -o "$zip.part" "$proxy/golang.org/toolchain/@v/$tc.zip" ||
            die "fetching $proxy/golang.org/toolchain/@v/$tc.zip failed"
        mv "$zip.part" "$zip"
        unzip -q -o "$zip" -d "$cache/go/toolchain" || die "unpacking $zip failed"
        rm -f "$zip"
        # Module zips carry no permissions; the go command sets these when it unpacks one.
        chmod +x "$(dirname "$gobin")"/* "$(dirname "$gobin")"/../pkg/tool/*/* 2>/dev/null || true
        [ -x "$gobin" ] || die "the Go toolchain zip holds no bin/go"
    fi
fi
go() { nice -n 10 "$gobin" "$@"; }
have=$(go env GOVERSION) || die "running $gobin (GOTOOLCHAIN=$GOTOOLCHAIN) failed"
[ "$have" = "go$GO_VERSION" ] || die "asked for go$GO_VERSION, got $have"

# --- --update-modules: regenerate the wrapper modules from versions.env ---------------------------
if [ $mode = update ]; then
    export GOFLAGS="-mod=mod -modcacherw -buildvcs=false"
    # The go.mod of a published module, downloaded into the module cache.
    gomod_of() {
        local f
        f=$(cd / && go mod download -json "$1" | sed -nE 's/^\s*"GoMod": "(.*)",?$/\1/p')
        [ -f "$f" ] || die "could not download the go.mod of $1"
        echo "$f"
    }
    # Its go and godebug lines as `go mod edit` flags: the main module's lines set the language
    # version and the GODEBUG defaults of the binaries, so ours copy the upstream module's.
    go_directives() {
        sed -nE 's/^go ([0-9.]+)$/-go=\1/p; s/^godebug ([^ ]+)$/-godebug=\1/p' "$(gomod_of "$1")"
    }
    say "etcd wrapper: go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    (
        cd "$here/etcd"
        rm -f go.mod go.sum
        go mod init highwater.dev/e2e/control-plane/etcd 2>/dev/null
        # shellcheck disable=SC2046
        go mod edit $(go_directives "go.etcd.io/etcd/server/v3@$ETCD_VERSION")
        go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
        go mod tidy
    )
    say "kubernetes wrapper: k8s.io/kubernetes $KUBERNETES_VERSION, staging modules $STAGING_VERSION"
    kmod=$(gomod_of "k8s.io/kubernetes@$KUBERNETES_VERSION")
    # Every module its go.mod replaces with ./staging/src/… must come from the proxy instead.
    mapfile -t staging < <(sed -nE 's#^\s*(k8s\.io/[^ ]+) => \./staging/.*#\1#p' "$kmod" | sort -u)
    [ ${#staging[@]} -gt 0 ] || die "no staging replace lines found in $kmod"
    (
        cd "$here/kubernetes"
        rm -f go.mod go.sum
        go mod init highwater.dev/e2e/control-plane/kubernetes 2>/dev/null
        # shellcheck disable=SC2207
        edits=($(go_directives "k8s.io/kubernetes@$KUBERNETES_VERSION") "-require=k8s.io/kubernetes@$KUBERNETES_VERSION")
        for m in "${staging[@]}"; do edits+=("-replace=$m=$m@$STAGING_VERSION"); done
        for c in "${COMPONENTS[@]}"; do
            IFS='|' read -r _ module pkg _ <<<"$c"
            if [ "$module" = kubernetes ]; then edits+=("-tool=$pkg"); fi
        done
        go mod edit "${edits[@]}"
        go mod tidy
    )
    say "kwok wrapper: sigs.k8s.io/kwok $KWOK_VERSION"
    (
        cd "$here/kwok"
        rm -f go.mod go.sum
        go mod init highwater.dev/e2e/control-plane/kwok 2>/dev/null
        # shellcheck disable=SC2046
        go mod edit $(go_directives "sigs.k8s.io/kwok@$KWOK_VERSION") \
            "-require=sigs.k8s.io/kwok@$KWOK_VERSION" -tool=sigs.k8s.io/kwok/cmd/kwok
        go mod tidy
    )
    say "wrapper modules updated in $(elapsed); commit e2e/control-plane/{etcd,kubernetes,kwok}/go.{mod,sum}"
    exit 0
fi

# The wrapper modules must be the ones versions.env names (else --update-modules was forgotten).
grep -qE "^\s*(require\s+)?go\.etcd\.io/etcd/server/v3 $ETCD_VERSION\b" "$here/etcd/go.mod" ||
    die "etcd/go.mod does not require go.etcd.io/etcd/server/v3 $ETCD_VERSION (versions.env): run $0 --update-modules"
grep -qE "^\s*(require\s+)?k8s\.io/kubernetes $KUBERNETES_VERSION\b" "$here/kubernetes/go.mod" ||
    die "kubernetes/go.mod does not require k8s.io/kubernetes $KUBERNETES_VERSION (versions.env): run $0 --update-modules"
grep -qE "^\s*(require\s+)?sigs\.k8s\.io/kwok $KWOK_VERSION\b" "$here/kwok/go.mod" ||
    die "kwok/go.mod does not require sigs.k8s.io/kwok $KWOK_VERSION (versions.env): run $0 --update-modules"

# --- build what is missing --------------------------------------------------------------------------
kube_ldflags() {
    # The release's time on the module proxy as the build date, so rebuilds are identical; the
    # proxy knows no commit, so gitCommit keeps its unset value.
    local date minor=${KUBERNETES_VERSION#v1.}
    date=$(cd "$here/kubernetes" && go list -m -f '{{.Time.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
    minor=${minor%%.*}
    local flags="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
    done
    printf '%s' "$flags"
}

mkdir -p "$bindir"
say "building into $bindir (Go modules and build cache in $cache/go; logs in $cache/logs)"
downloaded=()
for c in "${missing[@]}"; do
    IFS='|' read -r name module pkg version <<<"$c"
    log="$cache/logs/$name.log"
    if [[ " ${downloaded[*]} " != *" $module "* ]]; then
        step=$SECONDS
        say "downloading the $module modules …"
        (cd "$here/$module" && go mod download) >"$cache/logs/download-$module.log" 2>&1 ||
            die "downloading the $module modules failed; log: $cache/logs/download-$module.log
$(tail -n 20 "$cache/logs/download-$module.log")"
        say "downloaded the $module modules in $(elapsed "$step")"
        downloaded+=("$module")
    fi
    step=$SECONDS
    say "building $name $version …"
    case $module in
    kubernetes) ldflags=$(kube_ldflags) ;;
    kwok) ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" ;;
    *) ldflags="-s -w" ;;
    esac
    if ! (cd "$here/$module" && go build -trimpath -ldflags "$ldflags" -o "$bindir/.$name.part" "$pkg") >"$log" 2>&1; then
        die "building $name $version failed; log: $log
$(tail -n 30 "$log")"
    fi
    mv "$bindir/.$name.part" "$bindir/$name"
    say "built $name $version in $(elapsed "$step")"
done
cp "$here/versions.env" "$bindir/versions.env"
say "control plane ready in $bindir ($(elapsed) in all)"
echo "$bindir"
