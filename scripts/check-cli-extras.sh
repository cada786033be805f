#!/usr/bin/env bash
# Checks what scripts/cli-extras.sh made in DIR as a user's shell and man(1) would use it: bash
# completes squasherctl's subcommands and options, zsh and fish read their scripts (when
# installed), and man renders both pages with their commands.
# Usage: scripts/check-cli-extras.sh DIR
set -euo pipefail
dir=${1:?usage: scripts/check-cli-extras.sh DIR}
fail() { echo "check-cli-extras: $*" >&2; exit 1; }
# bash: the script registers a completion function, which offers the subcommands and options.
complete_words() {
    bash -c 'source "$1"; shift; complete -p squasherctl >/dev/null || exit 3
        COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
        _squasherctl squasherctl "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"; printf "%s\n" "${COMPREPLY[@]}"' \
        _ "$dir/bash/squasherctl" "$@"
}
words=$(complete_words squasherctl im) || fail "bash: no completion registered for squasherctl"
grep -qx import <<<"$words" || fail "bash: 'squasherctl im<TAB>' did not offer import (got: $words)"
words=$(complete_words squasherctl import --fo)
grep -qx -- --format <<<"$words" || fail "bash: 'squasherctl import --fo<TAB>' did not offer --format (got: $words)"
bash -n "$dir/bash/squasherd" || fail "bash: squasherd's completion script does not parse"
if command -v zsh >/dev/null; then zsh -n "$dir/zsh/_squasherctl" || fail "zsh: _squasherctl does not parse"; fi
if command -v fish >/dev/null; then fish --no-execute "$dir/fish/squasherctl.fish" || fail "fish: does not parse"; fi
# man: each page renders, with its name and its subcommands or options.
for tool in squasherctl squasherd; do
    page=$(MANWIDTH=100 man -P cat -l "$dir/man1/$tool.1" 2>/dev/null) || fail "man: $tool.1 does not render"
    grep -q "^NAME" <<<"$page" || fail "man: $tool.1 has no NAME section"
done
MANWIDTH=100 man -P cat -l "$dir/man1/squasherctl.1" 2>/dev/null | grep -q "import" || fail "man: squasherctl.1 does not describe import"
MANWIDTH=100 man -P cat -l "$dir/man1/squasherd.1" 2>/dev/null | grep -q -- "--state-directory" || fail "man: squasherd.1 lacks --state-directory"
echo "check-cli-extras: bash completes subcommands and options; man renders squasherctl(1) and squasherd(1)"
