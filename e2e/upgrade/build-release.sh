#!/usr/bin/env bash
# Builds the `highwater` binary of an earlier release from this repository's history, for the
# mixed-version upgrade test (e2e/tests/upgrade.rs).
#
#   build-release.sh COMMIT    build it unless cached; print the binary's path on stdout
#   build-release.sh --oldest  the oldest release named in releases (beside this script)
#
# The binary is cached as ${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}/releases/COMMIT/highwater;
# the source (git archive of COMMIT) and its target directory are removed once it is built, so the
# cache holds one binary per release. The release's own Cargo.lock is used (--locked).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}

build() {
    local commit=$1
    local out="$cache/releases/$commit"
    if [ -x "$out/highwater" ]; then
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
    echo "building the highwater binary of release $commit (log: $cache/logs/release-$commit.log)" >&2
    if ! (cd "$work/src" && cargo build --locked -p highwater --bin highwater \
        --target-dir "$work/target") >"$cache/logs/release-$commit.log" 2>&1; then
        tail -20 "$cache/logs/release-$commit.log" >&2
        echo "building release $commit failed" >&2
        exit 1
    fi
    mkdir -p "$out"
    cp "$work/target/debug/highwater" "$out/highwater.tmp"
    mv "$out/highwater.tmp" "$out/highwater"
    rm -rf "$work"
    echo "$out/highwater"
}

if [ "${1:-}" = "--oldest" ]; then
    build "$(grep -v '^#' "$here/releases" | awk 'NF { print $2; exit }')"
else
    build "${1:?usage: build-release.sh COMMIT | --oldest}"
fi
