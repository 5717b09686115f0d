//! A throwaway Slurm cluster in a temp dir, for end-to-end tests of the plugin and smartmigd:
//! the host's Slurm (Debian 12: 22.05), or the one in the root file system named by
//! `$SMARTMIG_SLURM_ROOT` (Debian 13's 24.11 from `scripts/debian-chroot.sh --suite trixie
//! --slurm --shared`; see [`install`]). `scripts/e2e.sh` runs the end-to-end tests on both.
//!
//! munged, slurmctld and slurmd run in the foreground as children of the test, each in
//! its own process group, on free loopback ports, with fake MIG devices made by mknod.
//! [`Cluster`]'s `Drop` stops them (and any job step they left) even when a test fails.
//! A failed test keeps its temp dir; set `SMARTMIG_E2E_KEEP=1` to keep every one, and
//! `SMARTMIG_E2E_SLURM_DEBUG=debug2` (any Slurm log level) for more of the daemons' logs.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

mod install;
pub use install::{install, release, Install, ROOT_ENV};

/// The smartmig.toml the tests start from: a static layout, snapshot in the cluster's
/// directory (`@DIR@`), and `[routing]` last so a test can append routing keys.
pub const SMARTMIG_TOML: &str = r#"version = 1
[gpu]
models = ["a100-40gb"]
[policy]
kind = "static"
static_layout = ["c2", "c7"]
[controller]
snapshot_path = "@DIR@/run/snapshot.json"
[routing]
on_error = "open"
"#;

/// The Debian plugin directory; tests put theirs first in `PluginDir`.
pub const SYSTEM_PLUGIN_DIR: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm";

/// The Slurm programs every cluster runs (of the installation under test).
const BINARIES: [&str; 6] = ["munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue"];

/// What multi-node clusters need besides [`BINARIES`].
pub const NETNS_BINARIES: [&str; 2] = ["ip", "nsenter"];

/// Why the e2e tests cannot run here (not root, Slurm missing), or None.
pub fn skip_reason() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_string));
    if euid.as_deref() != Some("0") {
        return Some(
            "not root (the harness starts munged, slurmctld and slurmd and makes device nodes)".into(),
        );
    }
    let missing: Vec<&str> = BINARIES
        .iter()
        .copied()
        .filter(|b| slurm_which(b).is_none())
        .collect();
    if !missing.is_empty() {
        let fix = match install() {
            Install::Host => "run scripts/deps.sh slurm".to_string(),
            Install::Root(r) => format!("{ROOT_ENV}={} has no Slurm installed", r.display()),
        };
        return Some(format!("Slurm binaries missing: {} ({fix})", missing.join(", ")));
    }
    let tools = install().missing_tools();
    if which("mknod").is_none() || !tools.is_empty() {
        return Some(format!("host tools missing: mknod {}", tools.join(" ")));
    }
    None
}

/// Where a host program is.
pub fn which(bin: &str) -> Option<PathBuf> {
    Install::Host.which(bin)
}

/// Where a program of the Slurm under test is (slurmdbd, mariadbd, ...), as a host path.
pub fn slurm_which(bin: &str) -> Option<PathBuf> {
    install().which(bin)
}

/// `entry` (`gpu:3g.20gb:1`) as the Slurm under test shows a job's `TresPer*`:
/// `gres:gpu:3g.20gb:1` (22.05) or `gres/gpu:3g.20gb:1` (from 23.02).
pub fn tres(entry: &str) -> String {
    format!("{}{entry}", release().gres_prefix())
}

/// Skips the calling test (prints a clear line and returns) when the harness cannot run.
#[macro_export]
macro_rules! skip_unless_slurm {
    () => {
        if let Some(why) = $crate::slurm::skip_reason() {
            eprintln!("skipped: {why}");
            return;
        }
    };
}

/// The plugin shared object: `$SMARTMIG_PLUGIN_SO` if set, else built here (fast when
/// up to date): for the host's Slurm with `cargo build -p smartmig-slurm-plugin --release`,
/// for a root's by [`build_for_root`].
pub fn plugin_so() -> PathBuf {
    static SO: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SO.get_or_init(|| {
        if let Some(p) = std::env::var_os("SMARTMIG_PLUGIN_SO") {
            return PathBuf::from(p);
        }
        match install() {
            Install::Host => host_plugin_so(),
            Install::Root(_) => {
                let so = build_for_root().join("libjob_submit_smartmig.so");
                assert!(so.is_file(), "{} missing after build", so.display());
                so
            }
        }
    })
    .clone()
}

/// The plugin built against the host's Slurm (`cargo build -p smartmig-slurm-plugin
/// --release`), whichever Slurm the tests run.
pub fn host_plugin_so() -> PathBuf {
    cargo_build(&["-p", "smartmig-slurm-plugin", "--release"]);
    let so = target_dir().join("release/libjob_submit_smartmig.so");
    assert!(so.is_file(), "{} missing after build", so.display());
    so
}

