//! Shared set-up of the central role's end-to-end tests: a real Slurm (the host's 22.05, or
//! the release in `$SMARTMIG_SLURM_ROOT`, e.g. 24.11) with two slurmd nodes in network
//! namespaces (the harness in tests/slurm/mod.rs), a `smartmigd node` agent per node on a
//! simulated A100 using the Slurm-node-record channel, and `smartmigd central --once` in the
//! controller's namespace; plus the checks every fault test makes afterwards (valid
//! layouts, Slurm agrees with the devices, no job lost). For a root's Slurm, smartmigd is
//! built against that Slurm and runs beside it, chrooted ([`bin`]).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::backends::{Kind, TestGpus};
use crate::slurm::{self, Cluster, FakeGpu, Options};
use smartmig_core::config::{Config, Mode};
use smartmig_core::mig::{Catalogue, Driver, GpuModel};
use smartmig_gpu::simulated::Simulated;
use smartmigd::central::decide::write_preferring;

/// The daemon under test: this test build's for the host's Slurm; for a root's, one built
/// against that Slurm (`slurm::smartmigd_for_root`).
pub fn bin() -> String {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        slurm::smartmigd_for_root().map_or_else(
            || env!("CARGO_BIN_EXE_smartmigd").to_string(),
            |p| p.display().to_string(),
        )
    })
    .clone()
}

/// What smartmigd needs to see beside a root's Slurm: ONNX Runtime from this machine's cache
/// (fetched here when missing; the root has no Python to fetch it), bound into the root and
/// named by `ORT_DYLIB_PATH`. Nothing for the host's Slurm, or when it cannot be fetched
/// (the central role then falls back as it would on a host without it).
fn onnx_runtime() -> Option<&'static Path> {
    static LIB: OnceLock<Option<PathBuf>> = OnceLock::new();
    if *slurm::install() == slurm::Install::Host {
        return None;
    }
    LIB.get_or_init(|| smartmig_policy::fetch_runtime().ok())
        .as_deref()
}

/// A `smartmigd` command (arguments to add) in the controller's namespace (`node`: None)
/// or node `i`'s.
pub fn smartmigd(c: &Cluster, node: Option<usize>) -> Command {
    smartmigd_with(c, node, &[])
}

/// [`smartmigd`] seeing `extra` host directories too (under a root's Slurm).
pub fn smartmigd_with(c: &Cluster, node: Option<usize>, extra: &[PathBuf]) -> Command {
    let lib = onnx_runtime();
    let binds: Vec<&Path> = lib
        .and_then(Path::parent)
        .into_iter()
        .chain(extra.iter().map(PathBuf::as_path))
        .collect();
    let bin = bin();
    let mut cmd = match node {
        None => c.in_ctl_ns(&bin, &binds),
        Some(i) => c.in_node_ns(i, &bin, &binds),
    };
    if let Some(lib) = lib {
        cmd.env("ORT_DYLIB_PATH", lib);
    }
    cmd
}
/// Configuration c2 of the A100-40GB.
pub const C2: &str = "4g.20gb@0 3g.20gb@4";
/// Configuration c5 (two 3g).
pub const C5: &str = "3g.20gb@0 3g.20gb@4";
/// Node 0's two GPUs at the start, both in c2 (as [`sim_layout`] shows them).
pub const NODE0_C2: &str = "4g.20gb@0 3g.20gb@4 | 4g.20gb@0 3g.20gb@4";
/// Node 0 after a move to c5: GPU 0 holds the running job's 3g.20gb@4 (Slurm IDX 0) and
/// stays in c2 (c5 would put its new 3g.20gb@0 at that index); GPU 1 goes to c5 (its
/// 3g come after the job's: the job's index holds, and the node keeps 4 instances).
pub const NODE0_C5: &str = "4g.20gb@0 3g.20gb@4 | 3g.20gb@0 3g.20gb@4";
/// Configuration c1 (one 7g).
pub const C1: &str = "7g.40gb@0";

/// Why the namespace tests cannot run here, or None.
pub fn netns_skip_reason() -> Option<String> {
    if let Some(why) = slurm::skip_reason() {
        return Some(why);
    }
    if Command::new("nsenter").arg("--version").output().is_err() {
        return Some("nsenter missing".into());
    }
    None
}

/// Skips the calling test when the two-node harness cannot run.
#[macro_export]
macro_rules! skip_unless_netns {
    () => {
        if let Some(why) = $crate::common::netns_skip_reason() {
            eprintln!("skipped: {why}");
            return;
        }
    };
}

