//! The Debian packages on a clean Debian 12 and a clean Debian 13: build them with
//! scripts/package.sh (for Debian 13 against its Slurm 24.11, `--root`), install them with apt
//! from the local .deb files into a debootstrap (minbase) chroot of that release, so apt
//! resolves their declared dependencies from the Debian mirror (slurmctld of the matching
//! version for the plugin, that release's libslurm for smartmigd), upgrade to a version-bumped
//! build after editing the config, purge.
//!
//! Needs root (debootstrap, chroot, mount namespace), debootstrap and cargo-deb (both from
//! `scripts/deps.sh packages`) and the Debian mirror; skipped only when not root. The chroot
//! comes from scripts/debian-chroot.sh, which caches it under ~/.cache/smartmig/debian-chroot
//! (first build about 2.5 minutes, then seconds). Each chroot command runs in its own mount
//! namespace with a fresh /proc, so nothing stays mounted when the test ends or fails.
//!
//! The packages hold the debug build by default, which `cargo test --workspace` has already
//! built: scripts/test.sh sets `SMARTMIG_PACKAGE_PREBUILT=1` and package.sh packages those
//! binaries as they are (`--no-build`; only the plugin's cdylib, which the test build does
//! not write, is built first). Run alone, package.sh builds them first (cargo
//! releases the build-directory lock before it runs the tests, so this nested build in the
//! same target directory does not wait on it; it recompiles the binaries, whose features
//! differ from the test build's: about 4 minutes on the CI machine). A release build costs
//! many more minutes there. The layout is the same; `SMARTMIG_PACKAGE_PROFILE=release`
//! packages the release build (always built by package.sh). package.sh runs with
//! `--fast` (weaker compression: 20 s instead of about a minute per build of the three).
//! With the chroot cached the test takes about 70 s on the 2-core machine. Run alone with
//! `cargo test --test packages -- --nocapture`; it prints the time of each stage.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

const PACKAGES: [&str; 3] = ["smartmig", "smartmigd", "smartmig-slurm-plugin"];
const CONFIG: &str = "/etc/smartmig/smartmig.toml";
const PLUGIN: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm/job_submit_smartmig.so";

/// Files the packages must install, by package.
const INSTALLED: [(&str, &str); 22] = [
    ("smartmig", "/usr/bin/smartmig"),
    ("smartmig", CONFIG),
    ("smartmig", "/usr/share/man/man1/smartmig.1.gz"),
    ("smartmig", "/usr/share/man/man1/smartmig-compare.1.gz"),
    ("smartmig", "/usr/share/man/man5/smartmig.toml.5.gz"),
    ("smartmig", "/usr/share/bash-completion/completions/smartmig"),
    ("smartmig", "/usr/share/smartmig/scenarios/paper-a100x8.toml"),
    ("smartmig", "/usr/share/smartmig/onnx/a100-40gb-preempt.onnx"),
    (
        "smartmig",
        "/usr/share/smartmig/onnx/energy-capped/a100-40gb-preempt.onnx",
    ),
    ("smartmig", "/usr/share/smartmig/onnx/padded/a100-40gb-drain.onnx"),
    (
        "smartmig",
        "/usr/share/smartmig/onnx/padded/a100-40gb-preempt.onnx",
    ),
    ("smartmig", "/usr/share/doc/smartmig/admin-guide.md"),
    ("smartmig", "/usr/share/doc/smartmig/examples/smartmig.toml"),
    ("smartmig", "/usr/share/doc/smartmig/examples/catalogue.toml"),
    ("smartmigd", "/usr/bin/smartmigd"),
    ("smartmigd", "/usr/share/man/man8/smartmigd.8.gz"),
    ("smartmigd", "/usr/share/man/man8/smartmigd-central.8.gz"),
    ("smartmigd", "/usr/lib/systemd/system/smartmigd-central.service"),
    ("smartmigd", "/usr/lib/systemd/system/smartmigd-node.service"),
    (
        "smartmigd",
        "/usr/lib/systemd/system/smartmigd-node-restore.service",
    ),
    ("smartmig-slurm-plugin", PLUGIN),
    (
        "smartmig-slurm-plugin",
        "/usr/lib/x86_64-linux-gnu/slurm-wlm/cli_filter_smartmig.so",
    ),
];

