#!/usr/bin/env bash
# Generates the shell completions (bash, zsh, fish) and man pages of squasherctl and squasherd
# with swift-argument-parser: its completion scripts (`--generate-completion-script`) and its
# generate-manual tool, run on the binaries in BIN. scripts/install.sh installs what it makes.
# Usage: scripts/cli-extras.sh BIN OUT
#   writes OUT/bash/squasherctl, OUT/zsh/_squasherctl, OUT/fish/squasherctl.fish (and the same
#   for squasherd) and OUT/man1/squasherctl.1, OUT/man1/squasherd.1
set -euo pipefail
cd "$(dirname "$0")/.."
(($# == 2)) || { sed -n '5,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
bin=$1 out=$2
mkdir -p "$out/bash" "$out/zsh" "$out/fish" "$out/man1"
for tool in squasherctl squasherd; do
    [[ -x $bin/$tool ]] || { echo "cli-extras: $bin/$tool is missing; build it first" >&2; exit 2; }
    "$bin/$tool" --generate-completion-script bash >"$out/bash/$tool"
    "$bin/$tool" --generate-completion-script zsh >"$out/zsh/_$tool"
    "$bin/$tool" --generate-completion-script fish >"$out/fish/$tool.fish"
done
# argument-parser's generate-manual tool, built from the package's dependency (in .build/debug:
# it only reads the binaries' --experimental-dump-help).
swift build --product generate-manual >/dev/null
for tool in squasherctl squasherd; do
    .build/debug/generate-manual "$bin/$tool" --output-directory "$out/man1" --section 1 \
        --authors "the BugSquasher project" >/dev/null
done
echo "cli-extras: completions and man pages in $out"