/// Node 0 with two GPUs in c2 (4g.20gb + 3g.20gb), node 1 in c1 (7g.40gb); no plugin, no
/// accounting.
pub fn two_nodes() -> Options {
    let c2 = || FakeGpu(vec![("4g.20gb", 1), ("3g.20gb", 1)]);
    Options {
        gpus: vec![c2(), c2()],
        more_nodes: vec![vec![FakeGpu(vec![("7g.40gb", 1)])]],
        smartmig_toml: slurm::SMARTMIG_TOML.to_string(),
        job_submit_plugins: String::new(),
        etc_files: Vec::new(),
        extra_conf: String::new(),
        accounting: false,
        dynamic_nodes: false,
    }
}

/// The A100-40GB of the catalogue.
pub fn a100() -> GpuModel {
    Catalogue::embedded().model("a100-40gb").unwrap().clone()
}

/// Creates node `i`'s simulated GPUs in `layouts` with `busy` instances of GPU 0 marked in use.
pub fn make_sim(c: &Cluster, i: usize, layouts: &[&str], busy: &[&str]) -> Simulated {
    let sim =
        Simulated::create_layouts(&c.dir.join(format!("sim-{}", c.nodes[i])), &a100(), layouts).unwrap();
    if !busy.is_empty() {
        sim.mark_busy(0, &busy.join(" ")).unwrap();
    }
    sim
}

/// Node `i`'s simulated GPUs, as [`make_sim`] made them.
fn sim_gpus(c: &Cluster, i: usize) -> TestGpus {
    TestGpus {
        kind: Kind::Simulated,
        dir: c.dir.join(format!("sim-{}", c.nodes[i])),
        model: a100(),
    }
}

/// Writes node `i`'s agent config (simulated backend, Slurm channel, short polls).
pub fn agent_config(c: &Cluster, i: usize) -> PathBuf {
    agent_config_on(c, i, &sim_gpus(c, i))
}

/// Writes node `i`'s agent config for `gpus` (Slurm channel, short polls).
pub fn agent_config_on(c: &Cluster, i: usize, gpus: &TestGpus) -> PathBuf {
    let node = &c.nodes[i];
    let d = c.dir.display();
    let (stop, start) = c.slurmd_scripts(i);
    let toml = format!(
        "version = 1\n[gpu]\nmodels = [\"a100-40gb\"]\n\
         [controller]\nstate_dir = \"{d}/agent-{node}\"\n\
         [node]\nname = \"{node}\"\n{backend}\
         channel = \"slurm\"\ngres_conf = \"{d}/etc/gres-{node}.conf\"\n\
         slurmd_stop = [\"{stop}\"]\nslurmd_start = [\"{start}\"]\npoll_interval_s = 0.2\n\
         idle_poll_interval_s = 0.5\nannounce_interval_s = 2\n",
        backend = gpus.config_lines(),
        stop = stop.display(),
        start = start.display(),
    );
    let conf = c.dir.join(format!("etc/smartmig-{node}.toml"));
    std::fs::write(&conf, toml).unwrap();
    conf
}

/// Starts node `i`'s agent on `gpus` as daemon `name` (its log is `log/<name>.out`),
/// after `smartmigd node --restore` as its unit would (it finishes a plan a killed agent
/// left, and takes the node's MIG lines of gres.conf into smartmig's block); returns what
/// the restore printed and logged.
pub fn start_agent_named_on(c: &mut Cluster, i: usize, name: &str, gpus: &TestGpus) -> String {
    start_agent_named_on_with(c, i, name, gpus, &[])
}

/// Starts node `i`'s agent daemon on `gpus` as daemon `name`, without a restore first: the
/// agent's own restart by systemd (`Restart=on-failure`), no reboot.
pub fn start_agent_daemon_on(c: &mut Cluster, i: usize, name: &str, gpus: &TestGpus) {
    let conf = agent_config_on(c, i, gpus);
    let mut cmd = smartmigd_with(c, Some(i), &gpus.binds());
    cmd.args(["node", "--config"])
        .arg(&conf)
        .env("RUST_LOG", "debug")
        .envs(gpus.env());
    c.spawn_daemon(name, &mut cmd);
}

