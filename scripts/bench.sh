#!/usr/bin/env bash
# BugSquasher's benchmark report: one run on this machine, every figure a ratio against a baseline
# measured in the same run, a table per section and a summary of the targets (PASS / MISS).
#   1. object graph: importer contexts vs raw GRDB inserts (bugsquasher-bench), peak RSS at two sizes;
#   a. import rows/s through squasherd vs raw SQLite prepared-statement inserts, chunks of 1,000
#      (median of 3 runs of each, alternating);
#   b. commit -> subscriber refreshed p50/p99 for 1, 10, 100 subscribers vs PostgreSQL
#      LISTEN/NOTIFY, their rounds alternating (and a raw Unix-socket fan-out);
#   c. bytes and work per subscriber, filtered by squasherd vs unfiltered;
#   d. peak squasherd RSS after importing --rows vs --big-rows records;
#   e. --big-rows import with 100 subscribers (89 fast, 10 slow, 1 stalled) vs none; the stalled
#      one must be told to resync and end consistent after resuming with `since`;
#   f-i. PostgreSQL as the store (scripts/bench_postgres.py): f. import vs raw COPY; g. edit through
#      daemon A -> subscribers on daemon B vs UPDATE + pg_notify; h. 32 concurrent writers vs
#      pgbench UPDATE + pg_notify; i. g's latency while a third daemon imports vs idle;
#   j. a real Jira export (../shared/data): first import, unchanged and 1 % changed re-imports vs
#      a naive Python importer and the C-API floor of the same rows (runs alternating);
#   l. the --big-rows import, sequential and random key order, vs the C-API floor of its rows;
#   k. the --big-rows import's rate while `squasherctl backup` runs vs without, and the copy's
#      consistency (runs alternating).
# PostgreSQL (Debian's package, installed when missing) runs as the postgres user in a temporary
# directory, on a Unix socket there only, and is stopped and removed on exit, also on failure.
# Exit status 1 when something is broken (wrong counts, an inconsistent subscriber); a missed
# performance target is reported in the summary, not an error.
#
# Usage: scripts/bench.sh [--smoke] [--debug] [--rows N] [--big-rows N] [--rounds N] [--h-seconds S] [--skip-postgres]
#   --rows N        import size of sections 1, a, c, d (default 100,000)
#   --big-rows N    the large import of sections 1 (RSS), d and e (default 1,000,000)
#   --rounds N      edits per subscriber count in section b (default 500)
#   --h-seconds S   length of each run of section h (default 10)
#   --smoke         tiny sizes, to check that the benchmark works (figures mean nothing)
#   --debug         use the debug build in .build/debug (and build nothing)
#   --skip-postgres section b without PostgreSQL (no apt-get install; its ratios are left out)
#   --postgres-only sections f to i only (PostgreSQL as the store)
#   --backup-only   section k only (a backup during the --big-rows import)
#   --import-only   sections j and l only (a real Jira export, and the --big-rows import, vs the floor)
# Environment: BENCH_NO_BUILD=1 uses the binaries already in .build/release without building;
# BENCH_BIN=DIR takes them from DIR instead.
set -euo pipefail
cd "$(dirname "$0")/.."
command_line="scripts/bench.sh${*:+ $*}"
usage() { sed -n '/^# Usage:/,/^# BENCH_BIN/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
help() { sed -n '/^# Usage:/,/^# BENCH_BIN/p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
config=release
args=()
skip_postgres=0
while (($#)); do
    case $1 in
        --smoke) args+=(--rows 2000 --big-rows 8000 --rounds 5 --warmup 1 --counts 1,3 --e-subscribers 12 --e-slow 2
                        --idle-edits 5 --edit-interval 50 --pending-limit 1000 --catch-up-timeout 120 --h-seconds 1 --k-runs 1 --j-runs 1 --l-runs 1 --j-smoke) ;;
        --debug) config=debug ;;
        --rows|--big-rows|--rounds)
            (($# >= 2)) || { echo "scripts/bench.sh: $1 needs a value" >&2; usage; }
            # Sections a and e update 1,000 seeded bugs, and section b needs a round.
            minimum=$([[ $1 == --rounds ]] && echo 1 || echo 1000)
            [[ $2 =~ ^[1-9][0-9]{0,8}$ ]] && (($2 >= minimum && $2 <= 100000000)) || {
                echo "scripts/bench.sh: $1 takes a whole number from $minimum to 100000000, not '$2'" >&2; usage; }
            args+=("$1" "$2"); shift ;;
        --h-seconds)
            [[ ${2:-} =~ ^[1-9][0-9]{0,4}$ ]] || {
                echo "scripts/bench.sh: --h-seconds takes a whole number of seconds from 1 to 99999, not '${2:-}'" >&2; usage; }
            args+=("$1" "$2"); shift ;;
        --skip-postgres) skip_postgres=1 ;;
        --postgres-only) args+=(--postgres-only) ;;
        --backup-only) args+=(--backup-only); skip_postgres=1 ;;
        --import-only) args+=(--import-only); skip_postgres=1 ;;
        -h|--help) help ;;
        *) echo "scripts/bench.sh: unknown argument $1" >&2; usage ;;
    esac
    shift
done

if [[ " ${args[*]-} " == *" --postgres-only "* && " ${args[*]-} " == *" --backup-only "* ]]; then
    echo "scripts/bench.sh: --postgres-only and --backup-only each leave the other's sections out" >&2; usage
fi
if ((skip_postgres)) && [[ " ${args[*]-} " == *" --postgres-only "* ]]; then
    echo "scripts/bench.sh: --postgres-only and --skip-postgres leave nothing to run" >&2; usage
fi
scripts/setup.sh
bin=${BENCH_BIN:-.build/$config}
if [[ $config == release && -z ${BENCH_NO_BUILD:-} && -z ${BENCH_BIN:-} ]]; then
    scripts/build-release.sh squasherd squasherctl bugsquasher-bench
fi
for tool in squasherd squasherctl bugsquasher-bench; do
    [[ -x $bin/$tool ]] || { echo "scripts/bench.sh: $bin/$tool is missing (build it, or leave out BENCH_NO_BUILD)" >&2; exit 1; }
done

pg_dir=""
bench_pid=""
source scripts/postgres.sh
cleanup() {
    # A second signal (a double Ctrl-C, `timeout` passing its own) must not cut the cleanup short
    # and leave PostgreSQL running.
    trap '' INT TERM
    if [[ -n $bench_pid ]] && kill -0 "$bench_pid" 2>/dev/null; then
        kill -TERM "$bench_pid" 2>/dev/null || true   # it stops its daemons and subscribers
        wait "$bench_pid" 2>/dev/null || true
    fi
    pg_stop "$pg_dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

pg_args=()
if ((!skip_postgres)); then
    pg_dir=$(mktemp -d /tmp/bsbench-pg.XXXXXX)
    # synchronous_commit=off is the setting comparable to SQLite in WAL with synchronous=NORMAL
    # (no fsync per commit); fsync stays on.
    pg_start "$pg_dir" -c max_connections=300 -c synchronous_commit=off || exit 1
    pg_args=(--pg-socket "$pg_dir")
fi

echo "== command: ${BENCH_NO_BUILD:+BENCH_NO_BUILD=1 }${BENCH_BIN:+BENCH_BIN=$BENCH_BIN }$command_line"
# In the background, so that the traps run at once on SIGINT/SIGTERM.
BIN=$bin .build/venv/bin/python3 scripts/bench.py "${args[@]}" "${pg_args[@]}" &
bench_pid=$!
status=0
wait "$bench_pid" || status=$?
bench_pid=""
exit $status
