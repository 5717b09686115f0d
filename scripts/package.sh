#!/usr/bin/env bash
# Builds the Debian packages smartmig, smartmigd and smartmig-slurm-plugin with cargo-deb.
#
#   scripts/package.sh [--out DIR] [--deb-version VERSION] [--profile PROFILE] [--no-build] [--fast]
#
# --out          where the .debs go (default: $CARGO_TARGET_DIR/debian or target/debian)
# --deb-version  Debian version of all three (default: the crate version, revision 1)
# --profile      cargo profile (default: release; `dev` packages the debug build, for tests)
# --no-build     package the binaries already built for that profile
# --fast         faster, weaker compression (cargo deb --fast: 8 s instead of 39 s for the
#                smartmig package of a debug build), for tests
#
# Steps: cargo build, man pages and completions from the binaries' hidden `manpages` and
# `completions` subcommands, cargo deb per package, then the plugin's exact Slurm dependency.
set -euo pipefail
cd "$(dirname "$0")/.."

out=""
deb_version=""
profile=release
build=1
fast=()
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --deb-version) deb_version="$2"; shift 2 ;;
        --profile) profile="$2"; shift 2 ;;
        --no-build) build=0; shift ;;
        --fast) fast=(--fast); shift ;;
        *) echo "package.sh: unknown argument '$1' (see the usage at the top of the script)" >&2; exit 2 ;;
    esac
done

target="${CARGO_TARGET_DIR:-target}"
profile_dir="$profile"
[ "$profile" = dev ] && profile_dir=debug
bin="$target/$profile_dir"
out="${out:-$target/debian}"
mkdir -p "$out"

scripts/cargo-deb.sh

if [ "$build" = 1 ]; then
    cargo build --locked --profile "$profile" -p smartmig -p smartmigd -p smartmig-slurm-plugin -p smartmig-cli-filter
fi

# Man pages (gzip -n: no timestamp, reproducible) and completions, where the assets expect them.
rm -rf "$bin/man" "$bin/completions"
"$bin/smartmig" manpages "$bin/man" >/dev/null
"$bin/smartmigd" manpages "$bin/man" >/dev/null
gzip -9nf "$bin"/man/*.1 "$bin"/man/*.5 "$bin"/man/*.8
mkdir -p "$bin/completions"
for b in smartmig smartmigd; do
    "$bin/$b" completions bash >"$bin/completions/$b.bash"
    "$bin/$b" completions zsh >"$bin/completions/_$b"
    "$bin/$b" completions fish >"$bin/completions/$b.fish"
done

version_args=()
[ -n "$deb_version" ] && version_args=(--deb-version "$deb_version")
for p in smartmig smartmigd smartmig-slurm-plugin; do
    cargo deb --locked --no-build --profile "$profile" -p "$p" -o "$out" "${version_args[@]}" "${fast[@]}"
done

# The plugin loads only into the slurmctld of the Slurm it was compiled against
# (plugin_version must equal SLURM_VERSION_NUMBER: major.minor.micro), so depend on that
# upstream version, any Debian revision: slurmctld (>= 22.05.8), slurmctld (<< 22.05.9~).
if ! slurm=$(dpkg-query -W -f='${Version}' libslurm-dev 2>/dev/null) || [ -z "$slurm" ]; then
    echo "package.sh: libslurm-dev is not installed; the plugin's Slurm dependency comes from its version (scripts/deps.sh slurm)" >&2
    exit 1
fi
upstream="${slurm#*:}"
upstream="${upstream%-*}"
next="${upstream%.*}.$(( ${upstream##*.} + 1 ))"
pin="slurmctld (>= $upstream), slurmctld (<< $next~)"
plugin_deb=$(ls -t "$out"/smartmig-slurm-plugin_*.deb | head -n1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb -R "$plugin_deb" "$work/pkg"
if grep -q '^Depends:' "$work/pkg/DEBIAN/control"; then
    sed -i "s/^Depends: .*/&, $pin/" "$work/pkg/DEBIAN/control"
else
    echo "Depends: $pin" >>"$work/pkg/DEBIAN/control"
fi
dpkg-deb --root-owner-group -Zxz -b "$work/pkg" "$plugin_deb" >/dev/null
echo "package.sh: $(ls "$out"/*.deb | tr '\n' ' ')"
echo "package.sh: smartmig-slurm-plugin depends on $pin"
