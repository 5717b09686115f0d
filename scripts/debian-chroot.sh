#!/usr/bin/env bash
# Unpacks a clean Debian 12 root file system (debootstrap --variant=minbase bookworm) into DIR,
# for trying the packages as on a fresh install (tests/packages.rs). Needs root and debootstrap.
#
#   scripts/debian-chroot.sh DIR
#   scripts/debian-chroot.sh --prepare    only build the cache (scripts/test.sh runs this in
#                                         the background while the workspace compiles)
#
# The root file system is built once and cached as a tarball in
# ${XDG_CACHE_HOME:-~/.cache}/smartmig/debian-chroot/bookworm-minbase-KEY.tar.gz, where KEY
# hashes this script and debootstrap's version: changing either rebuilds it (older tarballs
# are removed). Building takes about 2.5 minutes (mostly downloads), unpacking seconds.
#
# What the tarball holds beyond debootstrap's minbase: the sources of a Debian 12 install
# (bookworm, bookworm-updates, bookworm-security, so apt resolves the same Slurm as the build
# machine's), and a policy-rc.d that refuses to start services (there is no init in a
# chroot; apt would otherwise start slurmctld). DIR gets this machine's resolv.conf.
# The mirror is $SMARTMIG_DEBIAN_MIRROR (default http://deb.debian.org); it is part of KEY.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: scripts/debian-chroot.sh DIR | --prepare" >&2
    exit 2
fi
dir="$1"
[ "$dir" = --prepare ] && dir=""
script="$(readlink -f "$0")"
mirror="${SMARTMIG_DEBIAN_MIRROR:-http://deb.debian.org}"

if [ -n "$dir" ] && [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
    echo "debian-chroot.sh: $dir is not empty" >&2
    exit 2
fi
command -v debootstrap >/dev/null 2>&1 || {
    echo "debian-chroot.sh: debootstrap is not installed (scripts/deps.sh packages)" >&2
    exit 1
}

cache_base="${XDG_CACHE_HOME:-}"
[ -n "$cache_base" ] || cache_base="$HOME/.cache"
cache="$cache_base/smartmig/debian-chroot"
key=$( { cat "$script"; dpkg-query -W -f='${Version}' debootstrap; echo "$mirror"; } | sha256sum | cut -c1-16)
tarball="$cache/bookworm-minbase-$key.tar.gz"
mkdir -p "$cache"

# One builder at a time; a second caller waits, then finds the tarball.
exec 9>"$cache/.lock"
flock 9
if [ ! -f "$tarball" ]; then
    echo "debian-chroot.sh: building $tarball (debootstrap from $mirror)" >&2
    build=$(mktemp -d "$cache/build.XXXXXX")
    trap 'rm -rf --one-file-system "$build"' EXIT
    trap 'exit 1' INT TERM
    debootstrap --variant=minbase bookworm "$build/root" "$mirror/debian" >"$build/debootstrap.log" 2>&1 || {
        tail -n 30 "$build/debootstrap.log" >&2
        echo "debian-chroot.sh: debootstrap failed (log above)" >&2
        exit 1
    }
    cat >"$build/root/etc/apt/sources.list" <<EOF
deb $mirror/debian bookworm main
deb $mirror/debian bookworm-updates main
deb $mirror/debian-security bookworm-security main
EOF
    printf '#!/bin/sh\n# No init in a chroot: refuse to start services.\nexit 101\n' \
        >"$build/root/usr/sbin/policy-rc.d"
    chmod 755 "$build/root/usr/sbin/policy-rc.d"
    rm -rf "$build/root/var/cache/apt/archives/"*.deb "$build/root/var/lib/apt/lists/"*_Packages
    tar --numeric-owner -C "$build/root" -czf "$build/root.tar.gz" .
    rm -f "$cache"/bookworm-minbase-*.tar.gz
    mv "$build/root.tar.gz" "$tarball"
fi
flock -u 9
[ -n "$dir" ] || exit 0

mkdir -p "$dir"
tar --numeric-owner -C "$dir" -xzf "$tarball"
rm -f "$dir/etc/resolv.conf"
cp /etc/resolv.conf "$dir/etc/resolv.conf"
