#!/usr/bin/env bash
# Sets up and runs the whole test suite, then the benchmark and the demo at smoke size so that
# they cannot rot. Tests that use ../shared/data skip with a message when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "== lint: swift format (.swift-format; 'swift format format --in-place --recursive --parallel Sources Tests' fixes what it finds)"
swift format lint --strict --recursive --parallel Sources Tests
swift build --build-tests
# A throwaway PostgreSQL for the store contract suite's third store (BUGSQUASHER_POSTGRES_URL)
# and the TLS and password tests (BUGSQUASHER_POSTGRES_TLS: host:port:CA file:password file);
# without them, those cases are skipped with a message.
source scripts/postgres.sh
pg_dir=$(mktemp -d /tmp/bstest-pg.XXXXXX)
trap 'pg_stop "$pg_dir"' EXIT
pg_port=$((20000 + RANDOM % 20000))
pg_start_tls "$pg_dir" "$pg_port" -c max_connections=200 -c fsync=off
BUGSQUASHER_POSTGRES_URL=$(pg_url "$pg_dir" "$pg_port") \
    BUGSQUASHER_POSTGRES_TLS="localhost:$pg_port:$pg_dir/ca.crt:$pg_dir/password" swift test --skip-build
pg_stop "$pg_dir"
trap - EXIT
echo "== smoke: benchmark (debug build, tiny sizes, every section; figures here mean nothing)"
scripts/bench.sh --smoke --debug
scripts/stress.sh --smoke --debug   # kill -9, SIGTERM, churn; every stress invariant (docs/STRESS.md), ~20 s
echo "== multi-host: PostgreSQL (TLS only) and three squasherd in network namespaces; database restarts, kill -9, 30 s partition, a link down, a frozen daemon"
scripts/cluster.sh --smoke --debug --faults --more-faults --tls --prefix "bs$((RANDOM % 100000))" \
    --work "$(mktemp -d /tmp/bscluster.XXXXXX)"
echo "== CLI: completions and man pages, as scripts/install.sh installs them (debug binaries)"
extras=$(mktemp -d /tmp/bsextras.XXXXXX)
scripts/cli-extras.sh .build/debug "$extras"
scripts/check-cli-extras.sh "$extras"
rm -rf "$extras"
echo "== smoke: documentation (DocC catalogues of the libraries; a broken link or an undocumented parameter fails)"
swift package --disable-sandbox generate-documentation --warnings-as-errors \
    --target BugSquasherGraph --target BugSquasherStack --target BugSquasherClient >/dev/null
echo "smoke: documentation ok"
echo "== smoke: demo"
.build/debug/bugsquasher-demo --store .build/smoke/demo.sqlite --generate 300 --chunk 100 >/dev/null
echo "smoke: demo ok"
