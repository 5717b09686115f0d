#!/usr/bin/env bash
# Runs the end-to-end tests of the job_submit plugin and smartmigd against each Slurm release
# smartmig is tested on. Needs root (the tests start munged, slurmctld and slurmd).
#
#   scripts/e2e.sh [host|trixie|all] [-- TEST-FILTER...]      (default: all)
#
# host    the host's Slurm (Debian 12: 22.05), as `cargo test` runs it.
# trixie  Debian 13's Slurm 24.11, installed in a root file system
#         (scripts/debian-chroot.sh --suite trixie --slurm --shared, built once and cached),
#         whose daemons and clients the tests run chrooted there; the plugin and smartmigd
#         are built against its headers and libslurm (scripts/slurm-build.sh, into
#         target/slurm-<release>).
#
# The same tests, with the same expectations, run on each: tests/plugin_e2e.rs (routing,
# hints, time-limit rescaling, refusals, a 1,000-job storm), tests/cli_filter_e2e.rs (srun,
# salloc and steps with gpu:mig), controller/tests/central_e2e.rs (a central re-layout cycle
# with node agents) and controller/tests/central_faults.rs (its faults, on the release's own
# re-layout path; the restart path's own faults are skipped where it is not smartmigd's). scripts/test.sh runs `trixie` after the
# workspace's tests (which include `host`).
set -euo pipefail
cd "$(dirname "$0")/.."

which="${1:-all}"
[ $# -gt 0 ] && shift
[ "${1:-}" = -- ] && shift
case "$which" in host|trixie|all) ;; *) echo "usage: scripts/e2e.sh [host|trixie|all] [-- FILTER...]" >&2; exit 2 ;; esac

# The workspace with all features, exactly as scripts/test.sh builds it, so its build is
# reused as it is: other flags (`-p smartmig --features smartmig/train`) unify features
# differently and rebuilt most crates (5 min from cold). `--test` picks the four files from
# the packages that have them.
tests=(--workspace --all-features --test plugin_e2e --test cli_filter_e2e --test central_e2e --test central_faults)

run() {
    local name="$1"
    shift
    echo "== e2e on $name"
    local start=$SECONDS
    env "$@" cargo test --locked "${tests[@]}" -- "${filters[@]}"
    echo "== e2e on $name: $((SECONDS - start)) s"
}
filters=("$@")

if [ "$which" = host ] || [ "$which" = all ]; then
    run "the host's Slurm" SMARTMIG_SLURM_ROOT=
fi
if [ "$which" = trixie ] || [ "$which" = all ]; then
    root=$(scripts/debian-chroot.sh --suite trixie --slurm --shared)
    run "Debian 13's Slurm in $root" SMARTMIG_SLURM_ROOT="$root"
fi
