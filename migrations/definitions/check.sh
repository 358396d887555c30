#!/usr/bin/env bash
# Proves that the ordered migrations plus migrations/definitions/ build the schema the migrations
# built before the definitions were split out of them, fresh and as an upgrade from each release,
# and that the definitions can be applied again without changing anything.
#
#   migrations/definitions/check.sh [PG_BINDIR]      (default: `pg_config --bindir`)
#
# It starts its own PostgreSQL cluster in a temporary directory (as the `postgres` or `nobody`
# user when run as root), listening only on a socket in that directory, and removes it at the end.
# Databases it builds:
#   old_fresh    the migrations as they were at $OLD_REV (the last commit before the split), each
#                in its own transaction, then the ordered migrations added since;
#   new_fresh    every ordered migration of the work tree, then every definition in the order of
#                store/src/migrate/definitions.rs (the one list of that order), in ONE
#                transaction;
#   upgrade_<r>  for each release r: its migrations as it had them, a few events appended with its
#                highwater.append, then the work tree's ordered migrations after its last one and
#                the definitions in ONE transaction.
# Then the definitions are applied once more to new_fresh. The schema dumps (pg_dump
# --schema-only --schema=highwater), the functions (source, settings, ACL, full definition) and the
# triggers must be the same everywhere, after renaming only what depends on transaction ids or on
# the data: the partitions named after their lower bound, their bounds, the identity's START WITH
# (and pg_dump's random \restrict key). Exits 1 on any difference.
#
# Also: migrations/schema.sql, the current schema in one file (generated from new_fresh's dump,
# normalized as above, in pg_dump's order), must equal new_fresh, and so each upgrade; it is compared
# only with the pg_dump major named in its first line (each major prints its own dump), and
# rewritten instead with WRITE_SCHEMA=1.
#
# Environment: OLD_REV (default 83995f6, the layout before the split; `none` compares the upgrades
# with the fresh new layout only, which is what .ci/run checks: it stays true when a later release
# changes a definition, where the comparison with 83995f6 does not), RELEASES (commits; default
# the second column of e2e/upgrade/releases, else d9d8d2e 883c0db).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
bindir=${1:-$(pg_config --bindir)}
old_rev=${OLD_REV:-83995f6c0a961b1e614dfeeae03bb9a90fb2479f}
if [ -z "${RELEASES:-}" ]; then
    if [ -f e2e/upgrade/releases ]; then
        RELEASES=$(grep -v '^#' e2e/upgrade/releases | awk 'NF { print $2 }' | tr '\n' ' ')
    else
        RELEASES="d9d8d2e 883c0db"
    fi
fi
manifest=store/src/migrate/definitions.rs
for tool in initdb postgres pg_ctl psql pg_dump pg_isready; do
    [ -x "$bindir/$tool" ] || { echo "check.sh: no $bindir/$tool (pass the PostgreSQL bin directory)" >&2; exit 2; }
done

work=$(mktemp -d /tmp/hw-definitions-check.XXXXXX)
as=()
if [ "$(id -u)" = 0 ]; then
    user=$(id -un postgres 2>/dev/null || id -un nobody)
    chown "$user" "$work"
    as=(runuser -u "$user" --)
