#!/usr/bin/env bash
# The project's test command: installs what the tests need on a fresh Debian 12 machine
# (idempotent), then checks formatting and lints, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy (warnings denied)"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
