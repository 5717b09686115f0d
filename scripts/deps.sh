#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, when missing. Idempotent.
#
#   scripts/deps.sh            every group (what scripts/test.sh needs)
#   scripts/deps.sh slurm ...  only the named groups
#
# Each group is a file scripts/deps-GROUP.sh that appends its packages to `need`, with
# a comment saying what needs them, and may append to `after` commands that install what
# Debian does not package (run after the packages, each idempotent itself).
set -euo pipefail
cd "$(dirname "$0")/.."

need=(pkg-config)
after=()
if [ $# -eq 0 ]; then
  groups=(scripts/deps-*.sh)
else
  groups=()
  for g in "$@"; do
    [ -e "scripts/deps-$g.sh" ] || { echo "deps.sh: no group '$g' (scripts/deps-$g.sh)" >&2; exit 2; }
    groups+=("scripts/deps-$g.sh")
  done
fi
for f in "${groups[@]}"; do
  # shellcheck source=/dev/null
  source "$f"
done

missing=()
for pkg in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps.sh: missing ${missing[*]}; run as root to install" >&2
    exit 1
  fi
  echo "== installing Debian packages: ${missing[*]}"
  # Keep apt from starting the daemons it installs: the tests start their own.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

for cmd in "${after[@]}"; do
  "$cmd"
done
