#!/usr/bin/env bash
# clean-copy.sh DIR DEST: copy DIR as a fresh clone of this repository would hold it to
# DEST/<DIR's path in the repository>: the files git tracks plus new files it does not ignore,
# as they are in the working tree, and nothing else (no node_modules/, dist/, build/, venvs,
# caches). The clients' tests install each package the way its README says from such a copy, so
# that nothing an earlier build left in the working tree (a dist/ that `npm pack` would ship)
# can stand in for a step the README's commands lack.
set -euo pipefail
[ $# = 2 ] || { echo "usage: clean-copy.sh DIR DEST" >&2; exit 2; }
src="$(cd "$1" && pwd)"
dest="$2"
top="$(git -C "$src" rev-parse --show-toplevel 2>/dev/null)" || {
    echo "clean-copy.sh: $src is not inside a git checkout; the README-route tests copy what git tracks (run them from a clone)" >&2
    exit 1
}
rel="${src#"$top"}"
rel="${rel#/}"
mkdir -p "$dest"
# -z: any file name; a tracked file deleted in the working tree is left out, as a commit of the
# working tree would.
cd "$top"
git ls-files -z --cached --others --exclude-standard -- "${rel:-.}" |
    while IFS= read -r -d '' f; do
        if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi
    done |
    tar --null --no-recursion -T - -cf - | tar -xf - -C "$dest"