/// [`start_agent_named_on`] with `env` set for the agent daemon (not its `--restore`).
fn start_agent_named_on_with(
    c: &mut Cluster,
    i: usize,
    name: &str,
    gpus: &TestGpus,
    env: &[(&str, &Path)],
) -> String {
    let conf = agent_config_on(c, i, gpus);
    let binds = gpus.binds();
    let out = smartmigd_with(c, Some(i), &binds)
        .args(["node", "--restore", "--config"])
        .arg(&conf)
        .env("RUST_LOG", "info")
        .envs(gpus.env())
        .output()
        .unwrap();
    let restore = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "smartmigd node --restore: {restore}");
    let mut cmd = smartmigd_with(c, Some(i), &binds);
    cmd.args(["node", "--config"])
        .arg(&conf)
        .env("RUST_LOG", "debug")
        .envs(gpus.env())
        .envs(env.iter().copied());
    c.spawn_daemon(name, &mut cmd);
    restore
}

/// Creates node `i`'s A100 on backend `kind` in `layout` with `busy` instances in use.
pub fn make_gpus(c: &Cluster, i: usize, kind: Kind, layouts: &[&str], busy: &[&str]) -> TestGpus {
    let gpus = match kind {
        Kind::Simulated => {
            make_sim(c, i, layouts, &[]);
            sim_gpus(c, i)
        }
        Kind::Nvml => TestGpus::create(
            kind,
            &c.dir.join(format!("nvml-{}", c.nodes[i])),
            "a100-40gb",
            layouts,
        ),
    };
    if !busy.is_empty() {
        gpus.mark_busy(0, &busy.join(" "));
    }
    gpus
}

/// Creates node `i`'s GPUs on backend `kind` and starts its agent.
pub fn start_agent_on(c: &mut Cluster, i: usize, kind: Kind, layouts: &[&str], busy: &[&str]) -> TestGpus {
    let gpus = make_gpus(c, i, kind, layouts, busy);
    let name = format!("agent-{}", c.nodes[i]);
    start_agent_named_on(c, i, &name, &gpus);
    gpus
}

/// Creates node `i`'s simulated GPUs and starts its agent.
pub fn start_agent(c: &mut Cluster, i: usize, layouts: &[&str], busy: &[&str]) -> Simulated {
    start_agent_with(c, i, layouts, busy, &[])
}

/// [`start_agent`] with `env` set for the agent daemon.
pub fn start_agent_with(
    c: &mut Cluster,
    i: usize,
    layouts: &[&str],
    busy: &[&str],
    env: &[(&str, &Path)],
) -> Simulated {
    let sim = make_sim(c, i, layouts, busy);
    let name = format!("agent-{}", c.nodes[i]);
    start_agent_named_on_with(c, i, &name, &sim_gpus(c, i), env);
    sim
}

/// Waits until every node's record carries its agent's report.
pub fn wait_announced(c: &Cluster) {
    let nodes = c.nodes.clone();
    c.wait_for("the agents' first reports", Duration::from_secs(30), |c| {
        nodes
            .iter()
            .all(|n| node_field(c, n, "Comment").contains("\"smartmig\""))
    });
}

