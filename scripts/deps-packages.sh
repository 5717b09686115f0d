# Sourced by scripts/deps.sh (`scripts/deps.sh packages` installs only these).
# debootstrap: the clean Debian 12 and 13 chroots of tests/packages.rs, and the Debian 13 root
#   whose Slurm 24.11 the end-to-end tests run (scripts/debian-chroot.sh).
# dpkg-dev: dpkg-shlibdeps, for cargo-deb's library dependencies and package.sh --root.
# cargo-deb (from crates.io, pinned in scripts/cargo-deb.sh): builds the packages
# (scripts/package.sh); run after the Debian packages are in place.
need+=(debootstrap dpkg-dev)
after+=(scripts/cargo-deb.sh)
