#!/usr/bin/env bash
# The main job, on an embedded default (store in ./run/state, sockets in ./run/sockets):
#   1. sets up and builds (release) squasherd and squasherctl;
#   2. starts squasherd, imports the first part of the bug data;
#   3. starts a subscriber that holds five bugs registered and prints every refresh;
#   4. imports the whole data set (real Jira export from ../shared/data when present, else
#      generated issues) in chunks with a progress bar, and edits one held bug meanwhile;
#   5. stops the subscriber and the daemon gracefully (SIGTERM) and prints the job summary.
# Options: --fresh (delete ./run first), --records N (generated data size, default 20000).
# RUN_NO_BUILD=1 uses the release binaries already built.
set -euo pipefail
cd "$(dirname "$0")/.."
fresh=0
records=20000
while (($#)); do
    case $1 in
        --fresh) fresh=1 ;;
        --records)
            [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "scripts/run.sh: --records takes a positive number of records" >&2; exit 2; }
            records=$2; shift ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "usage: scripts/run.sh [--fresh] [--records N]  (--help for more)" >&2; exit 2 ;;
    esac
    shift
done
scripts/setup.sh
if [[ ${RUN_NO_BUILD:-0} != 1 ]]; then
    scripts/build-release.sh squasherd squasherctl bugsquasher-demo
fi
bin=.build/release
[[ $fresh == 1 ]] && rm -rf run
mkdir -p run
export SQUASHERD_RUNTIME_DIRECTORY=$PWD/run/sockets

pids=()
cleanup() {
    trap '' INT TERM
    # Every process this script started and that still runs: the daemon, the subscriber, and a
    # client interrupted in the foreground (an import --wait), which would otherwise wait on for
    # a daemon that is gone.
    local children
    children=$(pgrep -P $$ 2>/dev/null || true)
    for pid in "${pids[@]}" $children; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# Runs a client to its end, in the background so that Ctrl-C or SIGTERM runs the traps at once
# (bash holds a trap until a foreground command ends: a whole import).
foreground() { "$@" & wait $!; }

echo "== starting squasherd (store run/state/bugs.sqlite, sockets run/sockets)"
$bin/squasherd --state-directory run/state --runtime-directory run/sockets >run/squasherd.log 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do grep -q " ready" run/squasherd.log && break; sleep 0.05; done
grep -q " ready" run/squasherd.log || { cat run/squasherd.log; echo "run: squasherd did not become ready" >&2; exit 1; }

full=../shared/data/titanium-jira.ndjson.gz
sample=../shared/data/titanium-jira-sample.ndjson
if [[ -r $full && -r $sample ]]; then
    first=$sample
    everything=$full
else
    echo "run: ../shared/data not found; generating $records Jira-like issues"
    $bin/bugsquasher-demo --emit-ndjson "$records" >run/generated.ndjson
    head -n 1000 run/generated.ndjson >run/first.ndjson
    first=run/first.ndjson
    everything=run/generated.ndjson
fi

echo "== importing the first issues ($first)"
foreground $bin/squasherctl import "$first" --wait
keys=$($bin/squasherctl list --sort key --limit 5 | awk '{print $1}')

echo "== a subscriber process holds: $(echo $keys) (its lines are marked 'refresh')"
$bin/squasherctl subscribe $keys &
pids=("$!" "${pids[@]}")
sleep 0.5

echo "== importing $everything (chunks of 1,000; progress below)"
first_key=$(echo "$keys" | head -n 1)
( sleep 1; $bin/squasherctl update "$first_key" status=Triaged "title=Edited while the import runs" ) &
editor=$!
foreground $bin/squasherctl import "$everything" --wait
wait "$editor" || true
sleep 0.5

echo "== status"
# Exit status 5 means degraded (the status says why); the demo goes on to stop the daemon.
$bin/squasherctl status || [[ $? -eq 5 ]]
echo "== stopping (SIGTERM): the daemon finishes its chunk, checkpoints and exits 0"
cleanup
pids=()
tail -n 3 run/squasherd.log