/// State smartmigd's units create at run time (systemd's StateDirectory and RuntimeDirectory);
/// purging smartmigd must remove it.
const STATE: [&str; 2] = ["/var/lib/smartmig/journal", "/run/smartmig/snapshot.json"];

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const CHROOT_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/debian-chroot.sh");

/// A Debian release the packages are built for and tried on.
struct Release {
    /// debootstrap's suite name.
    suite: &'static str,
    /// The shared root with that release's Slurm the Slurm-linked packages are built against
    /// (None: this machine's).
    slurm_root: Option<PathBuf>,
}

impl Release {
    /// The version of `package` the packages were built against.
    fn build_version(&self, package: &str) -> String {
        let mut cmd = Command::new("dpkg-query");
        if let Some(root) = &self.slurm_root {
            cmd.arg(format!("--admindir={}", root.join("var/lib/dpkg").display()));
        }
        run(cmd.args(["-W", "-f=${Version}", package]))
    }
}

/// A clean Debian root file system.
struct Chroot {
    root: PathBuf,
}

impl Chroot {
    fn new(root: PathBuf, suite: &str) -> Self {
        run(Command::new(CHROOT_SCRIPT).args(["--suite", suite]).arg(&root));
        Chroot { root }
    }

    /// A path inside the chroot, seen from outside.
    fn path(&self, inside: &str) -> PathBuf {
        self.root.join(inside.trim_start_matches('/'))
    }

    /// Runs `script` with /bin/sh inside the chroot, in a private mount namespace with its own
    /// /proc, a plain environment and no terminal (apt and dpkg take their defaults, a conffile
    /// question fails the command instead of waiting). Returns stdout; panics on failure.
    fn sh(&self, script: &str) -> String {
        run(Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg(r#"mount -t proc proc "$1/proc" && exec chroot "$1" /bin/sh -ec "$2""#)
            .args(["sh".as_ref(), self.root.as_os_str(), script.as_ref()])
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", "/root")
            .env("LC_ALL", "C")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null()))
    }

    /// Copies the .debs into the chroot and installs (or upgrades to) them with apt, which
    /// fetches their dependencies from the mirror.
    fn apt_install(&self, name: &str, debs: &[PathBuf]) {
        let dir = format!("/var/tmp/smartmig-debs/{name}");
        std::fs::create_dir_all(self.path(&dir)).unwrap();
        let mut inside = Vec::new();
        for deb in debs {
            let file = deb.file_name().unwrap().to_string_lossy();
            std::fs::copy(deb, self.path(&format!("{dir}/{file}"))).unwrap();
            inside.push(format!("{dir}/{file}"));
        }
        self.sh(&format!(
            "apt-get install -y -q --no-install-recommends {}",
            inside.join(" ")
        ));
    }

    fn version(&self, package: &str) -> String {
        self.sh(&format!("dpkg-query -W -f='${{Version}}' {package}"))
    }
}

fn package(release: &Release, out: &Path, version: &str, build: bool) -> Vec<PathBuf> {
    let root = env!("CARGO_MANIFEST_DIR");
    let profile = std::env::var("SMARTMIG_PACKAGE_PROFILE").unwrap_or_else(|_| "dev".into());
    let mut cmd = Command::new(format!("{root}/scripts/package.sh"));
    // --fast: weaker compression, 8 s instead of 39 s for the smartmig package.
    cmd.args(["--fast", "--profile", &profile, "--deb-version", version, "--out"])
        .arg(out);
    if !build {
        cmd.arg("--no-build");
    }
    if let Some(slurm) = &release.slurm_root {
        cmd.arg("--root").arg(slurm);
    }
    run(&mut cmd);
    PACKAGES
        .iter()
        .map(|p| out.join(format!("{p}_{version}_amd64.deb")))
        .inspect(|deb| assert!(deb.is_file(), "package.sh wrote no {}", deb.display()))
        .collect()
}

