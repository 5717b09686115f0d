//! Which Slurm the harness runs: the host's (`/usr/sbin/slurmctld`, ...), or the one
//! installed in a root file system named by `$SMARTMIG_SLURM_ROOT` (e.g. Debian 13's Slurm
//! 24.11 in `scripts/debian-chroot.sh --suite trixie --slurm --shared`), whose daemons and
//! clients then run chrooted there.
//!
//! Each command for a root runs in its own mount namespace (`unshare --mount`), which gets a
//! fresh /proc, the host's /dev, /sys, /etc/hosts (the host name resolves without DNS),
//! /run/netns (the harness's network namespaces) and temp dir (the cluster's files), plus the
//! directories a command asks for, each at its host path. The mounts vanish with the last
//! process of the namespace, so nothing stays mounted after a test, whatever happens; the
//! root itself is only read.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Environment variable naming the root file system whose Slurm the tests run.
pub const ROOT_ENV: &str = "SMARTMIG_SLURM_ROOT";

/// Sets up the mount namespace, then runs the command chrooted, in the caller's directory
/// when the root sees it (else in /). Arguments: the root, the directories to bind (host
/// paths), `--`, the command. No single quote in it: scripts quote it whole.
const ENTER_ROOT: &str = r#"root="$1"; shift
mount -t proc proc "$root/proc" &&
mount --rbind /dev "$root/dev" &&
mount --rbind /sys "$root/sys" &&
mount -t tmpfs tmpfs "$root/run" &&
mount --bind /etc/hosts "$root/etc/hosts" || exit 111
if [ -d /run/netns ]; then
  mkdir "$root/run/netns" && mount --rbind /run/netns "$root/run/netns" || exit 111
fi
while [ "$1" != -- ]; do
  mkdir -p "$root$1" && mount --rbind "$1" "$root$1" || exit 111
  shift
done
shift
dir=/
[ -d "$root$PWD" ] && dir="$PWD"
exec chroot "$root" env -C "$dir" "$@""#;

/// Where the Slurm under test is installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Install {
    /// The host's.
    Host,
    /// A root file system with Slurm installed.
    Root(PathBuf),
}

/// The installation the tests run: `$SMARTMIG_SLURM_ROOT`'s when set, else the host's.
pub fn install() -> &'static Install {
    static INSTALL: OnceLock<Install> = OnceLock::new();
    INSTALL.get_or_init(|| match std::env::var_os(ROOT_ENV) {
        Some(root) if !root.is_empty() => Install::Root(PathBuf::from(root)),
        _ => Install::Host,
    })
}

/// A Slurm release as `SLURM_VERSION_NUMBER` (0xMMmmuu).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release(pub u32);

impl Release {
    /// Parses `22.05.8` (the version word of `slurmctld -V`).
    pub fn parse(text: &str) -> Option<Release> {
        let mut parts = text.trim().split(['.', '-']).map(|p| p.parse::<u32>().ok());
        let (major, minor, micro) = (parts.next()??, parts.next()??, parts.next()??);
        Some(Release((major << 16) | (minor << 8) | micro))
    }

    /// `major.minor` and later.
    pub fn at_least(self, major: u32, minor: u32) -> bool {
        self.0 >= (major << 16) | (minor << 8)
    }

    /// How this release spells a GPU request in `tres_per_*`: `gres:gpu...` in 22.05,
    /// `gres/gpu...` from 23.02 on.
    pub fn gres_prefix(self) -> &'static str {
        if self.at_least(23, 2) {
            "gres/"
        } else {
            "gres:"
        }
    }
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{:02}.{}",
            self.0 >> 16,
            (self.0 >> 8) & 0xff,
            self.0 & 0xff
        )
    }
}

impl Install {
    /// Runs `bin` of this installation (a name, or an absolute path on the host) in
    /// network namespace `ns` (the caller's when None). For a root, `binds` are host
    /// directories the command must see, at their host paths (the temp dir always is).
    pub fn command(&self, ns: Option<&str>, bin: &str, binds: &[&Path]) -> Command {
        let enter_ns = |program: &str| match ns {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}")).arg("--").arg(program);
                c
            }
            None => Command::new(program),
        };
        match self {
            Install::Host => enter_ns(bin),
            Install::Root(root) => {
                let mut c = enter_ns("unshare");
                c.args([
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    "/bin/sh",
                    "-c",
                    ENTER_ROOT,
                    "sh",
                ])
                .arg(root)
                .arg(std::env::temp_dir());
                if Path::new(bin).is_absolute() {
                    if let Some(dir) = Path::new(bin).parent() {
                        c.arg(dir);
                    }
                }
                c.args(binds).arg("--").arg(bin);
                c
            }
        }
    }

    /// The shell words that make `program` run in network namespace `ns` of this
    /// installation, for scripts: empty or `nsenter ...` for the host's. For a root, the
    /// script may run on the host or inside the root (started by a daemon running there);
    /// `program` is then wrapped by [`Install::command`]'s set-up when the root exists, run
    /// as is when it does not (inside, the root's path means nothing).
    pub fn script_exec(&self, ns: Option<&str>, program: &str) -> String {
        let enter = ns.map_or(String::new(), |ns| format!("nsenter --net=/run/netns/{ns} -- "));
        match self {
            Install::Host => format!("exec {enter}{program}"),
            Install::Root(root) => format!(
                "if [ -d {root} ]; then\n  exec {enter}unshare --mount --propagation private -- /bin/sh -c '{ENTER_ROOT}' sh {root} {tmp} -- {program}\nelse\n  exec {enter}{program}\nfi",
                root = root.display(),
                tmp = std::env::temp_dir().display(),
            ),
        }
    }

    /// Where `bin` of this installation is, as a host path.
    pub fn which(&self, bin: &str) -> Option<PathBuf> {
        const DIRS: [&str; 4] = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"];
        match self {
            Install::Host => {
                let path = std::env::var_os("PATH").unwrap_or_default();
                std::env::split_paths(&path)
                    .chain(DIRS.map(PathBuf::from))
                    .map(|d| d.join(bin))
                    .find(|p| p.is_file())
            }
            Install::Root(root) => DIRS
                .iter()
                .map(|d| root.join(d.trim_start_matches('/')).join(bin))
                .find(|p| p.is_file()),
        }
    }

    /// The host tools a root needs (none for the host), for skip messages.
    pub fn missing_tools(&self) -> Vec<&'static str> {
        match self {
            Install::Host => Vec::new(),
            Install::Root(_) => ["unshare", "mount", "chroot"]
                .into_iter()
                .filter(|t| Install::Host.which(t).is_none())
                .collect(),
        }
    }

    /// The release of its slurmctld (`slurmctld -V`); panics when it does not run.
    pub fn release(&self) -> Release {
        let out = self
            .command(None, "slurmctld", &[])
            .arg("-V")
            .output()
            .unwrap_or_else(|e| panic!("slurmctld -V ({self}): {e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        text.split_whitespace()
            .last()
            .and_then(Release::parse)
            .unwrap_or_else(|| {
                panic!(
                    "slurmctld -V ({self}) printed {text:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
    }
}

impl std::fmt::Display for Install {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Install::Host => write!(f, "the host's Slurm"),
            Install::Root(root) => write!(f, "the Slurm in {}", root.display()),
        }
    }
}

/// The release the tests run, read once.
pub fn release() -> Release {
    static RELEASE: OnceLock<Release> = OnceLock::new();
    *RELEASE.get_or_init(|| install().release())
}