/// The cli_filter plugin (`cli-filter/`): `$SMARTMIG_CLI_FILTER_SO` if set, else built
/// here for the Slurm under test, like [`plugin_so`].
pub fn cli_filter_so() -> PathBuf {
    static SO: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SO.get_or_init(|| {
        if let Some(p) = std::env::var_os("SMARTMIG_CLI_FILTER_SO") {
            return PathBuf::from(p);
        }
        let so = match install() {
            Install::Host => {
                cargo_build(&["-p", "smartmig-cli-filter", "--release"]);
                target_dir().join("release/libcli_filter_smartmig.so")
            }
            Install::Root(_) => build_for_root().join("libcli_filter_smartmig.so"),
        };
        assert!(so.is_file(), "{} missing after build", so.display());
        so
    })
    .clone()
}

/// smartmigd built against a root's Slurm (`$SMARTMIG_SMARTMIGD` if set, else by
/// [`build_for_root`]); None for the host's Slurm, whose smartmigd is the test build's.
pub fn smartmigd_for_root() -> Option<PathBuf> {
    if *install() == Install::Host {
        return None;
    }
    Some(
        std::env::var_os("SMARTMIG_SMARTMIGD")
            .map_or_else(|| build_for_root().join("smartmigd"), PathBuf::from),
    )
}

/// Builds the plugin and smartmigd against the Slurm of `$SMARTMIG_SLURM_ROOT` (its
/// headers and libslurm) with scripts/slurm-build.sh, into their own target dir
/// (`target/slurm-<release>`, so the host's build is left alone), once per process.
/// Returns the directory holding them.
pub fn build_for_root() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let Install::Root(root) = install() else {
            panic!("build_for_root without {ROOT_ENV}");
        };
        let mut cmd = Command::new(workspace_root().join("scripts/slurm-build.sh"));
        cmd.arg(root.join("usr")).stderr(Stdio::inherit());
        let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(out.status.success(), "{cmd:?} failed (see its output above)");
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// The workspace's directory (the controller's tests live one level down).
fn workspace_root() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    dir.ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .unwrap_or(&dir)
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root().join("target"), PathBuf::from)
}

fn cargo_build(args: &[&str]) {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.arg("build").args(args).current_dir(workspace_root());
    let status = cmd.status().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        status.success(),
        "{cmd:?} failed (are libslurm-dev and libclang-dev installed?)"
    );
}

