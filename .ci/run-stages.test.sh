#!/usr/bin/env bash
# Tests .ci/run's control flow in a second, without its installs and its 40 minutes of tests:
# the stages section of .ci/run (from the line `# ---- the stages`) runs in a scratch tree where
# every command a stage calls is a stub (cargo on PATH, the repository's scripts at their paths)
# that logs its call, prints a test runner's closing lines, and fails when its name is in FAIL.
#   - nothing fails: every stage runs, exit 0, the closing line is the last line and counts the
#     tests of every runner (cargo test, the version matrix, node, pytest, go test);
#   - the first, a middle and the last stage fail: every stage still runs, a stage ends at its
#     first failing command (errexit inside a stage), the line before the closing line names the
#     failed stages in order, the closing line counts the failed tests, the exit status is 1.
# Usage: bash .ci/run-stages.test.sh   (exits non-zero, naming the check, when one fails)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

tree="$scratch/tree"
mkdir -p "$tree/.ci" "$scratch/bin"
{
    sed -n '1,/^cd /p' "$repo/.ci/run"
    sed -n '/^# ---- the stages/,$p' "$repo/.ci/run"
} >"$tree/.ci/run"
grep -q '^# ---- the stages' "$tree/.ci/run" || { echo "run-stages.test.sh: no '# ---- the stages' line in .ci/run" >&2; exit 1; }

# stub PATH ID OK-OUTPUT FAIL-OUTPUT: a command that logs "ID args" and prints OK-OUTPUT, or, when
# ID is in FAIL, prints FAIL-OUTPUT and exits 3.
stub() {
    mkdir -p "$(dirname "$1")"
    cat >"$1" <<STUB
#!/usr/bin/env bash
id="$2"
[ "\$id" = release ] && id="release\$1"
echo "\$id \$*" >>"$scratch/calls"
case " \${FAIL:-} " in
    *" \$id "*) printf '%b' "$4"; exit 3 ;;
esac
printf '%b' "$3"
STUB
    chmod +x "$1"
}
printf '#!/usr/bin/env bash\nexec "%s/cargo-$1" "$@"\n' "$scratch" >"$scratch/bin/cargo"
chmod +x "$scratch/bin/cargo"
stub "$scratch/cargo-fmt" cargo-fmt '' ''
stub "$scratch/cargo-clippy" cargo-clippy '' ''
stub "$scratch/cargo-test" cargo-test 'test result: ok. 5 passed; 0 failed; 0 ignored\n' 'test result: FAILED. 4 passed; 1 failed; 0 ignored\n'
stub "$tree/.ci/run-stages.test.sh" stages '' ''
stub "$tree/e2e/control-plane/build.sh" control-plane '' ''
stub "$tree/e2e/bench/peers/build.sh" bench-peers '' ''
stub "$tree/e2e/trace-backend/build.sh" trace-backend '' ''
stub "$tree/e2e/upgrade/build-release.sh" release '' ''
stub "$tree/charts/build-helm.sh" helm '' ''
stub "$tree/migrations/definitions/check.sh" check '' ''
stub "$tree/e2e/pg/majors.sh" majors 'test result: ok. 2 passed; 0 failed\n' 'test result: FAILED. 1 passed; 2 failed\n'
stub "$tree/clients/typescript/test.sh" typescript 'ℹ pass 3\nℹ fail 0\n' 'ℹ pass 2\nℹ fail 1\n'
stub "$tree/examples/nestjs-orders/test.sh" nestjs 'ℹ pass 2\nℹ fail 0\n' ''
stub "$tree/console/browser/test.sh" console 'ℹ pass 7\nℹ fail 0\n' ''
stub "$tree/e2e/trace-demo/test.sh" trace-demo 'ℹ pass 1\nℹ fail 0\n' ''
stub "$tree/e2e/openapi/schemathesis.sh" schemathesis '' ''
stub "$tree/clients/python/test.sh" python '======= 6 passed in 2.50s =======\n' '=== 1 failed, 5 passed in 2.50s ===\n'
stub "$tree/clients/go/test.sh" go 'go test: 7 tests and subtests passed\n' ''

failures=0
check() { # description, then a command that must succeed
    local what=$1
    shift
    if "$@"; then echo "ok    $what"; else echo "FAIL  $what" >&2; failures=$((failures + 1)); fi
}

# run FAIL: .ci/run of the scratch tree; its output in $scratch/out, its status in $rc.
run() {
    rm -f "$scratch/calls"
    rc=0
    (cd "$tree" && PATH="$scratch/bin:$PATH" FAIL="$1" bash .ci/run) >"$scratch/out" 2>&1 || rc=$?
}
# The stages' calls in order, and the background builds' calls in order (the two interleave).
all_calls="cargo-fmt stages cargo-clippy check majors cargo-test typescript nestjs console trace-demo schemathesis python go"
all_builds="control-plane bench-peers trace-backend helm release--oldest release--operator"
calls() { awk -v b=" $all_builds " 'index(b, " " $1 " ") == 0 { printf "%s%s", sep, $1; sep = " " }' "$scratch/calls"; }
built() { awk -v b=" $all_builds " 'index(b, " " $1 " ") > 0 { printf "%s%s", sep, $1; sep = " " }' "$scratch/calls"; }

run ""
check "nothing fails: exit 0" test "$rc" = 0
check "nothing fails: every stage ran, in order" test "$(calls)" = "$all_calls"
check "nothing fails: every background build ran, in order" test "$(built)" = "$all_builds"
check "nothing fails: cargo test ran after every build finished" \
    test "$(awk '$1 == "cargo-test" { print NR }' "$scratch/calls")" -gt "$(awk '$1 == "release--operator" { print NR }' "$scratch/calls")"
check "nothing fails: the closing line is last and counts every runner" \
    test "$(tail -1 "$scratch/out")" = "tests: 33 passed, 0 failed"
check "nothing fails: no failed-stages line" bash -c "! grep -q '^failed stages' '$scratch/out'"

run "cargo-fmt release--oldest majors python go"
check "five fail: exit 1" test "$rc" = 1
check "five fail: every stage ran" test "$(calls)" = "$all_calls"
check "five fail: earlier releases stopped at its first failing command" \
    test "$(built)" = "${all_builds/ release--operator/}"
check "five fail: the failed stages, in order, before the closing line" test "$(tail -2 "$scratch/out" | head -1)" = \
    "failed stages (5 of 18): cargo fmt --check, PostgreSQL version matrix, earlier releases, clients/python, clients/go"
check "five fail: the closing line counts the failed tests" \
    test "$(tail -1 "$scratch/out")" = "tests: 24 passed, 3 failed"

if [ "$failures" -gt 0 ]; then
    echo "run-stages.test.sh: $failures checks failed; the last run's output:" >&2
    cat "$scratch/out" >&2
    exit 1
fi
echo "run-stages.test.sh: all checks passed"
