# Sourced by scripts/deps.sh (`scripts/deps.sh slurm` installs only these).
# libslurm-dev + libclang-dev: bindgen over slurm.h when building slurm-plugin.
# slurmctld slurmd slurm-client munge: the throwaway cluster of tests/plugin_e2e.rs.
# slurmdbd mariadb-server: accounting (sacct) in that cluster.
# binutils: readelf/nm/size in slurm-plugin/tests/shared_object.rs.
# iproute2: `ip netns` for multi-node tests.
# slurm-wlm-basic-plugins: ships job_submit/lua, used by the submission benchmark.
need+=(libslurm-dev libclang-dev slurmctld slurmd slurm-client munge slurmdbd
  mariadb-server binutils iproute2 slurm-wlm-basic-plugins)
