#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests and the benchmark: Debian's package (installed
# when missing), initialized in a directory of its own, listening on a Unix socket there only,
# as the postgres system user when run as root (PostgreSQL refuses to run as root).
#
# Sourced: `source scripts/postgres.sh`, then
#   pg_start DIR [server options…]   initdb (trust, user postgres) and start; sets pg_bin
#   pg_stop DIR                      stop (fast) and remove DIR
#   pg_url DIR [DATABASE]            the store URL for a socket in DIR
pg_bin=""

as_pg() { if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

pg_install() {
    pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [[ -z $pg_bin || ! -x $pg_bin/initdb || ! -x $pg_bin/pg_ctl ]]; then
        echo "postgres: installing PostgreSQL (Debian's postgresql package)"
        local sudo=""
        [[ $(id -u) -eq 0 ]] || sudo=sudo
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
        pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
    fi
}

pg_start() {
    local dir=$1
    shift
    pg_install
    mkdir -p "$dir"
    [[ $(id -u) -ne 0 ]] || chown postgres:postgres "$dir"
    as_pg "$pg_bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; return 1; }
    as_pg "$pg_bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
        -o "-c listen_addresses='' -c unix_socket_directories='$dir' $*" start >/dev/null \
        || { cat "$dir/postgres.log" >&2; return 1; }
}

pg_stop() {
    local dir=$1
    [[ -n $dir && -d $dir ]] || return 0
    as_pg "$pg_bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}

pg_url() { echo "postgresql:///${2:-postgres}?host=$1&user=postgres"; }
