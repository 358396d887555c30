#!/usr/bin/env bash
# readme-block.sh README SECTION LANG: print the first ```LANG fenced block under the heading
# `## SECTION` of README (a Markdown file), without the fences. The clients' tests run (sh) or
# compile (go) the READMEs' own code this way, so that what a reader copies is what is tested.
set -euo pipefail
[ $# = 3 ] || { echo "usage: readme-block.sh README SECTION LANG" >&2; exit 2; }
awk -v section="## $2" -v fence="\`\`\`$3" '
    $0 == section { inside = 1; next }
    inside && /^## / { exit }
    inside && !block && $0 == fence { block = 1; next }
    block && /^```/ { found = 1; exit }
    block { print }
    END { exit !found }
' "$1" || {
    echo "readme-block.sh: no \`\`\`$3 block under \"## $2\" in $1" >&2
    exit 1
}
