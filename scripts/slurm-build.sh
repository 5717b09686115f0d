#!/usr/bin/env bash
# Builds the Slurm-linked parts, job_submit_smartmig.so, cli_filter_smartmig.so and
# smartmigd, against the Slurm
# installed under PREFIX (headers in PREFIX/include, libslurm in PREFIX/lib...), into their
# own target dir, $CARGO_TARGET_DIR (or target)/slurm-<release>, so the host's build is left
# alone; prints the directory holding them (the profile's).
#
#   scripts/slurm-build.sh [--profile PROFILE] PREFIX      (default profile: dev)
#
# E.g. for Debian 13's Slurm 24.11, from its root file system:
#   scripts/slurm-build.sh "$(scripts/debian-chroot.sh --suite trixie --slurm --shared)/usr"
# The tests (tests/slurm/mod.rs) and scripts/package.sh --root build through this script.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=dev
prefix=""
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) profile="$2"; shift 2 ;;
        -*) echo "slurm-build.sh: unknown option '$1'" >&2; exit 2 ;;
        *) [ -z "$prefix" ] || { echo "usage: scripts/slurm-build.sh [--profile P] PREFIX" >&2; exit 2; }
           prefix="$1"; shift ;;
    esac
done
[ -n "$prefix" ] || { echo "usage: scripts/slurm-build.sh [--profile P] PREFIX" >&2; exit 2; }
header="$prefix/include/slurm/slurm_version.h"
[ -f "$header" ] || { echo "slurm-build.sh: no $header (is PREFIX a Slurm installation?)" >&2; exit 1; }
hex=$(sed -n 's/^#define SLURM_VERSION_NUMBER *(\{0,1\}0x\([0-9a-fA-F]*\).*/\1/p' "$header")
[ -n "$hex" ] || { echo "slurm-build.sh: no SLURM_VERSION_NUMBER in $header" >&2; exit 1; }
v=$((16#$hex))
release=$(printf '%d.%02d.%d' $((v >> 16)) $(((v >> 8) & 255)) $((v & 255)))

target="${CARGO_TARGET_DIR:-target}/slurm-$release"
SLURM_PREFIX="$prefix" CARGO_TARGET_DIR="$target" cargo build --locked --profile "$profile" \
    -p smartmig-slurm-plugin -p smartmig-cli-filter -p smartmigd --lib --bin smartmigd >&2
dir="$profile"
[ "$profile" = dev ] && dir=debug
readlink -f "$target/$dir"