/// The central role's policy in a test.
pub enum Policy {
    /// `kind = "static"` with these configurations.
    Static(&'static str),
    /// `kind = "mean-field"`, an ONNX file (written here) that sends every GPU to
    /// configuration `prefer`; `static_layout` is the fallback.
    Onnx { prefer: usize, fallback: &'static str },
    /// `kind = "periodic"`, one entry from 00:00 with `layout`, recorded as searched under
    /// the rules line `tuned_under`; `static_layout` is the fallback.
    Periodic {
        layout: &'static str,
        tuned_under: String,
        fallback: &'static str,
    },
}

/// Writes the central role's config (`etc/central.toml`); `snapshot` is the snapshot
/// path relative to the cluster dir. Re-layouts may follow each other at once (no minimum
/// interval, no persistence); [`central_config_with`] adds `[controller.central]` lines.
pub fn central_config(c: &Cluster, policy: &Policy, snapshot: &str) -> PathBuf {
    central_config_with(c, policy, snapshot, "")
}

/// [`central_config`] with more `[controller.central]` lines (later keys win).
pub fn central_config_with(c: &Cluster, policy: &Policy, snapshot: &str, central: &str) -> PathBuf {
    let d = c.dir.display();
    let policy_text = match policy {
        Policy::Static(layout) => format!("kind = \"static\"\nstatic_layout = [{layout}]\n"),
        Policy::Onnx { fallback, .. } => {
            format!("kind = \"mean-field\"\nmodels_dir = \"{d}/policy\"\nstatic_layout = [{fallback}]\n")
        }
        Policy::Periodic {
            layout,
            tuned_under,
            fallback,
        } => format!(
            "kind = \"periodic\"\nstatic_layout = [{fallback}]\nperiodic_tuned_under = \"{tuned_under}\"\n\
             [[policy.periodic]]\nat = \"00:00\"\nlayout = [{layout}]\n"
        ),
    };
    let text = format!(
        "version = 1\n[gpu]\nmodels = [\"a100-40gb\"]\n[policy]\n{policy_text}\
         [controller]\nmode = \"drain\"\nstate_dir = \"{d}/central\"\nsnapshot_path = \"{d}/{snapshot}\"\n\
         [controller.central]\n{central}",
        central = central_keys(c, central),
    );
    let path = c.dir.join("etc/central.toml");
    std::fs::write(&path, text).unwrap();
    if let Policy::Onnx { prefer, .. } = policy {
        std::fs::create_dir_all(c.dir.join("policy")).unwrap();
        let resolved = Config::from_file(&path).unwrap().resolve(None).unwrap();
        write_preferring(&resolved, 0, Mode::Drain, *prefer, None).unwrap();
    }
    path
}

/// The tests' `[controller.central]` keys, with the caller's `key = value` lines
/// replacing or adding to them (TOML forbids a key twice).
fn central_keys(c: &Cluster, central: &str) -> String {
    let mut keys: Vec<(String, String)> = [
        ("seed", "1".to_string()),
        ("report_timeout_s", "40".into()),
        ("slurmctld_timeout_s", "30".into()),
        ("poll_interval_s", "0.2".into()),
        ("min_relayout_interval_s", "0".into()),
        ("persist_cycles", "1".into()),
        ("nodes_include", format!("\"{}\"", c.nodes_include().display())),
        (
            "restart_slurmctld",
            format!("[\"{}\"]", c.restart_slurmctld_script().display()),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for line in central.lines().filter(|l| !l.trim().is_empty()) {
        let (k, v) = line.split_once('=').expect("key = value");
        let (k, v) = (k.trim().to_string(), v.trim().to_string());
        match keys.iter_mut().find(|(key, _)| *key == k) {
            Some(e) => e.1 = v,
            None => keys.push((k, v)),
        }
    }
    keys.iter().map(|(k, v)| format!("{k} = {v}\n")).collect()
}

/// The central role's command for one cycle.
pub fn central_command(c: &Cluster, config: &Path, extra: &[&str]) -> Command {
    let mut cmd = smartmigd(c, None);
    cmd.args(["central", "--once", "--config"])
        .arg(config)
        .args(extra)
        .env("RUST_LOG", "info");
    cmd
}

/// Runs one central cycle; returns its output (stdout and log). Panics when it fails.
pub fn run_central(c: &Cluster, config: &Path, extra: &[&str]) -> String {
    central_output(c, central_command(c, config, extra).output().unwrap())
}

/// One `smartmigd central --once` run with `config`, its Slurm calls failing as `faults`
/// (JSON) says; its output.
pub fn run_central_under(c: &Cluster, config: &Path, faults: &str) -> String {
    central_output(c, central_command_under(c, config, faults).output().unwrap())
}

/// Asserts job `job` is running and was never requeued.
pub fn assert_never_requeued(c: &Cluster, job: u32) {
    let record = c.job(job);
    assert_eq!(
        (
            record.get("JobState").map(String::as_str),
            record.get("Restarts").map(String::as_str)
        ),
        (Some("RUNNING"), Some("0")),
        "{record:?}"
    );
}

/// The central role's one-cycle command with Slurm calls failing as `faults` (JSON) says.
pub fn central_command_under(c: &Cluster, config: &Path, faults: &str) -> Command {
    let path = c.dir.join("etc/slurm-faults.json");
    std::fs::write(&path, faults).unwrap();
    let mut cmd = central_command(c, config, &[]);
    cmd.env(smartmigd::slurm::faults::FAULTS_ENV, &path);
    cmd
}

/// A [`restart_wrapper`] script whose first restart fails as systemd's would.
pub const RESTART_FAILS_ONCE: &str =
    "if [ ! -e $FLAG ]; then touch $FLAG; echo 'Job for slurmctld.service failed' >&2; exit 1; fi";

/// A restart command of the test: `script` runs first (its own shell lines, `$REAL` the
/// harness's restart script), then, unless it exited, the real restart.
pub fn restart_wrapper(c: &Cluster, name: &str, script: &str) -> PathBuf {
    let path = c.dir.join(format!("etc/{name}.sh"));
    let text = format!(
        "#!/bin/sh\nREAL={real}\nFLAG={flag}\n{script}\nexec $REAL\n",
        real = c.restart_slurmctld_script().display(),
        flag = c.dir.join(format!("run/{name}.flag")).display()
    );
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

/// A finished central cycle's output (stdout and log); panics, with the daemons' log
/// tails, when it failed.
pub fn central_output(c: &Cluster, out: std::process::Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "smartmigd central failed:\n{text}\n{}",
        c.log_tails()
    );
    text
}

/// One field of `scontrol show node`.
pub fn node_field(c: &Cluster, node: &str, key: &str) -> String {
    let out = c.scontrol(&["show", "node", node, "-o"]);
    slurm::fields(&String::from_utf8_lossy(&out.stdout))
        .get(key)
        .cloned()
        .unwrap_or_default()
}

/// GPU type → count of a GRES string (`gpu:3g.20gb:2(S:0),gpu:...`).
pub fn gres_counts(gres: &str) -> BTreeMap<String, u32> {
    let mut m = BTreeMap::new();
    for e in gres.split(',').filter(|e| !e.is_empty() && *e != "(null)") {
        let e = e.split('(').next().unwrap_or(e);
        let parts: Vec<&str> = e.split(':').collect();
        if let ["gpu", ty, n] = parts.as_slice() {
            *m.entry(ty.to_string()).or_default() += n.parse::<u32>().unwrap_or(0);
        }
    }
    m
}

/// The layouts of a node's simulated GPUs, `|` between GPUs, settled or not.
pub fn sim_layout(sim: &Simulated) -> String {
    let m = a100();
    let gpus = TestGpus::from_simulated(sim, &m);
    (0..gpus.count())
        .map(|g| gpus.state(g).0.display(&m).to_string())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Jobs submitted by a test, with what each was for.
pub struct Workload {
    /// Running on node 0's first 3g.20gb (GPU 0's 3g.20gb@4, IDX 0).
    pub running: u32,
    /// Waiting for two 3g.20gb on node 0 (one is free now; GPU 1 in c5 has two).
    pub waiting: u32,
    /// Held: stays pending whatever happens.
    pub held: u32,
}

impl Workload {
    /// Every job id.
    pub fn all(&self) -> Vec<u32> {
        vec![self.running, self.waiting, self.held]
    }
}

/// Submits the workload: a running job on node 0's first 3g, a job pending behind it, and
/// a held job. Call before the agents start (GPU 0's simulated 3g is then marked busy).
pub fn submit_workload(c: &Cluster) -> Workload {
    let n0 = c.nodes[0].clone();
    let (running, _) = c
        .sbatch(&["-w", &n0, "--gres=gpu:3g.20gb:1", "--wrap", "sleep 600"])
        .unwrap();
    c.wait_job(running, &["RUNNING"], Duration::from_secs(20));
    let (waiting, _) = c
        .sbatch(&["-w", &n0, "--gres=gpu:3g.20gb:2", "--wrap", "sleep 1"])
        .unwrap();
    let (held, _) = c
        .sbatch(&["--hold", "--gres=gpu:3g.20gb:1", "--wrap", "sleep 1"])
        .unwrap();
    // Behind the running job (on one of node 0's two 3g), it cannot start yet.
    std::thread::sleep(Duration::from_millis(300));
    let s = c.job(waiting).get("JobState").cloned().unwrap_or_default();
    assert_eq!(s, "PENDING", "{:?}", c.job(waiting));
    Workload {
        running,
        waiting,
        held,
    }
}

/// Waits until no node is drained, down or invalid (a cycle ends by resuming them, and a
/// restarted slurmd needs a moment to register), except those in `held`.
pub fn wait_nodes_in_service(c: &Cluster, held: &[usize]) {
    let nodes: Vec<String> = (0..c.nodes.len())
        .filter(|i| !held.contains(i))
        .map(|i| c.nodes[i].clone())
        .collect();
    c.wait_for("the nodes back in service", Duration::from_secs(30), |c| {
        nodes.iter().all(|n| {
            let s = c.node_state(n);
            !s.contains("DRAIN") && !s.contains("DOWN") && !s.contains("INVAL") && !s.contains('*')
        })
    });
}

/// GPU type → instances, of the A100's MIG types only, of a GRES string.
fn mig_counts(gres: &str) -> BTreeMap<String, u32> {
    let m = a100();
    let mut counts = gres_counts(gres);
    counts.retain(|t, _| m.profiles.iter().any(|p| &p.name == t));
    counts
}

/// The MIG types of node `i`'s gres.conf lines, counted.
pub fn gres_conf_counts(c: &Cluster, i: usize) -> BTreeMap<String, u32> {
    let conf = std::fs::read_to_string(c.dir.join(format!("etc/gres-{}.conf", c.nodes[i]))).unwrap();
    let mut in_conf = String::new();
    for l in conf
        .lines()
        .filter(|l| l.starts_with("NodeName=") && l.contains(&format!("NodeName={} ", c.nodes[i])))
    {
        let ty = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("Type="))
            .unwrap_or_default();
        in_conf.push_str(&format!("gpu:{ty}:1,"));
    }
    mig_counts(&in_conf)
}

/// What every fault test checks after the fault: each simulated GPU is settled in a valid
/// layout; Slurm's node Gres and the node's gres.conf agree on the MIG types; every node is
/// in service with the device's layout; and every job is COMPLETED, RUNNING or PENDING,
/// never restarted (none failed, requeued or lost because of smartmig).
pub fn assert_consistent(c: &Cluster, sims: &[&Simulated], jobs: &[u32]) {
    assert_safe(c, sims, jobs, &[]);
}

/// [`assert_consistent`], except that the nodes in `held` must be drained (never down or
/// unresponding) with a reason containing the text given (the fault), and may keep a
/// device layout Slurm does not have (that is what the drain keeps jobs away from).
pub fn assert_safe(c: &Cluster, sims: &[&Simulated], jobs: &[u32], held: &[(usize, &str)]) {
    let gpus: Vec<TestGpus> = sims
        .iter()
        .map(|s| TestGpus::from_simulated(s, &a100()))
        .collect();
    assert_safe_on(c, &gpus.iter().collect::<Vec<_>>(), jobs, held);
}

/// [`assert_consistent`] for nodes on either backend.
pub fn assert_consistent_on(c: &Cluster, gpus: &[&TestGpus], jobs: &[u32]) {
    assert_safe_on(c, gpus, jobs, &[]);
}

/// [`assert_safe`] for nodes on either backend.
pub fn assert_safe_on(c: &Cluster, gpus: &[&TestGpus], jobs: &[u32], held: &[(usize, &str)]) {
    let held_nodes: Vec<usize> = held.iter().map(|h| h.0).collect();
    wait_nodes_in_service(c, &held_nodes);
    let m = a100();
    for (i, g) in gpus.iter().enumerate() {
        let node = &c.nodes[i];
        let mut device: BTreeMap<String, u32> = BTreeMap::new();
        for gpu in 0..g.count() {
            let (layout, settled) = g.state(gpu);
            assert!(settled, "{node}/{gpu}: GPU left unsettled: {layout:?}");
            layout
                .validate(&m, Driver::R510)
                .unwrap_or_else(|e| panic!("{node}/{gpu}: invalid layout {layout:?}: {e}"));
            for inst in layout.instances() {
                *device.entry(m.profiles[inst.profile].name.clone()).or_default() += 1;
            }
        }
        let gres = node_field(c, node, "Gres");
        let slurm = mig_counts(&gres);
        assert_eq!(
            gres_conf_counts(c, i),
            slurm,
            "{node}: slurmctld has Gres={gres}, the node's gres.conf differs\n{}",
            c.log_tails()
        );
        match held.iter().find(|h| h.0 == i) {
            None => assert_eq!(
                slurm,
                device,
                "{node}: Slurm has Gres={gres}, the devices {}\n{}",
                g.layouts(),
                c.log_tails()
            ),
            Some((_, why)) => {
                let state = c.node_state(node);
                assert!(
                    state.contains("DRAIN") && !state.contains("DOWN") && !state.contains('*'),
                    "{node}: {state}"
                );
                let reason = node_field(c, node, "Reason");
                assert!(
                    reason.contains(why),
                    "{node}: reason `{reason}` should name `{why}`"
                );
            }
        }
    }
    for &j in jobs {
        let job = c.job(j);
        let state = job.get("JobState").cloned().unwrap_or_default();
        assert!(
            ["COMPLETED", "RUNNING", "PENDING"].contains(&state.as_str()),
            "job {j} is {state}: {job:?}\n{}",
            c.log_tails()
        );
        assert_eq!(
            job.get("Restarts").map(String::as_str),
            Some("0"),
            "job {j} was requeued: {job:?}"
        );
    }
}
