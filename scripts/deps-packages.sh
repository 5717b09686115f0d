# Sourced by scripts/deps.sh (`scripts/deps.sh packages` installs only these).
# debootstrap: the clean Debian 12 chroot of tests/packages.rs (scripts/debian-chroot.sh).
# cargo-deb (from crates.io, pinned in scripts/cargo-deb.sh): builds the packages
# (scripts/package.sh); run after the Debian packages are in place.
need+=(debootstrap)
after+=(scripts/cargo-deb.sh)
