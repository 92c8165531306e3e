#!/usr/bin/env bash
# The README's two commands on a truly fresh Debian 12: a minimal root made with mmdebstrap from
# Debian's own packages (variant minbase: the Essential and Priority: required packages, apt;
# plus git and ca-certificates), using this machine's apt sources. A clean clone of HEAD goes in,
# then ./scripts/run.sh and ./scripts/test.sh run inside the chroot and install what they need
# themselves. Not part of CI (about 40 minutes on 2 cores); run it after any change to setup.sh,
# build.sh or a CMakeLists.txt. Needs root and the network to Debian's and npm's registries.
#
#   scripts/fresh_debian_check.sh [ROOT_DIR]     default ROOT_DIR: /var/tmp/attnlab-fresh
#
# Prints the time of each step; exits non-zero if either command fails. The root is left in place
# for inspection (delete it with: umount -R ROOT_DIR/{proc,sys,dev} 2>/dev/null; rm -rf ROOT_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${1:-/var/tmp/attnlab-fresh}
[ "$(id -u)" = 0 ] || { echo "fresh_debian_check: needs root (mmdebstrap, chroot)" >&2; exit 2; }
command -v mmdebstrap >/dev/null || { apt-get update -qq; apt-get install -y -qq --no-install-recommends mmdebstrap; }
[ -e "$ROOT" ] && { echo "fresh_debian_check: $ROOT exists; remove it first" >&2; exit 2; }

SOURCES=/etc/apt/sources.list.d/debian.sources
[ -f "$SOURCES" ] || SOURCES=/etc/apt/sources.list
step() { echo "fresh_debian_check: $(date -u +%H:%M:%S) $*"; }
t0=$(date +%s)
step "mmdebstrap --variant=minbase bookworm $ROOT (sources: $SOURCES)"
mmdebstrap --variant=minbase --include=git,ca-certificates bookworm "$ROOT" "$SOURCES"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# This machine's own network settings, as for its apt sources: a network that intercepts TLS
# (a proxy with its own CA, installed under /usr/local/share/ca-certificates) must be trusted
# inside the root too, or npm cannot reach its registry. A user's fresh machine needs nothing here.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$ROOT/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
  chroot "$ROOT" update-ca-certificates >/dev/null
fi
git clone -q --no-hardlinks "$PWD" "$ROOT/root/attnlab"
git -C "$ROOT/root/attnlab" log -1 --format='fresh_debian_check: commit %h %s'

mount -t proc proc "$ROOT/proc"
mount --rbind /sys "$ROOT/sys"
mount --rbind /dev "$ROOT/dev"
cleanup() { umount -R "$ROOT/proc" "$ROOT/sys" "$ROOT/dev" 2>/dev/null || umount -lR "$ROOT/dev" "$ROOT/sys" 2>/dev/null || true; }
trap cleanup EXIT

in_root() {
  chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 /bin/bash -c "cd /root/attnlab && $1"
}
t1=$(date +%s)
step "./scripts/run.sh (the main job)"
in_root ./scripts/run.sh
t2=$(date +%s)
step "./scripts/test.sh (every test)"
in_root ./scripts/test.sh
t3=$(date +%s)
step "scripts/check_packages.py"
in_root "/usr/bin/python3 scripts/check_packages.py"
step "passed: mmdebstrap $((t1 - t0)) s, run.sh $((t2 - t1)) s, test.sh $((t3 - t2)) s"
