#!/usr/bin/env bash
# Sets up and runs the whole test suite, then the benchmark and the demo at smoke size so that
# they cannot rot. Tests that use ../shared/data skip with a message when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
swift build --build-tests
swift test --skip-build
echo "== smoke: benchmark (debug build, 3,000 rows; figures here mean nothing)"
.build/debug/bugsquasher-bench --rows 3000 --chunk 500
echo "== smoke: daemon benchmark (debug build, tiny sizes; figures here mean nothing)"
scripts/bench-daemon.sh --smoke --debug
echo "== smoke: demo"
.build/debug/bugsquasher-demo --store .build/smoke/demo.sqlite --generate 300 --chunk 100 >/dev/null
echo "smoke: demo ok"
