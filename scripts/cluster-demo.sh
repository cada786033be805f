#!/usr/bin/env bash
# A minute of BugSquasher on PostgreSQL across three hosts (network namespaces on this machine),
# with the faults a cluster meets: the database restarted mid-import, a daemon killed
# mid-import, the database restarted during edits, a host cut off for 15 s. Each step says what
# it shows; the run ends with the audit of every subscriber's feed. Needs root. Builds release
# binaries first (several minutes the first time).
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/cluster.sh --faults --records 20000 --edits 60 --partition 15 "$@"
