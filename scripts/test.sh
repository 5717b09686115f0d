#!/usr/bin/env bash
# The project's test command: installs what the tests need on a fresh Debian 12 machine
# (idempotent), then checks formatting and lints, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's line carries the seconds since the start, so a slow stage shows in CI's log.
stage() { echo "== $* (at ${SECONDS} s)"; }

stage "Debian packages, ONNX Runtime and cargo-deb (scripts/deps.sh)"
scripts/deps.sh

# tests/packages.rs installs the packages into clean Debian 12 and 13 chroots, and the
# end-to-end tests run Debian 13's Slurm 24.11 from a third (scripts/e2e.sh trixie below), all
# cached by scripts/debian-chroot.sh. Building those caches (first run: ~5 min, mostly
# downloads) runs in the background while the workspace compiles; each user waits for it (a
# lock) and, if it failed, builds it again and shows the error. The log is only for a look
# afterwards.
if [ "$(id -u)" -eq 0 ]; then
  mkdir -p "${CARGO_TARGET_DIR:-target}"
  {
    scripts/debian-chroot.sh --prepare
    scripts/debian-chroot.sh --suite trixie --slurm --shared
    scripts/debian-chroot.sh --suite trixie --prepare
  } >"${CARGO_TARGET_DIR:-target}/debian-chroot.log" 2>&1 &
fi

stage "cargo fmt --check"
cargo fmt --all --check
# Everything builds with the trainer (`--all-features`, as the package ships smartmig); the
# default build (without it) comes last: cargo names artifacts without their feature set, so
# a build with another one overwrites them and the next step would rebuild.
stage "cargo clippy (warnings denied)"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
stage "cargo test"
# Every binary and the plugin are built before any test runs: the package test packages them
# as they are (tests/packages.rs).
SMARTMIG_PACKAGE_PREBUILT=1 cargo test --workspace --all-features --locked
stage "end-to-end tests on Debian 13's Slurm 24.11 (the host's ran above)"
if [ "$(id -u)" -eq 0 ]; then
  scripts/e2e.sh trixie
else
  echo "skipped: not root (the end-to-end tests start Slurm's daemons)"
fi
stage "the default build (without the trainer): lints, and its own tests"
cargo clippy -p smartmig --all-targets --locked -- -D warnings
cargo test -p smartmig --lib --locked
stage "done"
