#!/usr/bin/env bash
# Debian packages the Slurm plugin and its end-to-end tests need. Idempotent.
#
# Two ways to use it:
#   - sourced by scripts/deps.sh: appends the packages to its `need` array, and
#     deps.sh installs what is missing (with its policy-rc.d guard);
#   - run directly (as root): installs what is missing itself.
#
# libslurm-dev + libclang-dev: bindgen over slurm.h when building slurm-plugin.
# slurmctld slurmd slurm-client munge: the throwaway cluster of tests/plugin_e2e.rs.
# slurmdbd mariadb-server: accounting (sacct) in that cluster.
# binutils: readelf/nm/size in slurm-plugin/tests/shared_object.rs.
# iproute2: `ip netns` for multi-node tests.
# slurm-wlm-basic-plugins: ships job_submit/lua, used by the submission benchmark.
SLURM_DEPS=(libslurm-dev libclang-dev slurmctld slurmd slurm-client munge slurmdbd
  mariadb-server binutils iproute2 slurm-wlm-basic-plugins)

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
  need+=("${SLURM_DEPS[@]}")
  return 0
fi

set -euo pipefail
missing=()
for pkg in "${SLURM_DEPS[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps-slurm: all present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "deps-slurm: missing ${missing[*]}; run as root to install" >&2
  exit 1
fi
echo "== installing Debian packages: ${missing[*]}"
# Keep apt from starting the daemons it installs: the tests start their own, in a temp dir.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