/// A GPU of the fake node: its MIG instances as (Slurm type, count).
#[derive(Debug, Clone)]
pub struct FakeGpu(pub Vec<(&'static str, u32)>);

/// What to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// The GPUs of the first node, each in its own layout.
    pub gpus: Vec<FakeGpu>,
    /// GPUs of further nodes. When not empty, every node's slurmd and slurmctld run in
    /// network namespaces the harness makes (a bridge in the controller's namespace,
    /// a veth per node, addresses 10.213.0.0/24 that exist only there); clients run in
    /// the controller's namespace. Not combinable with `accounting`.
    pub more_nodes: Vec<Vec<FakeGpu>>,
    /// smartmig.toml text placed beside slurm.conf (`@DIR@` becomes the cluster dir).
    pub smartmig_toml: String,
    /// `JobSubmitPlugins` value (empty: none).
    pub job_submit_plugins: String,
    /// Extra files written beside slurm.conf before the daemons start (name, text).
    pub etc_files: Vec<(String, String)>,
    /// Extra slurm.conf lines.
    pub extra_conf: String,
    /// Run MariaDB and slurmdbd too, so that `sacct` works.
    pub accounting: bool,
    /// Dynamic nodes: no `NodeName=` lines; each slurmd registers itself with `-Z --conf`
    /// (its node definition, kept in `etc/dynamic-<node>.conf`), the partition takes
    /// `Nodes=ALL`.
    pub dynamic_nodes: bool,
}

impl Options {
    /// Two nodes with a mix of MIG types, the plugin loaded, no accounting: what most
    /// end-to-end tests start from.
    pub fn two_nodes() -> Options {
        Options {
            gpus: vec![
                FakeGpu(vec![("4g.20gb", 1), ("3g.20gb", 1)]),
                FakeGpu(vec![("2g.10gb", 1), ("1g.5gb", 2), ("3g.20gb", 1)]),
            ],
            more_nodes: Vec::new(),
            smartmig_toml: SMARTMIG_TOML.to_string(),
            job_submit_plugins: "smartmig".into(),
            etc_files: Vec::new(),
            extra_conf: String::new(),
            accounting: false,
            dynamic_nodes: false,
        }
    }
}

/// A running throwaway cluster.
pub struct Cluster {
    /// Its temp dir (config, state, logs, sockets, devices).
    pub dir: PathBuf,
    /// slurm.conf.
    pub conf: PathBuf,
    /// The first node's name.
    pub node: String,
    /// Every node's name.
    pub nodes: Vec<String>,
    /// Each node's address.
    addrs: Vec<String>,
    /// The controller's address.
    ctl_addr: String,
    /// Network namespaces made for this cluster: the controller's first, then the nodes'.
    netns: Vec<String>,
    dbd_port: u16,
    children: Vec<(String, Child)>,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// Ports handed out by this test process, so no two daemons of it ever share one.
static NEXT_PORT: AtomicU32 = AtomicU32::new(0);

/// A loopback port no other daemon of this process was given and nothing listens on.
///
/// Asking the kernel for port 0 twice can return the same port (two clusters, or
/// slurmctld's and slurmd's of one cluster, then collide), and ports in the ephemeral
/// range may be taken meanwhile by any client's outgoing connection. So ports come from a
/// counter below the ephemeral range (32768 up on Linux), started at an offset from the
/// process id so the 22.05 and 24.11 test runs of CI do not walk the same ports.
fn free_port() -> u16 {
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let _ = NEXT_PORT.compare_exchange(
        0,
        (std::process::id() * 97) % SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = (LOW + NEXT_PORT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {LOW}..{}", LOW + SPAN)
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Cluster {
    /// Starts munged, slurmctld and slurmd; waits until the node is idle.
    pub fn start(opts: &Options) -> Cluster {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("smartmig-e2e-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["etc", "state", "spool", "log", "run", "munge", "dev", "plugins"] {
            std::fs::create_dir_all(dir.join(sub)).expect("create cluster dirs");
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(dir.join("munge"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let count = 1 + opts.more_nodes.len();
        let nodes: Vec<String> = (0..count).map(|i| format!("smnode{n}x{i}")).collect();
        let multi = count > 1;
        assert!(
            !(multi && opts.accounting),
            "accounting runs on the host's loopback only"
        );
        let mut cluster = Cluster {
            conf: dir.join("etc/slurm.conf"),
            dir,
            node: nodes[0].clone(),
            addrs: (0..count)
                .map(|i| {
                    if multi {
                        format!("10.213.0.{}", 10 + i)
                    } else {
                        "127.0.0.1".into()
                    }
                })
                .collect(),
            ctl_addr: if multi {
                "10.213.0.1".into()
            } else {
                "127.0.0.1".into()
            },
            nodes,
            netns: Vec::new(),
            dbd_port: free_port(),
            children: Vec::new(),
        };
        if multi {
            cluster.make_network(n);
        }
        cluster.write_config(opts);
        cluster.start_munged();
        if opts.accounting {
            cluster.start_mariadb();
            cluster.start_slurmdbd();
        }
        cluster.start_slurmctld(true);
        for i in 0..cluster.nodes.len() {
            cluster.start_slurmd(i);
        }
        cluster.wait_node_idle();
        cluster
    }

    /// Namespaces: the controller's with a bridge at 10.213.0.1, one per node with a
    /// veth into that bridge. Everything is deleted in Drop.
    fn make_network(&mut self, n: u32) {
        let tag = format!("sm{}x{n}", std::process::id());
        let ctl = format!("{tag}c");
        let ip = |args: &[&str]| run_ok(Command::new("ip").args(args));
        ip(&["netns", "add", &ctl]);
        self.netns.push(ctl.clone());
        ip(&["-n", &ctl, "link", "set", "lo", "up"]);
        ip(&["-n", &ctl, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &ctl, "addr", "add", "10.213.0.1/24", "dev", "br0"]);
        ip(&["-n", &ctl, "link", "set", "br0", "up"]);
        for i in 0..self.nodes.len() {
            let ns = format!("{tag}n{i}");
            ip(&["netns", "add", &ns]);
            self.netns.push(ns.clone());
            let v = format!("v{i}");
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            ip(&[
                "-n", &ctl, "link", "add", &v, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            ip(&["-n", &ctl, "link", "set", &v, "master", "br0"]);
            ip(&["-n", &ctl, "link", "set", &v, "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", self.addrs[i]),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        }
    }

    /// `bin` of the Slurm under test (or a program that talks to it) run in network
    /// namespace `ns` (the host's when None), seeing `binds` (see [`Install::command`]).
    /// `nsenter` switches only the network namespace; `ip netns exec` would also remount
    /// /sys, hiding the cgroup filesystem that slurmd needs.
    fn in_ns(ns: Option<&String>, bin: &str, binds: &[&Path]) -> Command {
        install().command(ns.map(String::as_str), bin, binds)
    }

    fn ctl_ns(&self) -> Option<&String> {
        self.netns.first()
    }

    /// Where a dynamic node's definition (its slurmd's `--conf`) is kept.
    pub fn dynamic_conf(&self, i: usize) -> PathBuf {
        self.path(&format!("etc/dynamic-{}.conf", self.nodes[i]))
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    fn write_config(&self, opts: &Options) {
        let d = &self.dir;
        // Fake MIG devices: character devices with /dev/null's numbers, one per instance.
        let mut gres_conf = String::new();
        let mut all_types: BTreeMap<&str, u32> = BTreeMap::new();
        let mut node_lines = String::new();
        let mut dev = 0;
        let layouts: Vec<&Vec<FakeGpu>> = std::iter::once(&opts.gpus).chain(&opts.more_nodes).collect();
        let host = hostname();
        for (i, gpus) in layouts.iter().enumerate() {
            let node = &self.nodes[i];
            let mut node_gres: BTreeMap<&str, u32> = BTreeMap::new();
            let mut node_gres_conf = String::new();
            for gpu in gpus.iter() {
                for &(ty, count) in &gpu.0 {
                    for _ in 0..count {
                        let p = d.join(format!("dev/nvidia{dev}"));
                        run_ok(Command::new("mknod").arg(&p).args(["c", "1", "3"]));
                        writeln!(
                            node_gres_conf,
                            "NodeName={node} Name=gpu Type={ty} File={}",
                            p.display()
                        )
                        .unwrap();
                        *node_gres.entry(ty).or_default() += 1;
                        *all_types.entry(ty).or_default() += 1;
                        dev += 1;
                    }
                }
            }
            // One gres file per node, included from gres.conf: each node's agent owns its own.
            let own = d.join(format!("etc/gres-{node}.conf"));
            std::fs::write(&own, node_gres_conf).unwrap();
            writeln!(gres_conf, "Include {}", own.display()).unwrap();
            let gres: Vec<String> = node_gres.iter().map(|(t, c)| format!("gpu:{t}:{c}")).collect();
            let definition = format!(
                "NodeHostname={host} NodeAddr={} CPUs=16 RealMemory=4000 Gres={}",
                self.addrs[i],
                gres.join(",")
            );
            if opts.dynamic_nodes {
                std::fs::write(self.dynamic_conf(i), definition).unwrap();
            } else {
                writeln!(node_lines, "NodeName={node} {definition}").unwrap();
            }
        }
        if opts.dynamic_nodes {
            node_lines = "# dynamic nodes only (slurmd -Z)\n".into();
        }
        std::fs::write(d.join("etc/gres.conf"), gres_conf).unwrap();
        // Node definitions in an included file, as smartmigd's central role expects them,
        // in a directory of its own (a test can give it a file system of its own).
        std::fs::create_dir_all(self.nodes_include().parent().unwrap()).unwrap();
        std::fs::write(self.nodes_include(), &node_lines).unwrap();
        // Tests without the plugin (the controller's) need not build it.
        if !opts.job_submit_plugins.is_empty() {
            std::fs::copy(plugin_so(), d.join("plugins/job_submit_smartmig.so")).expect("copy plugin");
        }
        let (ctl_port, d_port) = (free_port(), free_port());
        let conf = format!(
            "ClusterName=smartmig{n}\n\
             SlurmctldHost={host}({ctl_addr})\n\
             SlurmctldPort={ctl_port}\nSlurmdPort={d_port}\n\
             SlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nCredType=cred/munge\n\
             AuthInfo=socket={munge}\n\
             StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool/%n\n\
             SlurmctldPidFile={d}/run/slurmctld.pid\nSlurmdPidFile={d}/run/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd-%n.log\n\
             SlurmctldDebug={debug}\nSlurmdDebug={debug}\n\
             PluginDir={d}/plugins:{SYSTEM_PLUGIN_DIR}\n\
             {plugins}\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n{accounting}\
             MailProg=/bin/true\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             GresTypes=gpu\nReturnToService=2\nSlurmdParameters=config_overrides\n\
             SchedulerType=sched/backfill\nMinJobAge=600\n\
             Include {include}\n{max_nodes}\
             PartitionName=gpu Nodes={nodes} Default=YES MaxTime=INFINITE State=UP\n\
             {extra}\n",
            n = self.node.trim_start_matches("smnode").replace('x', "n"),
            ctl_addr = self.ctl_addr,
            munge = self.munge_socket().display(),
            d = d.display(),
            plugins = if opts.job_submit_plugins.is_empty() {
                String::new()
            } else {
                format!("JobSubmitPlugins={}\n", opts.job_submit_plugins)
            },
            nodes = if opts.dynamic_nodes {
                "ALL".to_string()
            } else {
                self.nodes.join(",")
            },
            max_nodes = if opts.dynamic_nodes {
                format!("MaxNodeCount={}\n", self.nodes.len())
            } else {
                String::new()
            },
            include = self.nodes_include().display(),
            extra = opts.extra_conf,
            debug = std::env::var("SMARTMIG_E2E_SLURM_DEBUG").unwrap_or_else(|_| "info".into()),
            accounting = if opts.accounting {
                let types: Vec<String> = all_types.keys().map(|t| format!("gres/gpu:{t}")).collect();
                format!(
                    "AccountingStorageType=accounting_storage/slurmdbd\n\
                     AccountingStorageHost=127.0.0.1\nAccountingStoragePort={dbd_port}\n\
                     AccountingStoragePass=socket={munge}\n\
                     AccountingStorageTRES=gres/gpu,{types}\nAccountingStoreFlags=job_comment\n",
                    dbd_port = self.dbd_port,
                    munge = self.munge_socket().display(),
                    types = types.join(","),
                )
            } else {
                "AccountingStorageType=accounting_storage/none\n".to_string()
            },
        );
        std::fs::write(&self.conf, conf).unwrap();
        if release().at_least(23, 2) {
            // Later releases' slurmd stops without a cgroup plugin unless told none is used
            // (proctrack/linuxproc and task/none need none).
            std::fs::write(d.join("etc/cgroup.conf"), "CgroupPlugin=disabled\n").unwrap();
        }
        self.write_smartmig_toml(&opts.smartmig_toml);
        for (name, text) in &opts.etc_files {
            std::fs::write(d.join("etc").join(name), text).unwrap();
        }
    }

    /// The file of node definitions that slurm.conf includes.
    pub fn nodes_include(&self) -> PathBuf {
        self.path("etc/slurm-nodes/nodes.conf")
    }

    /// Replaces smartmig.toml beside slurm.conf (`@DIR@` becomes the cluster dir).
    pub fn write_smartmig_toml(&self, text: &str) {
        let text = text.replace("@DIR@", &self.dir.display().to_string());
        std::fs::write(self.path("etc/smartmig.toml"), text).unwrap();
    }

    /// A script that restarts slurmctld the way an admin's `systemctl restart` would:
    /// stop it (SIGTERM, wait), start it again without `-c` (state kept) in its network
    /// namespace. The new slurmctld carries our SLURM_CONF, so `Drop` stops it too.
    pub fn restart_slurmctld_script(&self) -> PathBuf {
        let path = self.path("etc/restart-slurmctld.sh");
        let exec = install().script_exec(
            self.ctl_ns().map(String::as_str),
            &format!("slurmctld -f {}", self.conf.display()),
        );
        let text = format!(
            "#!/bin/sh\n\
             pid=$(cat {d}/run/slurmctld.pid 2>/dev/null)\n\
             if [ -n \"$pid\" ]; then\n\
               kill -TERM \"$pid\" 2>/dev/null\n\
               # A zombie (the test has not reaped it yet) counts as gone.\n\
               while [ -d /proc/$pid ] && ! grep -q '^State:.*Z' /proc/$pid/status 2>/dev/null; do sleep 0.1; done\n\
             fi\n\
             export SLURM_CONF={conf}\n{exec}\n",
            d = self.dir.display(),
            conf = self.conf.display(),
        );
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// Scripts that stop and start node `i`'s slurmd the way a node agent's
    /// `slurmd_stop`/`slurmd_start` commands would on a real node (`systemctl stop
    /// slurmd`). The started slurmd carries our SLURM_CONF, so `Drop` stops it too.
    pub fn slurmd_scripts(&self, i: usize) -> (PathBuf, PathBuf) {
        let node = &self.nodes[i];
        let pidfile = self.path(&format!("run/slurmd-{node}.pid"));
        let stop = self.path(&format!("etc/stop-slurmd-{node}.sh"));
        let start = self.path(&format!("etc/start-slurmd-{node}.sh"));
        let stop_text = format!(
            "#!/bin/sh\n\
             pid=$(cat {pid} 2>/dev/null)\n\
             [ -n \"$pid\" ] || exit 0\n\
             kill -TERM \"$pid\" 2>/dev/null\n\
             while [ -d /proc/$pid ] && ! grep -q '^State:.*Z' /proc/$pid/status 2>/dev/null; do sleep 0.1; done\n",
            pid = pidfile.display()
        );
        let dynamic = self.dynamic_conf(i);
        let exec = install().script_exec(
            self.netns.get(i + 1).map(String::as_str),
            &if dynamic.exists() {
                format!(
                    "slurmd -f {} -N {node} -Z --conf \"$(cat {})\"",
                    self.conf.display(),
                    dynamic.display()
                )
            } else {
                format!("slurmd -f {} -N {node}", self.conf.display())
            },
        );
        let start_text = format!(
            "#!/bin/sh\nexport SLURM_CONF={conf}\n{exec}\n",
            conf = self.conf.display()
        );
        for (p, t) in [(&stop, stop_text), (&start, start_text)] {
            std::fs::write(p, t).unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        (stop, start)
    }

    /// A command run in the controller's network namespace (the host's for one node),
    /// beside the Slurm under test (chrooted with it, seeing `binds` too, for a root's).
    pub fn in_ctl_ns(&self, bin: &str, binds: &[&Path]) -> Command {
        let mut c = Self::in_ns(self.ctl_ns(), bin, binds);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// A command run in node `i`'s network namespace (the host's for one node), beside
    /// the Slurm under test, as [`Cluster::in_ctl_ns`].
    pub fn in_node_ns(&self, i: usize, bin: &str, binds: &[&Path]) -> Command {
        let mut c = Self::in_ns(self.netns.get(i + 1), bin, binds);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// Starts a daemon of the test (logs in `log/<name>.out`); `Drop` stops it.
    pub fn spawn_daemon(&mut self, name: &str, cmd: &mut Command) {
        self.spawn(name, cmd);
    }

    /// Stops daemon `name` of the test (its process group: TERM, KILL after 5 s).
    pub fn stop_daemon(&mut self, name: &str) {
        if let Some(i) = self.children.iter().position(|(n, _)| n == name) {
            stop_child(self.children.remove(i).1);
        }
    }

    /// Where the snapshot lives in these tests (point `controller.snapshot_path` here).
    pub fn snapshot_path(&self) -> PathBuf {
        self.path("run/snapshot.json")
    }

    fn munge_socket(&self) -> PathBuf {
        self.path("munge/munge.socket.2")
    }

    fn spawn(&mut self, name: &str, cmd: &mut Command) {
        let log = std::fs::File::create(self.path(&format!("log/{name}.out"))).unwrap();
        let err = log.try_clone().unwrap();
        let child = cmd
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            // Own process group, so Drop can stop the daemon and whatever it forked.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.children.push((name.to_string(), child));
    }

    fn start_munged(&mut self) {
        let key = self.path("munge/munge.key");
        let mut bytes = vec![0u8; 1024];
        let mut f = std::fs::File::open("/dev/urandom").unwrap();
        std::io::Read::read_exact(&mut f, &mut bytes).unwrap();
        std::fs::write(&key, bytes).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        let (sock, log, pid, seed) = (
            self.munge_socket(),
            self.path("munge/munged.log"),
            self.path("munge/munged.pid"),
            self.path("munge/munged.seed"),
        );
        let mut cmd = Self::in_ns(None, "munged", &[]);
        cmd.arg("-F")
            .arg("-f")
            .arg(format!("--socket={}", sock.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--log-file={}", log.display()))
            .arg(format!("--pid-file={}", pid.display()))
            .arg(format!("--seed-file={}", seed.display()));
        self.spawn("munged", &mut cmd);
        self.wait_for("munged socket", Duration::from_secs(10), |c| {
            c.munge_socket().exists()
        });
    }

    fn mysql_socket(&self) -> PathBuf {
        self.path("db/mysql.sock")
    }

    /// MariaDB in the cluster dir, socket only (`--skip-networking`).
    fn start_mariadb(&mut self) {
        let data = self.path("db/data");
        std::fs::create_dir_all(&data).unwrap();
        run_ok(
            Self::in_ns(None, "mariadb-install-db", &[])
                .args([
                    "--no-defaults",
                    "--user=root",
                    "--auth-root-authentication-method=socket",
                ])
                .arg(format!("--datadir={}", data.display()))
                .stdout(Stdio::null()),
        );
        let mut cmd = Self::in_ns(None, "mariadbd", &[]);
        cmd.args(["--no-defaults", "--user=root", "--skip-networking"])
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", self.mysql_socket().display()))
            .arg(format!("--pid-file={}", self.path("db/mariadb.pid").display()))
            .arg(format!("--log-error={}", self.path("log/mariadb.log").display()));
        self.spawn("mariadbd", &mut cmd);
        self.wait_for("the MariaDB socket", Duration::from_secs(30), |c| {
            c.mysql_socket().exists()
        });
    }

    /// slurmdbd reads slurmdbd.conf beside $SLURM_CONF; it must be mode 600.
    fn start_slurmdbd(&mut self) {
        let conf = self.path("etc/slurmdbd.conf");
        let text = format!(
            "AuthType=auth/munge\nAuthInfo=socket={munge}\n\
             DbdHost={host}\nDbdAddr=127.0.0.1\nDbdPort={port}\nSlurmUser=root\n\
             StorageType=accounting_storage/mysql\nStorageHost=localhost\nStorageUser=root\n\
             StorageLoc=slurm_acct_db\nPidFile={pid}\nLogFile={log}\nDebugLevel=info\n",
            munge = self.munge_socket().display(),
            host = hostname(),
            port = self.dbd_port,
            pid = self.path("run/slurmdbd.pid").display(),
            log = self.path("log/slurmdbd.log").display(),
        );
        std::fs::write(&conf, text).unwrap();
        std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o600)).unwrap();
        let sock = self.mysql_socket();
        let mut cmd = Self::in_ns(None, "slurmdbd", &[]);
        // 22.05's slurmdbd takes no socket path: the MySQL client library reads this.
        cmd.arg("-D").env("MYSQL_UNIX_PORT", &sock);
        self.spawn("slurmdbd", &mut cmd);
        let port = self.dbd_port;
        self.wait_for("slurmdbd to listen", Duration::from_secs(30), move |_| {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
    }

    /// Runs sacct.
    pub fn sacct(&self, args: &[&str]) -> Output {
        self.client("sacct", args)
    }

    fn start_slurmctld(&mut self, clean: bool) {
        let mut cmd = Self::in_ns(self.ctl_ns(), "slurmctld", &[]);
        cmd.arg("-D").arg("-f").arg(&self.conf);
        if clean {
            cmd.args(["-c", "-i"]);
        }
        self.spawn("slurmctld", &mut cmd);
        self.wait_for("slurmctld to answer", Duration::from_secs(20), |c| {
            c.scontrol(&["ping"]).status.success()
        });
    }

    fn start_slurmd(&mut self, i: usize) {
        let ns = self.netns.get(i + 1).cloned();
        let mut cmd = Self::in_ns(ns.as_ref(), "slurmd", &[]);
        cmd.arg("-D")
            .arg("-f")
            .arg(&self.conf)
            .arg("-N")
            .arg(&self.nodes[i]);
        if let Ok(definition) = std::fs::read_to_string(self.dynamic_conf(i)) {
            cmd.arg("-Z").arg("--conf").arg(definition.trim());
        }
        std::fs::create_dir_all(self.path(&format!("spool/{}", self.nodes[i]))).unwrap();
        let name = format!("slurmd-{}", self.nodes[i]);
        self.spawn(&name, &mut cmd);
    }

    fn wait_node_idle(&self) {
        self.wait_for("the nodes to be idle", Duration::from_secs(30), |c| {
            c.nodes.iter().all(|node| {
                let state = c.node_state(node);
                if state.contains("INVAL") || state.contains("DRAIN") || state.contains("DOWN") {
                    let _ = c.scontrol(&["update", &format!("nodename={node}"), "state=resume"]);
                }
                state.starts_with("IDLE")
            })
        });
    }

    /// A node's state word (`IDLE`, `MIXED`, `DOWN*+DRAIN`, ...).
    pub fn node_state(&self, node: &str) -> String {
        let out = self.scontrol(&["show", "node", node, "-o"]);
        fields(&String::from_utf8_lossy(&out.stdout))
            .get("State")
            .cloned()
            .unwrap_or_default()
    }

    /// Polls `ready` every 100 ms; panics (with the logs' tails) after `limit`.
    pub fn wait_for(&self, what: &str, limit: Duration, ready: impl Fn(&Cluster) -> bool) {
        let start = Instant::now();
        while start.elapsed() < limit {
            if ready(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting for {what}\n{}", self.log_tails());
    }

    /// Waits until slurmctld's log holds `text` at least `times` times: how a test knows
    /// that the plugin's watcher thread has read a changed smartmig.toml or snapshot.
    pub fn wait_ctld_log(&self, text: &str, times: usize) {
        self.wait_for(
            &format!("{times}× {text:?} in slurmctld's log"),
            Duration::from_secs(30),
            |c| c.ctld_log().matches(text).count() >= times,
        );
    }

    /// Writes smartmig.toml and waits until the plugin has read it and logged `then`
    /// (`reloaded`, or a refusal of the file) once more than before.
    pub fn write_smartmig_toml_and_wait(&self, text: &str, then: &str) {
        let seen = self.ctld_log().matches(then).count();
        self.write_smartmig_toml(text);
        self.wait_ctld_log(then, seen + 1);
    }

    /// The last lines of each daemon's log, for failure messages.
    pub fn log_tails(&self) -> String {
        let mut s = String::new();
        let slurmd_logs: Vec<String> = self.nodes.iter().map(|n| format!("log/slurmd-{n}.log")).collect();
        let others = ["log/slurmdbd.log", "log/mariadb.log", "log/munged.out"];
        let all = ["log/slurmctld.log"]
            .into_iter()
            .chain(slurmd_logs.iter().map(String::as_str))
            .chain(others);
        for f in all {
            let text = std::fs::read_to_string(self.path(f)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            let _ = writeln!(s, "--- {f} ---\n{tail}");
        }
        s
    }

    /// slurmctld's log so far.
    pub fn ctld_log(&self) -> String {
        std::fs::read_to_string(self.path("log/slurmctld.log")).unwrap_or_default()
    }

    /// Runs a Slurm client (squeue, scancel, ...) in the controller's namespace.
    pub fn client(&self, bin: &str, args: &[&str]) -> Output {
        self.client_as(None, bin, args)
    }

    /// Runs a Slurm client as user `uid` (its own group, no others; root when None), as an
    /// ordinary user of the cluster runs it: Slurm checks what that user may do.
    pub fn client_as(&self, uid: Option<u32>, bin: &str, args: &[&str]) -> Output {
        let mut cmd = match uid {
            None => Self::in_ns(self.ctl_ns(), bin, &[]),
            Some(uid) => {
                let mut c = Self::in_ns(self.ctl_ns(), "setpriv", &[]);
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={uid}"))
                    .args(["--clear-groups", bin]);
                c
            }
        };
        cmd.args(args)
            .env("SLURM_CONF", &self.conf)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("{bin}: {e}"))
    }

    /// Runs a Slurm client; returns its stdout, panicking (with its stderr) if it fails.
    pub fn client_output(&self, bin: &str, args: &[&str]) -> String {
        let out = self.client(bin, args);
        assert!(
            out.status.success(),
            "{bin} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs scontrol.
    pub fn scontrol(&self, args: &[&str]) -> Output {
        self.client("scontrol", args)
    }

    /// Runs srun, or salloc, with `args`.
    pub fn run_client(&self, bin: &str, args: &[&str]) -> Output {
        self.client(bin, args)
    }

    /// Puts the cli_filter plugin in the cluster's PluginDir and names it in slurm.conf
    /// (`CliFilterPlugins=smartmig`): the client commands load it at their next start.
    pub fn install_cli_filter(&self) {
        std::fs::copy(cli_filter_so(), self.path("plugins/cli_filter_smartmig.so")).expect("copy cli_filter");
        let mut conf = std::fs::read_to_string(&self.conf).unwrap();
        conf.push_str("CliFilterPlugins=smartmig\n");
        std::fs::write(&self.conf, conf).unwrap();
    }

    /// Runs sbatch with `args` (add `--wrap`); returns the job id or the stderr.
    pub fn sbatch(&self, args: &[&str]) -> Result<(u32, String), String> {
        self.sbatch_as(None, args)
    }

    /// Runs sbatch as user `uid` (root when None), as [`Cluster::sbatch`].
    pub fn sbatch_as(&self, uid: Option<u32>, args: &[&str]) -> Result<(u32, String), String> {
        let mut all = vec!["--parsable", "--mem=10", "-o", "/dev/null"];
        all.extend_from_slice(args);
        let out = self.client_as(uid, "sbatch", &all);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(stderr);
        }
        let id = stdout
            .trim()
            .split(';')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("sbatch printed no job id: {stdout:?} {stderr:?}"));
        Ok((id, stderr))
    }

    /// `scontrol show job -o ID` as key → value.
    pub fn job(&self, id: u32) -> BTreeMap<String, String> {
        let out = self.scontrol(&["show", "job", "-o", &id.to_string()]);
        assert!(
            out.status.success(),
            "show job {id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        fields(&String::from_utf8_lossy(&out.stdout))
    }

    /// Job `id`'s four tres fields as `scontrol show job` shows them (in `TresField`
    /// order: per node, job, task, socket), unset ones None.
    pub fn job_tres(&self, id: u32) -> [Option<String>; 4] {
        let job = self.job(id);
        ["TresPerNode", "TresPerJob", "TresPerTask", "TresPerSocket"]
            .map(|k| job.get(k).filter(|v| !v.is_empty() && *v != "(null)").cloned())
    }

    /// Waits until job `id` is in one of `states`; returns the state.
    pub fn wait_job(&self, id: u32, states: &[&str], limit: Duration) -> String {
        let start = Instant::now();
        loop {
            let s = self.job(id).get("JobState").cloned().unwrap_or_default();
            if states.contains(&s.as_str()) {
                return s;
            }
            if start.elapsed() > limit {
                panic!(
                    "job {id} is {s}, not one of {states:?}: {:?}\n{}",
                    self.job(id),
                    self.log_tails()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `scontrol reconfigure`, then waits until slurmctld answers again.
    pub fn reconfigure(&self) {
        let out = self.scontrol(&["reconfigure"]);
        assert!(
            out.status.success(),
            "reconfigure: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.wait_for("slurmctld after reconfigure", Duration::from_secs(20), |c| {
            c.scontrol(&["ping"]).status.success()
        });
    }

    fn stop_all(&mut self) {
        // Reverse start order: slurmd, slurmctld, munged.
        while let Some((_, child)) = self.children.pop() {
            stop_child(child);
        }
        // Job steps (slurmstepd and the jobs) leave slurmd's process group. The jobs carry
        // our SLURM_CONF in their environment; 24.11's slurmstepd clears its environment
        // but keeps slurmd's log, in our directory (seen from the host under the root file
        // system's path), open.
        let marker = format!("SLURM_CONF={}", self.conf.display());
        let ours = format!("{}/", self.dir.display());
        let holds_ours = |proc: &Path| {
            std::fs::read_dir(proc.join("fd")).is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    std::fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy().contains(&ours))
                })
            })
        };
        if let Ok(procs) = std::fs::read_dir("/proc") {
            for p in procs.flatten() {
                let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                    continue;
                };
                if pid == std::process::id() {
                    continue;
                }
                let env = std::fs::read(p.path().join("environ")).unwrap_or_default();
                if env.split(|&b| b == 0).any(|kv| kv == marker.as_bytes()) || holds_ours(&p.path()) {
                    kill(&["-KILL", &pid.to_string()]);
                }
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_all();
        // Deleting a namespace deletes its veth ends and bridge with it.
        for ns in self.netns.drain(..) {
            let _ = Command::new("ip")
                .args(["netns", "del", &ns])
                .stderr(Stdio::null())
                .status();
        }
        // A failed test's cluster is kept: its whole logs, not only their tails, are
        // what an intermittent failure can be read from.
        let failed = std::thread::panicking();
        if failed {
            eprintln!("cluster dir (kept): {}\n{}", self.dir.display(), self.log_tails());
        }
        if !failed && std::env::var_os("SMARTMIG_E2E_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Stops a child's process group: TERM, then KILL after 5 s.
fn stop_child(mut child: Child) {
    let pgid = child.id();
    kill(&["-TERM", "--", &format!("-{pgid}")]);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    kill(&["-KILL", "--", &format!("-{pgid}")]);
    let _ = child.wait();
}

/// Signals with kill(1); a target that is already gone is fine.
fn kill(args: &[&str]) {
    let _ = Command::new("kill").args(args).stderr(Stdio::null()).status();
}

fn hostname() -> String {
    let out = Command::new("hostname").arg("-s").output().expect("hostname");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Parses `key=value` words of `scontrol show ... -o`; words without `=` continue the
/// previous value (values with spaces).
pub fn fields(text: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut last: Option<String> = None;
    for word in text.split_whitespace() {
        match word.split_once('=') {
            Some((k, v))
                if !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') =>
            {
                m.insert(k.to_string(), v.to_string());
                last = Some(k.to_string());
            }
            _ => {
                if let Some(k) = &last {
                    if let Some(v) = m.get_mut(k) {
                        v.push(' ');
                        v.push_str(word);
                    }
                }
            }
        }
    }
    m
}

/// Slurm's `[days-]hours:minutes:seconds` (or `UNLIMITED`) → minutes (None: unlimited).
pub fn minutes(limit: &str) -> Option<u32> {
    if limit == "UNLIMITED" || limit == "Partition_Limit" {
        return None;
    }
    let (days, rest) = match limit.split_once('-') {
        Some((d, r)) => (d.parse::<u32>().ok()?, r),
        None => (0, limit),
    };
    let parts: Vec<u32> = rest.split(':').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    let (h, m, s) = match parts.as_slice() {
        [h, m, s] => (*h, *m, *s),
        [m, s] => (0, *m, *s),
        _ => return None,
    };
    Some(days * 1440 + h * 60 + m + u32::from(s > 0))
}
