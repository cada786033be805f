#!/usr/bin/env bash
# squasherd benchmarks, every figure against a baseline measured in the same run:
# import rows/s vs raw SQLite inserts, commit->refreshed latency for 1/10/100 subscriber
# processes vs a raw Unix-socket fan-out, bytes received filtered vs unfiltered.
# Usage: scripts/bench-daemon.sh [--smoke] [--rows N]   (default 100,000 rows; --smoke: tiny sizes)
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
config=release
while (($#)); do
    case $1 in
        --smoke) args+=(--rows 2000 --rounds 5 --subscribers 1,3) ;;
        --debug) config=debug ;;
        --rows) args+=(--rows "$2"); shift ;;
        *) echo "usage: scripts/bench-daemon.sh [--smoke] [--debug] [--rows N]" >&2; exit 2 ;;
    esac
    shift
done
scripts/setup.sh
if [[ $config == release ]]; then
    swift build -c release --product squasherd
    swift build -c release --product squasherctl
fi
echo "== machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -sr)"
BIN=.build/$config exec .build/venv/bin/python3 scripts/bench_daemon.py "${args[@]}"
