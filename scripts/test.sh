#!/usr/bin/env bash
# The project's test command: installs what the tests need on a fresh Debian 12 machine
# (idempotent), then checks formatting and lints, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh

# tests/packages.rs installs the packages into a clean Debian 12 chroot, cached by
# scripts/debian-chroot.sh. Building that cache (first run: ~2.5 min, mostly downloads) runs
# in the background while the workspace compiles; the test waits for it (a lock) and, if it
# failed, builds it again and shows the error. The log is only for a look afterwards.
if [ "$(id -u)" -eq 0 ]; then
  mkdir -p "${CARGO_TARGET_DIR:-target}"
  scripts/debian-chroot.sh --prepare >"${CARGO_TARGET_DIR:-target}/debian-chroot.log" 2>&1 &
fi

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy (warnings denied)"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
# Every binary and the plugin are built before any test runs: the package test packages them
# as they are (tests/packages.rs).
SMARTMIG_PACKAGE_PREBUILT=1 cargo test --workspace --locked