/// The upstream part of a Debian version: 22.05.8 of 22.05.8-4+deb12u3.
fn upstream(version: &str) -> &str {
    let version = version.split_once(':').map_or(version, |(_, v)| v);
    version.rsplit_once('-').map_or(version, |(v, _)| v)
}

#[test]
fn packages_install_upgrade_keeping_the_edited_config_and_purge_on_a_clean_debian_12() {
    if !run(Command::new("id").arg("-u")).trim().eq("0") {
        eprintln!("skipped: debootstrap, chroot and mount namespaces need root");
        return;
    }
    install_upgrade_purge(&Release {
        suite: "bookworm",
        slurm_root: None,
    });
}

/// The same for Debian 13, with smartmigd and the plugin built against its Slurm 24.11 (the
/// shared root of scripts/debian-chroot.sh; the installs go to a clean minbase chroot).
#[test]
fn packages_install_upgrade_keeping_the_edited_config_and_purge_on_a_clean_debian_13() {
    if !run(Command::new("id").arg("-u")).trim().eq("0") {
        eprintln!("skipped: debootstrap, chroot and mount namespaces need root");
        return;
    }
    let slurm = run(Command::new(CHROOT_SCRIPT).args(["--suite", "trixie", "--slurm", "--shared"]));
    install_upgrade_purge(&Release {
        suite: "trixie",
        slurm_root: Some(PathBuf::from(slurm.trim())),
    });
}

/// One release at a time: both package from the same target dir (man pages, completions).
static SERIAL: Mutex<()> = Mutex::new(());

