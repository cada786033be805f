#!/usr/bin/env bash
# Long mixed stress run of squasherd, bounded and self-stopping: repeated imports of real and
# generated Jira data, editor saves racing importer chunks on the same bugs, subscribers joining
# and leaving with Register/Unregister churn, a follower of the whole change feed, periodic
# kill -9 (and one SIGTERM) of squasherd. Ends with a report and PASS/FAIL per invariant; exit
# status 0 only when all pass. See docs/STRESS.md.
# Usage: scripts/stress.sh [--smoke] [--debug] [--duration S] [--records N] [--real-records N]
#        [--subscribers N] [--editors N] [--kill-every S] [--chunk N] [--seed N] [--keep] ...
#   --smoke   ~20 s, tiny sizes (flags given with it win), still one kill -9 and one SIGTERM restart
#   --debug   use .build/debug (no build); otherwise release, built first unless STRESS_NO_BUILD=1
set -euo pipefail
cd "$(dirname "$0")/.."
config=release
args=()
for arg in "$@"; do
    case $arg in
        --debug) config=debug ;;
        # The usage needs no venv (stress.py's imports are the standard library's).
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exec "$( [[ -x .build/venv/bin/python3 ]] && echo .build/venv/bin/python3 || command -v python3)" scripts/stress.py --help ;;
        *) args+=("$arg") ;;
    esac
done
if [[ ! -x .build/venv/bin/python3 ]] || ! .build/venv/bin/python3 -c "import varlink" 2>/dev/null; then
    scripts/setup.sh
fi
if [[ $config == release && ${STRESS_NO_BUILD:-0} != 1 ]]; then
    scripts/build-release.sh squasherd squasherctl
fi
for product in squasherd squasherctl; do
    [[ -x .build/$config/$product ]] || { echo "stress: .build/$config/$product is missing; build it first" >&2; exit 2; }
done
echo "== machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -sr); build: $config"
exec .build/venv/bin/python3 -u scripts/stress.py --bin ".build/$config" ${args[@]+"${args[@]}"}