fi
port=5432 # the socket is in $work: no other server can be on it
cleanup() {
    if [ -f "$work/data/postmaster.pid" ]; then
        "${as[@]}" "$bindir/pg_ctl" -D "$work/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

"${as[@]}" "$bindir/initdb" -D "$work/data" -U hw -A trust -E UTF8 --locale=C --no-sync >"$work/initdb.log" 2>&1 ||
    { cat "$work/initdb.log" >&2; exit 2; }
"${as[@]}" "$bindir/pg_ctl" -D "$work/data" -l "$work/server.log" -w -s \
    -o "-k $work -p $port -c listen_addresses='' -c fsync=off -c synchronous_commit=off" start ||
    { cat "$work/server.log" >&2; exit 2; }

psql() { PGOPTIONS='-c client_min_messages=warning' "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$work" -p "$port" -U hw "$@"; }

# The ordered migrations: those of a commit (written out under $work/<rev>/) or of the work tree.
migrations_at() { git ls-tree --name-only "$1" migrations/ | grep -E '^migrations/[0-9]+_[^/]*\.sql$' | sort; }
version() { basename "$1" | cut -d_ -f1; }
extract() { # rev -> the files, in version order, under $work/<rev>/
    local rev=$1 f
    mkdir -p "$work/$rev/migrations"
    for f in $(migrations_at "$rev"); do
        git show "$rev:$f" >"$work/$rev/$f"
        echo "$work/$rev/$f"
    done
}
new_migrations_after() { # version -> work-tree migrations after it
    local f
    for f in migrations/[0-9]*_*.sql; do
        if [ "$(version "$f")" -gt "$1" ]; then echo "$f"; fi
    done
}

# The definitions in their order: the string literals of DEFINITIONS, pairwise (name, path).
mapfile -t literals < <(sed -n '/^pub const DEFINITIONS/,/^];/p' "$manifest" | grep -o '"[^"]*"' | tr -d '"')
definitions=()
for ((i = 0; i < ${#literals[@]}; i += 2)); do
    name=${literals[i]} path=${literals[i + 1]}
    file=migrations/definitions/$name.sql
    if [ "$(realpath -m "store/src/migrate/$path")" != "$repo/$file" ]; then
        echo "check.sh: $manifest: $name includes $path, not $file" >&2
        exit 1
    fi
    definitions+=("$file")
done
status=0
unlisted=$(comm -3 <(ls migrations/definitions/*.sql | sort) <(printf '%s\n' "${definitions[@]}" | sort))
if [ -n "$unlisted" ] || [ "$(printf '%s\n' "${definitions[@]}" | sort | uniq -d)" != "" ]; then
    echo "DIFF manifest: definitions not listed exactly once in $manifest: $unlisted"
    status=1
else
    echo "ok   manifest: ${#definitions[@]} definitions, each file listed once, each include path resolves"
fi

# No ordered migration defines an object a definition holds.
objects=$(grep -hoiE '^CREATE OR REPLACE (FUNCTION|TRIGGER|VIEW) +(highwater\.)?[a-z_0-9]+' "${definitions[@]}" |
    awk '{ sub(/^highwater\./, "", $5); print $5 }' | sort -u)
defined=$(grep -hoiE '^\s*CREATE (OR REPLACE )?(FUNCTION|TRIGGER|VIEW) +(highwater\.)?[a-z_0-9]+' migrations/[0-9]*_*.sql |
    awk '{ n = $NF; sub(/^highwater\./, "", n); print n }' | sort -u)
twice=$(comm -12 <(echo "$objects") <(echo "$defined"))
if [ -n "$twice" ]; then
    echo "DIFF ordered migrations still define: $twice"
    status=1
else
    echo "ok   ordered migrations define none of the $(echo "$objects" | wc -l) objects of migrations/definitions/"
fi

fresh_db() { psql -d postgres -c "CREATE DATABASE $1"; }
apply_each() { # db files...: one transaction per file, as the migrations were applied before
    local db=$1 f
    shift
    for f in "$@"; do psql -d "$db" -1 -f "$f" >/dev/null; done
}
apply_together() { # db files...: one transaction for all of them, as `highwater migrate` does
    local db=$1 args=() f
    shift
    for f in "$@"; do args+=(-f "$f"); done
    psql -d "$db" -1 "${args[@]}" >/dev/null
}

# a. The old layout (skipped with OLD_REV=none: then the fresh new layout is the reference).
if [ "$old_rev" != none ]; then
    old_files=$(extract "$old_rev")
    old_last=$(version "$(echo "$old_files" | tail -1)")
    fresh_db old_fresh
    # shellcheck disable=SC2046
    apply_each old_fresh $old_files $(new_migrations_after "$old_last")
fi

# b. The new layout.
fresh_db new_fresh
# shellcheck disable=SC2046
apply_together new_fresh $(new_migrations_after 0) "${definitions[@]}"

# c, d. Upgrades from each release, with events its append wrote.
upgraded=()
for rel in $RELEASES; do
    rel_files=$(extract "$rel")
    rel_last=$(version "$(echo "$rel_files" | tail -1)")
    db=upgrade_$rel
    fresh_db "$db"
    # shellcheck disable=SC2086
    apply_each "$db" $rel_files
    psql -d "$db" >/dev/null <<'SQL'
INSERT INTO highwater.event_types (event_type) VALUES ('OrderPlaced');
SELECT highwater.append('order', '1', 'OrderPlaced', '{"n": 1}');
SELECT highwater.append('order', '2', 'OrderPlaced', '{"n": 2}', NULL, NULL, 0);
SELECT highwater.append('order', '2', 'OrderPlaced', '{"n": 3}', NULL, NULL, 1);
SELECT highwater.append('order', '3', 'OrderPlaced', '{"n": 4}', '{"source": "check"}', 'tenant-a');
SQL
    # shellcheck disable=SC2046
    apply_together "$db" $(new_migrations_after "$rel_last") "${definitions[@]}"
    kept=$(psql -d "$db" -At -c "SELECT count(*) || ' events, stream order/2 at version '
        || (SELECT version FROM highwater.stream_versions WHERE stream_type = 'order' AND stream_id = '2')
        FROM highwater.events")
    if [ "$kept" != "4 events, stream order/2 at version 2" ]; then
        echo "DIFF $db: after the upgrade $kept (want 4 events, stream order/2 at version 2)"
        status=1
    fi
    upgraded+=("$db:$(echo "$rel_files" | wc -l) migrations of $rel")
done

# Every database works: appends (versioned too) and a SQL sink's prepare, rolled back.
smoke() {
    psql -d "$1" -At <<'SQL'
BEGIN;
INSERT INTO highwater.event_types (event_type) VALUES ('Smoke') ON CONFLICT DO NOTHING;
SELECT highwater.append('smoke', 's', 'Smoke', '{}') IS NOT NULL AS appended
     , (highwater.append_position('smoke', 's', 'Smoke', '{}', NULL, NULL, 0)).token IS NOT NULL AS positioned
     , highwater.sql_sink_prepare('perEvent', 'SELECT $1') IS NULL
       AND highwater.sql_sink_prepare('set', 'SELECT count(*) FROM highwater_batch') IS NULL AS prepared;
ROLLBACK;
SQL
}

# What is compared, with the names and numbers that depend on transaction ids or data renamed.
normalizer() { # db -> sed script
    psql -d "$1" -At <<'SQL'
WITH b AS (SELECT v, dense_rank() OVER (ORDER BY v::numeric) AS k
             FROM (SELECT lo::text AS v FROM highwater.event_partitions
                   UNION SELECT hi::text FROM highwater.event_partitions) x)
SELECT format('s/%s([^0-9]|$)/events_p%s\1/g', p.name, b.k)
  FROM highwater.event_partitions p JOIN b ON b.v = p.lo::text WHERE p.name ~ '^events_[0-9]+$'
UNION ALL
SELECT format('/FOR VALUES/s/''%s''/''bound_%s''/g', v, k) FROM b
UNION ALL
SELECT 's/^( +START WITH )[0-9]+$/\1N/';
SQL
}
catalog() {
    psql -d "$1" -At <<'SQL'
SELECT 'function', p.proname, md5(p.prosrc), p.proconfig, md5(pg_get_functiondef(p.oid)), p.proacl
  FROM pg_proc p WHERE p.pronamespace = 'highwater'::regnamespace;
SELECT 'trigger', c.relname, t.tgname, pg_get_triggerdef(t.oid), t.tgenabled, t.tgparentid <> 0
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = 'highwater'::regnamespace AND NOT t.tgisinternal;
SELECT 'view', c.relname, md5(pg_get_viewdef(c.oid))
  FROM pg_class c WHERE c.relnamespace = 'highwater'::regnamespace AND c.relkind IN ('v', 'm');
SQL
}
snapshot() { # db name -> $work/<name>.{dump,catalog,smoke}
    local db=$1 out=$work/$2
    normalizer "$db" >"$out.sed"
    # pg_dump orders objects by name: renamed partitions may sort differently, so the dump is
    # compared as its set of objects (each `-- Name:` block), in one order.
    "$bindir/pg_dump" -h "$work" -p "$port" -U hw --schema-only --schema=highwater "$db" |
        sed -E -f "$out.sed" | grep -vE '^\\(un)?restrict ' |
        awk '/^-- Name: / { if (b != "") print b; b = "" } { b = b $0 "\001" } END { print b }' |
        LC_ALL=C sort | tr '\001' '\n' >"$out.dump"
    catalog "$db" | sed -E -f "$out.sed" | LC_ALL=C sort >"$out.catalog"
    smoke "$db" >"$out.smoke"
}
compare() { # label a b
    local label=$1 a=$work/$2 b=$work/$3 what=()
    cmp -s "$a.dump" "$b.dump" || what+=(dump)
    cmp -s "$a.catalog" "$b.catalog" || what+=(functions/triggers)
    if [ ${#what[@]} = 0 ]; then
        echo "ok   $label: schema dump ($(grep -c '^-- Name: ' "$a.dump") objects), $(grep -c '^function' "$a.catalog") functions and $(grep -c '^trigger' "$a.catalog") triggers identical"
    else
        echo "DIFF $label: ${what[*]} differ"
        diff -u "$a.dump" "$b.dump" | head -40 || true
        diff -u "$a.catalog" "$b.catalog" | head -40 || true
        status=1
    fi
}

if [ "$old_rev" != none ]; then
    snapshot old_fresh a
    reference="old layout fresh"
else
    snapshot new_fresh a
    reference="new layout fresh"
fi
snapshot new_fresh b
for u in "${upgraded[@]}"; do snapshot "${u%%:*}" "${u%%:*}"; done
# f. migrations/schema.sql: the fresh schema as a reader opens it (pg_dump's order, no sorting).
dump_major=$("$bindir/pg_dump" --version | grep -oE '[0-9]+' | head -1)
current_schema() {
    echo "-- The current schema of highwater, generated: do not edit. A fresh \`highwater migrate\` builds"
    echo "-- exactly this (migrations/definitions/check.sh compares them in CI, and every upgrade with it)."
    echo "-- Regenerate: WRITE_SCHEMA=1 migrations/definitions/check.sh /usr/lib/postgresql/$dump_major/bin"
    echo "-- Partitions are renamed events_pN and their bounds bound_N (they depend on transaction ids)."
    "$bindir/pg_dump" -h "$work" -p "$port" -U hw --schema-only --schema=highwater --no-owner new_fresh |
        sed -E -f "$work/b.sed" | grep -vE '^\\(un)?restrict |^-- Dumped (from|by) ' | cat -s
}
schema_file=migrations/schema.sql
if [ -n "${WRITE_SCHEMA:-}" ]; then
    current_schema >"$schema_file"
    echo "wrote $schema_file (pg_dump $dump_major)"
elif ! grep -q "postgresql/$dump_major/bin\$" "$schema_file" 2>/dev/null; then
    echo "skip $schema_file: generated by another pg_dump major than $dump_major"
elif current_schema | cmp -s - "$schema_file"; then
    echo "ok   $schema_file = new layout fresh"
else
    echo "DIFF $schema_file is not the schema a fresh migrate builds:"
    current_schema | diff -u "$schema_file" - | head -40 || true
    echo "     fix: WRITE_SCHEMA=1 migrations/definitions/check.sh /usr/lib/postgresql/$dump_major/bin, and commit it"
    status=1
fi

# e. The definitions again, on the fresh new layout.
apply_together new_fresh "${definitions[@]}"
snapshot new_fresh e

for s in a b "${upgraded[@]%%:*}" e; do
    if [ "$(cat "$work/$s.smoke")" != "t|t|t" ]; then
        echo "DIFF smoke test of $s: $(cat "$work/$s.smoke")"
        status=1
    fi
done
if [ "$old_rev" != none ]; then
    compare "b = a  new layout fresh vs old layout fresh ($old_rev, $(echo "$old_files" | wc -l) migrations)" a b
fi
for u in "${upgraded[@]}"; do
    compare "${u%%:*} = a  upgrade (${u#*:}, then the new layout) vs $reference" a "${u%%:*}"
done
compare "e = b  definitions applied a second time vs once" b e
exit $status
