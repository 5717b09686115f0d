#!/usr/bin/env bash
# Unpacks a clean Debian root file system (debootstrap --variant=minbase) into DIR, for trying
# the packages as on a fresh install (tests/packages.rs), or gives a shared root with Slurm
# installed, whose daemons, clients and headers the tests and builds use (tests/slurm/mod.rs,
# scripts/e2e.sh). Needs root and debootstrap.
#
#   scripts/debian-chroot.sh [--suite S] [--slurm] DIR        unpack a fresh root into DIR
#   scripts/debian-chroot.sh [--suite S] [--slurm] --prepare  only build the cache (scripts/test.sh
#                                                             runs this in the background while
#                                                             the workspace compiles)
#   scripts/debian-chroot.sh [--suite S] --slurm --shared     print the path of a shared root with
#                                                             Slurm, unpacked once; use it read-only
#
# --suite: bookworm (Debian 12, the default: Slurm 22.05) or trixie (Debian 13: Slurm 24.11).
# --slurm: also install slurmctld, slurmd, slurm-client, munge and libslurm-dev.
#
# Each root file system is built once and cached as a tarball in
# ${XDG_CACHE_HOME:-~/.cache}/smartmig/debian-chroot/SUITE-VARIANT-KEY.tar.gz (VARIANT: minbase or
# slurm), where KEY hashes this script, debootstrap's version and the mirror: changing any
# rebuilds it (older tarballs of the same suite and variant are removed). Building takes 1-3
# minutes (mostly downloads), unpacking seconds. The shared root of --shared is unpacked next to
# its tarball, as SUITE-slurm-KEY.root; roots of older keys are removed after a day unused.
#
# What the tarball holds beyond debootstrap's minbase: the sources of a Debian install of that
# suite (SUITE, SUITE-updates, SUITE-security, so apt resolves the same packages as a machine of
# that release), a policy-rc.d that refuses to start services (there is no init in a chroot; apt
# would otherwise start slurmctld), and an empty /etc/hosts (whoever runs daemons in the root
# binds the host's over it, so the host name resolves without DNS). DIR gets this machine's
# resolv.conf. The mirror is $SMARTMIG_DEBIAN_MIRROR (default http://deb.debian.org).
set -euo pipefail

usage() {
    echo "usage: scripts/debian-chroot.sh [--suite bookworm|trixie] [--slurm] DIR | --prepare | --shared" >&2
    exit 2
}
suite=bookworm
variant=minbase
mode=""
dir=""
while [ $# -gt 0 ]; do
    case "$1" in
        --suite) [ $# -ge 2 ] || usage; suite="$2"; shift 2 ;;
        --slurm) variant=slurm; shift ;;
        --prepare|--shared) mode="$1"; shift ;;
        -*) usage ;;
        *) [ -z "$dir" ] || usage; dir="$1"; mode=dir; shift ;;
    esac
done
[ -n "$mode" ] || usage
[ "$mode" != dir ] || [ -n "$dir" ] || usage
case "$suite" in bookworm|trixie) ;; *) echo "debian-chroot.sh: unknown suite '$suite' (bookworm or trixie)" >&2; exit 2 ;; esac
if [ "$mode" = --shared ] && [ "$variant" != slurm ]; then
    echo "debian-chroot.sh: --shared is for roots with Slurm (add --slurm)" >&2
    exit 2
fi
script="$(readlink -f "$0")"
mirror="${SMARTMIG_DEBIAN_MIRROR:-http://deb.debian.org}"

if [ "$mode" = dir ] && [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
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
name="$suite-$variant"
tarball="$cache/$name-$key.tar.gz"
mkdir -p "$cache"
include=()
[ "$variant" = slurm ] && include=(--include=slurmctld,slurmd,slurm-client,munge,libslurm-dev)

# One builder at a time; a second caller waits, then finds the tarball.
exec 9>"$cache/.lock"
flock 9
if [ ! -f "$tarball" ]; then
    echo "debian-chroot.sh: building $tarball (debootstrap $suite from $mirror)" >&2
    build=$(mktemp -d "$cache/build.XXXXXX")
    trap 'rm -rf --one-file-system "$build"' EXIT
    trap 'exit 1' INT TERM
    debootstrap --variant=minbase "${include[@]}" "$suite" "$build/root" "$mirror/debian" \
        >"$build/debootstrap.log" 2>&1 || {
        tail -n 30 "$build/debootstrap.log" >&2
        echo "debian-chroot.sh: debootstrap failed (log above)" >&2
        exit 1
    }
    cat >"$build/root/etc/apt/sources.list" <<EOF
deb $mirror/debian $suite main
deb $mirror/debian $suite-updates main
deb $mirror/debian-security $suite-security main
EOF
    printf '#!/bin/sh\n# No init in a chroot: refuse to start services.\nexit 101\n' \
        >"$build/root/usr/sbin/policy-rc.d"
    chmod 755 "$build/root/usr/sbin/policy-rc.d"
    : >"$build/root/etc/hosts"
    rm -rf "$build/root/var/cache/apt/archives/"*.deb "$build/root/var/lib/apt/lists/"*_Packages
    tar --numeric-owner -C "$build/root" -czf "$build/root.tar.gz" .
    rm -f "$cache/$name"-*.tar.gz
    mv "$build/root.tar.gz" "$tarball"
fi

if [ "$mode" = --shared ]; then
    root="$cache/$name-$key.root"
    if [ ! -f "$root/.unpacked" ]; then
        rm -rf --one-file-system "$root"
        tmp=$(mktemp -d "$cache/unpack.XXXXXX")
        chmod 755 "$tmp"
        tar --numeric-owner -C "$tmp" -xzf "$tarball"
        touch "$tmp/.unpacked"
        mv "$tmp" "$root"
    fi
    touch "$root/.unpacked"
    for old in "$cache/$name"-*.root; do
        if [ "$old" != "$root" ] && [ -n "$(find "$old/.unpacked" -mtime +0 2>/dev/null)" ]; then
            rm -rf --one-file-system "$old"
        fi
    done
    echo "$root"
    exit 0
fi
flock -u 9
[ "$mode" = dir ] || exit 0

mkdir -p "$dir"
tar --numeric-owner -C "$dir" -xzf "$tarball"
rm -f "$dir/etc/resolv.conf"
cp /etc/resolv.conf "$dir/etc/resolv.conf"
