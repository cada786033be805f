#!/usr/bin/env bash
# Installs what building and testing BugSquasher needs on a fresh Debian 12 machine that has the
# Swift toolchain: the C libraries the package links, and the tools the tests drive.
# Idempotent: installs only what is missing. Needs root (or sudo) only when something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(libsqlite3-dev zlib1g-dev libisal-dev libsystemd-dev pkg-config sqlite3 python3 python3-venv systemd)
missing=()
for package in "${packages[@]}"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done

if ((${#missing[@]} > 0)); then
    echo "setup: installing ${missing[*]}"
    sudo=""
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || { echo "setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
        sudo="sudo"
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

command -v swift >/dev/null || { echo "setup: the Swift toolchain is not on PATH (expected swift 6.x)" >&2; exit 1; }

# The scripts build release binaries with scripts/build-release.sh (the flags, and why).

# The `varlink` package from PyPI, for the interoperability test (a client nobody here wrote),
# `prometheus-client`, whose parser reads squasherd's metrics in their test, and `psycopg`
# (with its bundled libpq), for the PostgreSQL LISTEN/NOTIFY baseline of scripts/bench.sh, in a
# virtual environment inside the build folder.
venv=.build/venv
if ! "$venv/bin/python3" -c "import varlink, psycopg, prometheus_client" 2>/dev/null; then
    echo "setup: installing the varlink, prometheus-client and psycopg Python packages into $venv"
    [[ -x $venv/bin/python3 ]] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check varlink prometheus-client "psycopg[binary]"
fi
