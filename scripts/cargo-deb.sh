#!/usr/bin/env bash
# Installs cargo-deb, the packaging tool of scripts/package.sh, at the pinned version from
# crates.io (`cargo install --locked`: its own Cargo.lock), unless that version is installed.
# Takes 2-5 minutes on a 2-core machine (it compiles about 100 crates).
set -euo pipefail
version=3.8.0
if [ "$(cargo deb --version 2>/dev/null)" = "cargo-deb $version" ]; then
    exit 0
fi
echo "== cargo install cargo-deb $version"
cargo install cargo-deb --version "$version" --locked --quiet
