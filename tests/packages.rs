//! The Debian packages: build them with scripts/package.sh, install them with dpkg on this
//! machine, upgrade to a version-bumped build with an edited config, purge.
//!
//! Ignored by default: it needs root, a release build (several minutes) and changes the
//! machine's package database. Run with
//! `cargo test --test packages -- --ignored --nocapture`;
//! `SMARTMIG_PACKAGE_PROFILE=dev` packages the debug build instead (faster, same layout).

use std::path::{Path, PathBuf};
use std::process::Command;

const PACKAGES: [&str; 3] = ["smartmig", "smartmigd", "smartmig-slurm-plugin"];
const CONFIG: &str = "/etc/smartmig/smartmig.toml";

/// Files each package must install.
const INSTALLED: [&str; 15] = [
    "/usr/bin/smartmig",
    "/usr/bin/smartmigd",
    CONFIG,
    "/usr/share/man/man1/smartmig.1.gz",
    "/usr/share/man/man1/smartmig-compare.1.gz",
    "/usr/share/man/man5/smartmig.toml.5.gz",
    "/usr/share/man/man8/smartmigd.8.gz",
    "/usr/share/man/man8/smartmigd-central.8.gz",
    "/usr/share/bash-completion/completions/smartmig",
    "/usr/share/smartmig/scenarios/paper-a100x8.toml",
    "/usr/share/smartmig/onnx/a100-40gb-preempt.onnx",
    "/usr/share/doc/smartmig/admin-guide.md",
    "/usr/lib/systemd/system/smartmigd-central.service",
    "/usr/lib/systemd/system/smartmigd-node.service",
    "/usr/lib/x86_64-linux-gnu/slurm-wlm/job_submit_smartmig.so",
];

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn package(out: &Path, version: &str, build: bool) -> Vec<PathBuf> {
    let root = env!("CARGO_MANIFEST_DIR");
    let profile = std::env::var("SMARTMIG_PACKAGE_PROFILE").unwrap_or_else(|_| "release".into());
    let mut cmd = Command::new(format!("{root}/scripts/package.sh"));
    cmd.args(["--profile", &profile, "--deb-version", version, "--out"])
        .arg(out);
    if !build {
        cmd.arg("--no-build");
    }
    run(&mut cmd);
    PACKAGES
        .iter()
        .map(|p| out.join(format!("{p}_{version}_amd64.deb")))
        .inspect(|deb| assert!(deb.is_file(), "package.sh wrote no {}", deb.display()))
        .collect()
}

/// dpkg -i without a terminal: a conffile prompt would fail the install instead of hanging.
fn install(debs: &[PathBuf]) {
    run(Command::new("dpkg")
        .arg("-i")
        .args(debs)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(std::process::Stdio::null()));
}

fn installed_version(package: &str) -> String {
    run(Command::new("dpkg-query").args(["-W", "-f=${Version}", package]))
}

#[test]
#[ignore = "needs root, a release build and several minutes; changes the package database"]
fn packages_install_upgrade_keeping_the_edited_config_and_purge() {
    if !run(Command::new("id").arg("-u")).trim().eq("0") {
        println!("skipped: dpkg -i needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();

    let v1 = package(&dir.path().join("v1"), "0.1.0-1", true);
    install(&v1);
    for f in INSTALLED {
        assert!(Path::new(f).is_file(), "{f} not installed");
    }
    let conffiles = run(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", "smartmig"]));
    assert!(conffiles.contains(CONFIG), "not a conffile: {conffiles}");
    let depends = run(Command::new("dpkg-query").args(["-W", "-f=${Depends}", "smartmig-slurm-plugin"]));
    assert!(depends.contains("slurmctld (>= "), "plugin depends: {depends}");
    // The installed binary reads the installed config.
    run(Command::new("/usr/bin/smartmig").args(["config", "check", CONFIG]));
    let man = run(Command::new("man").args(["-P", "cat", "5", "smartmig.toml"]));
    assert!(man.contains("decision_interval_s"), "man 5 smartmig.toml: {man}");

    // The admin edits the config; the upgrade must keep it.
    let edited = std::fs::read_to_string(CONFIG)
        .unwrap()
        .replace("decision_interval_s = 60", "decision_interval_s = 90");
    assert!(edited.contains("decision_interval_s = 90"));
    std::fs::write(CONFIG, &edited).unwrap();
    let v2 = package(&dir.path().join("v2"), "0.1.0-2", false);
    install(&v2);
    for p in PACKAGES {
        assert_eq!(installed_version(p), "0.1.0-2", "{p} not upgraded");
    }
    assert_eq!(std::fs::read_to_string(CONFIG).unwrap(), edited);

    run(Command::new("dpkg").arg("--purge").args(PACKAGES));
    for f in INSTALLED {
        assert!(!Path::new(f).exists(), "{f} left after purge");
    }
    assert!(!Path::new("/etc/smartmig").exists(), "/etc/smartmig left");
}
