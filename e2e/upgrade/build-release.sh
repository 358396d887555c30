#!/usr/bin/env bash
# Builds the `highwater` binary of an earlier release from this repository's history, for the
# mixed-version upgrade tests (e2e/tests/upgrade.rs, e2e/tests/helm_upgrade.rs).
#
#   build-release.sh [--operator] COMMIT      build it unless cached; print the binary's path
#   build-release.sh [--operator] --oldest    the oldest release named in releases (beside this script)
#   build-release.sh [--operator] --previous  the newest release named there (the one before this)
#
# --operator builds `highwater-operator` beside it (the helm upgrade runs the old image, which holds
# both). The binaries are cached in ${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}/releases/COMMIT/;
# the source (git archive of COMMIT) and its target directory are removed once they are built, so
# the cache holds the binaries only. The release's own Cargo.lock is used (--locked).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}

operator=""
if [ "${1:-}" = "--operator" ]; then
    operator=1
    shift
fi

build() {
    local commit=$1
    local out="$cache/releases/$commit"
    if [ -x "$out/highwater" ] && { [ -z "$operator" ] || [ -x "$out/highwater-operator" ]; }; then
        echo "$out/highwater"
        return
    fi
    if ! git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null; then
        echo "release commit $commit is not in this clone's history; fix: clone without --depth (or git fetch --unshallow)" >&2
        exit 1
    fi
    local work="$cache/releases/.build-$commit"
    rm -rf "$work"
    mkdir -p "$work/src" "$cache/logs"
    git -C "$repo" archive "$commit" | tar -x -C "$work/src"
    local packages=(-p highwater --bin highwater)
    if [ -n "$operator" ]; then packages+=(-p highwater-operator --bin highwater-operator); fi
    echo "building ${packages[*]} of release $commit (log: $cache/logs/release-$commit.log)" >&2
    if ! (cd "$work/src" && cargo build --locked "${packages[@]}" \
        --target-dir "$work/target") >"$cache/logs/release-$commit.log" 2>&1; then
        tail -20 "$cache/logs/release-$commit.log" >&2
        echo "building release $commit failed" >&2
        exit 1
    fi
    mkdir -p "$out"
    local bin
    for bin in highwater ${operator:+highwater-operator}; do
        cp "$work/target/debug/$bin" "$out/$bin.tmp"
        mv "$out/$bin.tmp" "$out/$bin"
    done
    rm -rf "$work"
    echo "$out/highwater"
}

case "${1:-}" in
--oldest) build "$(grep -v '^#' "$here/releases" | awk 'NF { print $2; exit }')" ;;
--previous) build "$(grep -v '^#' "$here/releases" | awk 'NF { c = $2 } END { print c }')" ;;
*) build "${1:?usage: build-release.sh [--operator] COMMIT | --oldest | --previous}" ;;
esac
