#!/usr/bin/env bash
# Builds release binaries of the given products, the one way every script builds them, so that
# one script does not rebuild what another built.
# Usage: scripts/build-release.sh PRODUCT...   (such as squasherd squasherctl)
#
# --static-swift-stdlib: the Swift runtime and Foundation linked in, as a deployed service runs
# best (no shared-library indirection on every runtime call: squasherd spent 30 % less CPU per
# edit, docs/BENCHMARKS.md).
# -use-ld=lld, with the toolchain's lld when it has one: GNU ld warns at every link that the
# static Foundation refers to mktemp ("the use of `mktemp' is dangerous"), which squasherd
# never calls; lld links the binaries without that warning (the figures of docs/BENCHMARKS.md
# are the same either way).
set -euo pipefail
cd "$(dirname "$0")/.."
(( $# > 0 )) || { echo "usage: scripts/build-release.sh PRODUCT..." >&2; exit 2; }
flags=(-c release --static-swift-stdlib)
toolchain=$(dirname "$(readlink -f "$(command -v swift)")")
[[ -x $toolchain/ld.lld ]] && flags+=(-Xswiftc -use-ld=lld)
for product in "$@"; do
    swift build "${flags[@]}" --product "$product"
done
