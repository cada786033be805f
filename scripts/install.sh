#!/usr/bin/env bash
# Installs squasherd as a system service: release binaries in /usr/local/bin, their shell
# completions (bash, zsh, fish) and man pages under /usr/local/share, the units in
# /etc/systemd/system, the sysusers/tmpfiles snippets, and the default configuration in
# /etc/squasherd (kept when it exists). Then: systemctl enable --now squasherd.socket squasherd-write.socket
# Usage: sudo scripts/install.sh [--prefix /usr/local] [--destdir DIR] [--postgresql]
#   --destdir DIR   stage a package; --postgresql   also the drop-in for a store in PostgreSQL
#                   (systemd/squasherd-postgresql.conf: edit its IPAddressAllow= afterwards)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=/usr/local
destdir=""
postgresql=0
while (($#)); do
    case $1 in
        --prefix) prefix=$2; shift ;;
        --destdir) destdir=$2; shift ;;
        --postgresql) postgresql=1 ;;
        *) echo "usage: scripts/install.sh [--prefix DIR] [--destdir DIR] [--postgresql]" >&2; exit 2 ;;
    esac
    shift
done
scripts/setup.sh
scripts/build-release.sh squasherd squasherctl
extras=$(mktemp -d)
trap 'rm -rf "$extras"' EXIT
scripts/cli-extras.sh .build/release "$extras"
share=$destdir$prefix/share
install -d "$destdir$prefix/bin" "$destdir/etc/systemd/system" "$destdir/etc/squasherd" \
    "$destdir/usr/lib/sysusers.d" "$destdir/usr/lib/tmpfiles.d" "$share/bash-completion/completions" \
    "$share/zsh/site-functions" "$share/fish/vendor_completions.d" "$share/man/man1"
install -m 0755 .build/release/squasherd .build/release/squasherctl "$destdir$prefix/bin/"
# Completions where bash-completion, zsh and fish look under the prefix; man pages for man(1).
install -m 0644 "$extras"/bash/* "$share/bash-completion/completions/"
install -m 0644 "$extras"/zsh/* "$share/zsh/site-functions/"
install -m 0644 "$extras"/fish/* "$share/fish/vendor_completions.d/"
install -m 0644 "$extras"/man1/* "$share/man/man1/"
# The Varlink interface definitions travel with the binaries.
cp -r .build/release/BugSquasher_BugSquasherVarlink.resources "$destdir$prefix/bin/"
sed "s|/usr/local/bin/squasherd|$prefix/bin/squasherd|" systemd/squasherd.service >"$destdir/etc/systemd/system/squasherd.service"
install -m 0644 systemd/squasherd.socket systemd/squasherd-write.socket systemd/squasherd-metrics.socket \
    "$destdir/etc/systemd/system/"
install -m 0644 systemd/squasherd.sysusers "$destdir/usr/lib/sysusers.d/squasherd.conf"
install -m 0644 systemd/squasherd.tmpfiles "$destdir/usr/lib/tmpfiles.d/squasherd.conf"
if ((postgresql)); then
    install -d "$destdir/etc/systemd/system/squasherd.service.d"
    install -m 0644 systemd/squasherd-postgresql.conf "$destdir/etc/systemd/system/squasherd.service.d/postgresql.conf"
fi
[[ -e $destdir/etc/squasherd/squasherd.conf ]] || install -m 0644 etc/squasherd.conf "$destdir/etc/squasherd/squasherd.conf"
if [[ -z $destdir ]] && [[ -d /run/systemd/system ]]; then
    systemd-sysusers /usr/lib/sysusers.d/squasherd.conf
    systemd-tmpfiles --create /usr/lib/tmpfiles.d/squasherd.conf
    systemctl daemon-reload
    echo "installed; start with: systemctl enable --now squasherd.socket squasherd-write.socket"
else
    echo "installed into ${destdir:-/} (no running systemd here: enable the sockets on the target machine)"
fi
