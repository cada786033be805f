#!/usr/bin/env bash
# BugSquasher on PostgreSQL across hosts, on one machine: PostgreSQL and three squasherd daemons
# in four network namespaces; an import through the first daemon, edits through the second,
# subscribers on all three, every feed audited; with --faults, PostgreSQL restarted mid-import,
# a kill -9 mid-import, PostgreSQL restarted again during edits and a 30 s partition of one host;
# with --more-faults, a host's link down, its daemon frozen and a kill -9 of the editing daemon.
# Needs root (ip netns). See docs/OPERATIONS.md, "Running on PostgreSQL".
# Usage: scripts/cluster.sh [--smoke] [--debug] [--faults] [--more-faults] [--tls] [--records N]
#        [--edits N] [--partition S] [--link-down S] [--keep] [--work DIR]
#   --smoke   6,000 records and 40 edits (flags given with it win)
#   --debug   use .build/debug (no build); otherwise release, built first
#   --tls     the daemons reach PostgreSQL over TLS only (sslmode=verify-full, a CA made here)
set -euo pipefail
cd "$(dirname "$0")/.."
config=release
args=()
for arg in "$@"; do
    case $arg in
        --debug) config=debug ;;
        --smoke) args=(--records 6000 --edits 40 ${args[@]+"${args[@]}"}) ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) args+=("$arg") ;;
    esac
done
if [[ $(id -u) -ne 0 ]]; then
    echo "cluster: skipped: network namespaces need root" >&2
    exit 0
fi
source scripts/postgres.sh
pg_install
if [[ $config == release ]]; then
    scripts/build-release.sh squasherd squasherctl
fi
for product in squasherd squasherctl; do
    [[ -x .build/$config/$product ]] || { echo "cluster: .build/$config/$product is missing; build it first" >&2; exit 2; }
done
exec python3 -u scripts/cluster.py --binaries "$PWD/.build/$config" ${args[@]+"${args[@]}"}
