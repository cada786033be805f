#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests and the benchmark: Debian's package (installed
# when missing), initialized in a directory of its own, listening on a Unix socket there only,
# as the postgres system user when run as root (PostgreSQL refuses to run as root).
#
# Sourced: `source scripts/postgres.sh`, then
#   pg_start DIR [server options…]   initdb (trust, user postgres) and start; sets pg_bin
#   pg_stop DIR                      stop (fast) and remove DIR
#   pg_start_tls DIR PORT [options…] the same, and TLS on 127.0.0.1:PORT (see below)
#   pg_url DIR [PORT]                the store URL for the socket in DIR
#   pg_certificates DIR NAMES        a CA (DIR/ca.crt) and a server certificate from it naming NAMES
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

pg_url() { echo "postgresql:///postgres?host=$1&user=postgres${2:+&port=$2}"; }

# pg_certificates DIR NAMES: a CA made here (DIR/ca.crt, DIR/ca.key) and a certificate from it for
# the server (DIR/server.crt, DIR/server.key, readable by its owner only) whose subjectAltName is
# NAMES (as "DNS:localhost,IP:127.0.0.1"); valid for two days.
pg_certificates() {
    local dir=$1 names=$2
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=BugSquasher test CA" \
        -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=bugsquasher-db" -keyout "$dir/server.key" \
        -out "$dir/server.csr" 2>/dev/null
    printf 'subjectAltName=%s\n' "$names" >"$dir/san.ext"
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 2 \
        -extfile "$dir/san.ext" -out "$dir/server.crt" 2>/dev/null
    chmod 600 "$dir/server.key"
    [[ -s $dir/server.crt ]] || { echo "postgres: openssl could not make the server's certificate in $dir" >&2; return 1; }
}

# pg_start_tls DIR PORT: as pg_start, and TCP on 127.0.0.1:PORT with TLS, its certificate (for
# localhost and 127.0.0.1) signed by a CA made here (DIR/ca.crt); the role bsuser (password in
# DIR/password) may connect over TLS with its password only.
pg_start_tls() {
    local dir=$1 port=$2
    pg_install
    mkdir -p "$dir"
    pg_certificates "$dir" DNS:localhost,IP:127.0.0.1
    head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$dir/password"
    [[ $(id -u) -ne 0 ]] || chown -R postgres:postgres "$dir"
    as_pg "$pg_bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; return 1; }
    # bsuser: TLS and its password, nothing else; everyone else as initdb set it (trust).
    { printf 'hostssl all bsuser 127.0.0.1/32 scram-sha-256\nhost all bsuser all reject\nlocal all bsuser reject\n'
      cat "$dir/data/pg_hba.conf"; } >"$dir/hba" && cp "$dir/hba" "$dir/data/pg_hba.conf"
    [[ $(id -u) -ne 0 ]] || chown postgres:postgres "$dir/data/pg_hba.conf"
    as_pg "$pg_bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories='$dir' -c ssl=on \
            -c ssl_cert_file='$dir/server.crt' -c ssl_key_file='$dir/server.key' ${*:3}" start >/dev/null \
        || { cat "$dir/postgres.log" >&2; return 1; }
    as_pg "$pg_bin/psql" -h "$dir" -p "$port" -U postgres -q -c \
        "CREATE ROLE bsuser LOGIN SUPERUSER PASSWORD '$(cat "$dir/password")'" >/dev/null
}
