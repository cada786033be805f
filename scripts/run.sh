#!/usr/bin/env bash
# The main job: sets up, builds (release), and runs the object-graph demo — an import of real
# Jira data (../shared/data) or generated issues through importer contexts, with the main
# context holding a few bugs registered and showing what each smart merge refreshed.
# Extra arguments go to bugsquasher-demo (see: scripts/run.sh --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build -c release --product bugsquasher-demo
args=("$@")
sample=../shared/data/titanium-jira-sample.ndjson
if [[ ${#args[@]} -eq 0 && -r $sample ]]; then
    args=(--input "$sample")
elif [[ ${#args[@]} -eq 0 ]]; then
    echo "run: $sample not found; generating Jira-like issues instead"
fi
exec .build/release/bugsquasher-demo "${args[@]}"
