#!/usr/bin/env bash
# Appends to migrations/released.sha384 the checksum of every text each ordered migration has had in
# this repository's history (run it before committing a change to a migration that has landed).
set -euo pipefail
cd "$(dirname "$0")/.."
{
    grep '^#' migrations/released.sha384
    {
        grep -v '^#' migrations/released.sha384
        for f in migrations/2*.sql; do
            v=$(basename "$f" | cut -d_ -f1)
            git log --format=%H -- "$f" | while read -r c; do
                git show "$c:$f" 2>/dev/null | sha384sum | cut -c1-96 | sed "s|^|$v |"
            done
        done
    } | sort -u
} >migrations/released.sha384.new
mv migrations/released.sha384.new migrations/released.sha384
