# Sourced by the test scripts that drive highwater from outside (console/browser/test.sh,
# e2e/trace-demo/test.sh): a scratch directory, a throwaway PostgreSQL cluster on loopback, and
# one cleanup for everything the script started. Needs PG_BIN set; uses node for free ports.
#
#   throwaway_begin NAME   $tmp (a new scratch directory), the EXIT/INT/TERM traps; a script
#                          appends the pids of what it starts in the background to `pids`
#   throwaway_pg           starts the cluster (fsync off: a test's data) in $tmp/pg and exports
#                          DATABASE_URL; as the postgres (or nobody) user when run as root
#   free_port              a free loopback port
#
# The cleanup kills `pids`, stops the cluster, prints the tail of every $tmp/*.log when the
# script failed, and removes $tmp.
pids=()
as_pg=()
if [ "$(id -u)" = 0 ]; then
    pg_user=postgres
    id -u postgres >/dev/null 2>&1 || pg_user=nobody
    as_pg=(runuser -u "$pg_user" --)
fi

throwaway_cleanup() {
    local rc=$?
    set +e
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    if [ -f "$pgdata/postmaster.pid" ]; then
        "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$pgdata" -m immediate -w stop >/dev/null 2>&1
    fi
    if [ "$rc" != 0 ]; then
        for log in "$tmp"/*.log; do [ -e "$log" ] && { echo "--- $log"; tail -n 40 "$log"; }; done
    fi
    rm -rf "$tmp"
    exit "$rc"
}

throwaway_begin() {
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
    pgdata="$tmp/pg/data"
    chmod 711 "$tmp"
    trap throwaway_cleanup EXIT
    trap 'exit 130' INT TERM
}

free_port() { node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }

throwaway_pg() {
    mkdir -p "$tmp/pg"
    if [ ${#as_pg[@]} -gt 0 ]; then chown -R "$pg_user" "$tmp/pg"; fi
    local port
    port="$(free_port)"
    "${as_pg[@]}" "$PG_BIN/initdb" -U postgres -A trust -E UTF8 --locale=C --no-sync --no-instructions -D "$pgdata" >/dev/null
    "${as_pg[@]}" "$PG_BIN/pg_ctl" -D "$pgdata" -l "$tmp/pg/postgres.log" -w -t 60 \
        -o "-p $port -k $tmp/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
        start >/dev/null
    export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
}
