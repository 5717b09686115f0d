#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, when missing. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pkg in "$@"; do need+=("$pkg"); done
for f in scripts/deps-*.sh; do
  [ -e "$f" ] && source "$f"
done
# Packages every part of the build needs.
need+=(pkg-config)

missing=()
for pkg in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${missing[*]}"
  # Keep apt from starting the daemons it installs: the tests start their own.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