fn install_upgrade_purge(release: &Release) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let lap = |what: &str| {
        eprintln!(
            "packages ({}): {what} at {:.0?}",
            release.suite,
            started.elapsed()
        )
    };
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    let (v1, v2) = (format!("{version}-1"), format!("{version}-2"));

    // scripts/test.sh runs this inside `cargo test --workspace`, which has just built every
    // binary and the plugin into target/debug, and says so: the packages then take them as
    // they are. A `cargo build` of the three packages would rebuild the binaries with
    // another feature set (dev-dependencies unify features in test builds): ~4 minutes on
    // the 2-core CI machine. Run alone, the test builds them.
    let prebuilt = std::env::var_os("SMARTMIG_PACKAGE_PREBUILT").is_some()
        && std::env::var("SMARTMIG_PACKAGE_PROFILE").is_err();
    if prebuilt {
        // The test build links the plugin into its tests but writes no cdylib: build that
        // alone (it depends only on smartmig-core: about 100 s on the CI machine, against
        // about 4 minutes for all three packages).
        run(Command::new(env!("CARGO"))
            .args([
                "build",
                "--locked",
                "--profile",
                "dev",
                "-p",
                "smartmig-slurm-plugin",
                "-p",
                "smartmig-cli-filter",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR")));
    }
    let debs = package(release, &work.path().join("v1"), &v1, !prebuilt);
    lap("packages built");
    let chroot = Chroot::new(work.path().join("root"), release.suite);
    lap("chroot unpacked");
    // No init runs in the chroot: the maintainer scripts must not need systemd.
    assert!(!chroot.path("/run/systemd/system").exists());
    chroot.sh("apt-get update -q");
    chroot.apt_install("v1", &debs);
    lap("v1 installed");

    for (p, f) in INSTALLED {
        assert!(chroot.path(f).is_file(), "{p}: {f} not installed");
        let owner = chroot.sh(&format!("dpkg-query -S {f}"));
        assert!(owner.starts_with(&format!("{p}: ")), "{f} belongs to {owner}");
    }
    for p in PACKAGES {
        assert_eq!(chroot.version(p), v1, "{p}");
    }
    let conffiles = chroot.sh("dpkg-query -W -f='${Conffiles}' smartmig");
    assert!(conffiles.contains(CONFIG), "not a conffile: {conffiles}");
    // The binaries run in the clean system: their shared libraries came with the Depends.
    assert!(chroot.sh("smartmig --version").contains(version));
    assert!(chroot.sh("smartmigd --version").contains(version));
    chroot.sh(&format!("smartmig config check {CONFIG}"));
    // The package's smartmig has the trainer (a source build has it only with `--features train`).
    assert!(chroot.sh("smartmig train --help").contains("--teacher-rounds"));

    // apt installed the plugin's Slurm from the mirror, of the version it was built against.
    let built_slurm = release.build_version("libslurm-dev");
    let slurmctld = chroot.version("slurmctld");
    assert_eq!(
        upstream(&slurmctld),
        upstream(&built_slurm),
        "slurmctld {slurmctld}"
    );
    let depends = chroot.sh("dpkg-query -W -f='${Depends}' smartmig-slurm-plugin");
    assert!(
        depends.contains(&format!("slurmctld (>= {})", upstream(&built_slurm))),
        "plugin depends: {depends}"
    );
    // The plugin lands in the PluginDir the chroot's slurmctld uses by default: the one
    // compiled into its libslurmfull.so (there is no slurm.conf in a clean system).
    let ldd = chroot.sh("ldd /usr/sbin/slurmctld");
    let libslurmfull = ldd
        .split_whitespace()
        .find(|w| w.starts_with('/') && w.ends_with("/libslurmfull.so"))
        .unwrap_or_else(|| panic!("slurmctld links no libslurmfull.so: {ldd}"));
    let plugin_dir = Path::new(PLUGIN).parent().unwrap().to_str().unwrap();
    let lib = std::fs::read(chroot.path(libslurmfull)).unwrap();
    let needle = format!("\0{plugin_dir}\0").into_bytes();
    assert!(
        lib.windows(needle.len()).any(|w| w == needle.as_slice()),
        "{libslurmfull} has no default PluginDir {plugin_dir}"
    );
    // It links only what the clean system has.
    let ldd = chroot.sh(&format!("ldd {PLUGIN}"));
    assert!(!ldd.contains("not found"), "{ldd}");

    // State the daemon would have written; an upgrade keeps it, a purge removes it.
    for f in STATE {
        let path = chroot.path(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "state").unwrap();
    }
    // The admin edits the config; the upgrade must keep it.
    let edited = std::fs::read_to_string(chroot.path(CONFIG))
        .unwrap()
        .replace("decision_interval_s = 60", "decision_interval_s = 90");
    assert!(edited.contains("decision_interval_s = 90"));
    std::fs::write(chroot.path(CONFIG), &edited).unwrap();

    let debs = package(release, &work.path().join("v2"), &v2, false);
    chroot.apt_install("v2", &debs);
    lap("v2 installed");
    for p in PACKAGES {
        assert_eq!(chroot.version(p), v2, "{p} not upgraded");
    }
    assert_eq!(std::fs::read_to_string(chroot.path(CONFIG)).unwrap(), edited);
    for f in STATE {
        assert!(chroot.path(f).is_file(), "{f} lost in the upgrade");
    }
    chroot.sh(&format!("smartmig config check {CONFIG}"));

    chroot.sh(&format!("apt-get purge -y -q {}", PACKAGES.join(" ")));
    lap("purged");
    for p in PACKAGES {
        let status = chroot.sh(&format!("dpkg-query -W -f='${{db:Status-Status}}' {p} || true"));
        assert!(status.is_empty() || status == "not-installed", "{p}: {status}");
    }
    for (p, f) in INSTALLED {
        assert!(!chroot.path(f).exists(), "{p}: {f} left after purge");
    }
    for d in ["/etc/smartmig", "/var/lib/smartmig", "/run/smartmig"] {
        assert!(!chroot.path(d).exists(), "{d} left after purge");
    }
    // Purging the plugin leaves the Slurm it pulled in.
    assert_eq!(chroot.version("slurmctld"), slurmctld);
}

#[test]
fn upstream_version_drops_epoch_and_revision() {
    assert_eq!(upstream("22.05.8-4+deb12u3"), "22.05.8");
    assert_eq!(upstream("1:2.3-1"), "2.3");
    assert_eq!(upstream("0.1.0"), "0.1.0");
}
