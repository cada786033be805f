#!/usr/bin/env bash
# The object-graph benchmark (release build), all figures from one run on this machine:
#   1. rows/s of importer contexts through PersistentStack vs raw GRDB prepared-statement
#      inserts of the same rows in chunks of 1,000, sequential and random key order, and ratio;
#   2. peak RSS of the object-graph import alone at N and 10×N rows (flat = no growth with N).
# Usage: scripts/bench.sh [--smoke] [--rows N]   (default N = 100,000; --smoke uses 5,000)
set -euo pipefail
cd "$(dirname "$0")/.."
rows=100000
while (($#)); do
    case $1 in
        --smoke) rows=5000 ;;
        --rows) rows=$2; shift ;;
        *) echo "usage: scripts/bench.sh [--smoke] [--rows N]" >&2; exit 2 ;;
    esac
    shift
done
scripts/setup.sh
swift build -c release --product bugsquasher-bench
bench=.build/release/bugsquasher-bench
echo "== machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -sr)"
echo "== 1. throughput, N=$rows, chunks of 1,000"
$bench --rows "$rows" --chunk 1000 --order both
echo "== 2. peak RSS of the object-graph import alone"
for n in "$rows" $((rows * 10)); do
    printf "N=%-9s " "$n"
    $bench --rows "$n" --chunk 1000 --order sequential --mode graph 2>/dev/null | grep "peak RSS"
done
