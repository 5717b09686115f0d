//! The `smartmigd central`, `smartmigd status` and `smartmigd bench` entry points.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rand::SeedableRng as _;
use rand_chacha::ChaCha8Rng;
use smartmig_core::config::{Config, Mode, Resolved};
use smartmig_policy::{onnx_writer, Activation, PolicyNetwork};

use super::decide::{expected_metadata, policy_path, Decider};
use super::fake::FakeSlurm;
use super::relayout::{chosen, Relayout, RelayoutError};
use super::status::Status;
use super::{mode_name, unix_now, Central};
use crate::slurm::{Libslurm, SlurmApi};

/// Reads and resolves the config file.
pub fn load_config(path: &Path) -> anyhow::Result<Resolved> {
    let cfg = Config::from_file(path)?;
    Ok(cfg.resolve(path.parent())?)
}

/// `smartmigd central`: the reconcile loop (or, with `once`, one deciding cycle and the
/// re-layout it starts, to its end).
pub fn central(config: &Path, once: bool, dry_run: bool) -> anyhow::Result<()> {
    let resolved = load_config(config)?;
    let mode = if dry_run {
        Mode::DryRun
    } else {
        resolved.config.controller.mode
    };
    let cc = resolved.config.controller.central.clone();
    let seed = cc.seed.unwrap_or_else(rand::random);
    let mig_types = resolved
        .models
        .iter()
        .flat_map(|m| m.model.profiles.iter().map(|p| p.name.clone()))
        .collect();
    let relayout = chosen(&cc, Libslurm::version(), mig_types)?;
    log::info!(
        "central role: mode {}, policy {:?}, seed {seed}, re-layout {} ({:?}; built for Slurm {})",
        mode_name(mode),
        resolved.config.policy.kind,
        relayout.name(),
        cc.relayout,
        crate::slurm::version_text(Libslurm::version())
    );
    if mode == Mode::DryRun {
        log::info!(
            "dry-run: no layout will change; decisions are in `smartmigd status`. \
             To act, set [controller] mode = \"drain\" in {} (docs/admin-guide.md, \"Going live\")",
            config.display()
        );
    }
    let decider = Decider::new(&resolved, mode, seed);
    let mut api = crate::slurm::faults::from_env(Box::new(Libslurm::new())).map_err(anyhow::Error::msg)?;
    if let Err(e) = api.ping() {
        log::warn!("slurmctld does not answer yet: {e}");
    }
    let interval = Duration::from_secs_f64(resolved.config.policy.decision_interval_s);
    let events_needed = resolved.config.policy.decision_events;
    let poll = Duration::from_secs_f64(cc.poll_interval_s);
    let metrics = if once {
        None
    } else {
        let listen = resolved.config.controller.metrics_listen.clone();
        super::metrics::serve(&listen, resolved.config.controller.state_dir.clone())
            .with_context(|| format!("controller.metrics_listen = \"{listen}\""))?
    };
    if let Some(addr) = metrics {
        log::info!("metrics on http://{addr}/metrics");
    }
    let limit = once_limit(&cc);
    let mut c = Central::new(resolved, api, decider, relayout, mode)?;
    c.for_release(Libslurm::version());
    if once {
        let r = c.run_once(poll, limit);
        println!(
            "{} GPU(s) to change, {} changed{}, {} skipped (busy), {} job(s) re-routed, {} error(s)",
            r.wanted,
            r.changed,
            if mode == Mode::DryRun {
                " (dry-run: would be)"
            } else {
                ""
            },
            r.skipped_busy,
            r.rerouted,
            r.errors.len()
        );
        for e in &r.errors {
            eprintln!("error: {e}");
        }
        return Ok(());
    }
    let mut events = 0u32;
    let mut last = Instant::now() - interval;
    loop {
        let by_events = events_needed > 0 && events >= events_needed;
        let decide = by_events || last.elapsed() >= interval;
        if decide {
            log::debug!(
                "deciding ({events} events, {:?} since the last decision)",
                last.elapsed()
            );
            events = 0;
            last = Instant::now();
        }
        c.cycle_with(decide);
        events += c.take_events();
        // While a batch is in flight slurmd may be stopped somewhere: look again soon.
        std::thread::sleep(if c.in_flight() { poll.min(FAST_POLL) } else { poll });
    }
}

/// How often the loop looks at a batch in flight.
const FAST_POLL: Duration = Duration::from_millis(500);

/// How long `--once` follows the batch it started: every phase's timeout, and margin.
fn once_limit(cc: &smartmig_core::config::CentralConfig) -> Duration {
    Duration::from_secs_f64(cc.report_timeout_s * 2.0 + cc.slurmctld_timeout_s * 2.0 + 3.0 * 60.0 + 30.0)
}

/// `smartmigd freeze`: no new re-layout starts until `smartmigd thaw` (the one in flight
/// finishes or is undone).
pub fn freeze(config: &Path, reason: &str, thaw: bool) -> anyhow::Result<()> {
    let resolved = load_config(config)?;
    let dir = &resolved.config.controller.state_dir;
    let path = dir.join(super::guard::FREEZE_FILE);
    if thaw {
        match std::fs::remove_file(&path) {
            Ok(()) => println!("thawed: re-layouts may start again"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => println!("not frozen"),
            Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
        }
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    smartmig_core::durable::write(&path, format!("{reason}\n").as_bytes())?;
    println!("frozen ({reason}): no new re-layout starts; one in flight finishes or is undone. `smartmigd thaw` lifts it.");
    Ok(())
}

/// `smartmigd release`: undoes what smartmig set in Slurm, leaving layouts as they are:
/// resumes the nodes it drained (its own reasons only), removes its keys from every node's
/// `Extra` and `Comment`. Refused while a batch is in flight (freeze first, wait).
pub fn release(config: &Path) -> anyhow::Result<()> {
    let resolved = load_config(config)?;
    let dir = &resolved.config.controller.state_dir;
    let ledger = super::batch::Ledger::load(dir)?;
    if let Some(b) = &ledger.batch {
        anyhow::bail!(
            "re-layout generation {} is in flight on {:?}: run `smartmigd freeze`, wait for `smartmigd status` to show no pending transition, then release",
            b.generation,
            b.nodes.keys().collect::<Vec<_>>()
        );
    }
    let mut api = Libslurm::new();
    let mut changed = 0;
    for n in api.nodes()? {
        let ours = n.drain
            && n.reason.as_deref().is_some_and(|r| {
                r.starts_with(super::batch::DRAIN_PREFIX) || r.starts_with(super::batch::HELD_PREFIX)
            });
        let what = |f: &str| format!("node {} {f}", n.name);
        let extra =
            crate::channel::merge::<crate::channel::Desired>(n.extra.as_deref(), &what("Extra"), None);
        let comment =
            crate::channel::merge::<crate::channel::Report>(n.comment.as_deref(), &what("Comment"), None);
        let update = crate::slurm::NodeUpdate {
            node: n.name.clone(),
            extra: extra.ok().filter(|e| Some(e.as_str()) != n.extra.as_deref()),
            comment: comment.ok().filter(|c| Some(c.as_str()) != n.comment.as_deref()),
            resume: ours,
            ..Default::default()
        };
        if update.extra.is_none() && update.comment.is_none() && !update.resume {
            continue;
        }
        api.update_node(&update)
            .with_context(|| format!("releasing node {}", n.name))?;
        println!(
            "{}:{}{}",
            n.name,
            if ours { " resumed" } else { "" },
            if update.extra.is_some() || update.comment.is_some() {
                " smartmig keys removed"
            } else {
                ""
            }
        );
        changed += 1;
    }
    println!(
        "released {changed} node(s). The node definitions in {} describe the current layouts: keep the Include, or move them into slurm.conf. On each node run `smartmigd node --release` before removing the package.",
        resolved.config.controller.central.nodes_include.display()
    );
    Ok(())
}

/// `smartmigd status`: the central role's last status, readable.
pub fn status(config: &Path, json: bool) -> anyhow::Result<()> {
    let resolved = load_config(config)?;
    let dir = &resolved.config.controller.state_dir;
    let s = Status::read(dir)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", s.render());
    }
    Ok(())
}

/// A re-layout that does nothing (the benchmark excludes Slurm's restart).
struct NoRelayout;

impl Relayout for NoRelayout {
    fn name(&self) -> &str {
        "none"
    }
    fn stops_slurmd(&self) -> bool {
        false
    }
    fn timeout(&self) -> Duration {
        Duration::ZERO
    }
    fn check(&self, _: &[String]) -> Result<(), RelayoutError> {
        Ok(())
    }
    /// Tells the in-memory Slurm the new GRES, as a refresh would.
    fn apply(&mut self, api: &mut dyn SlurmApi, nodes: &[(String, String)]) -> Result<(), RelayoutError> {
        for (node, gres) in nodes {
            let u = crate::slurm::NodeUpdate {
                node: node.clone(),
                gres: Some(gres.clone()),
                ..Default::default()
            };
            api.update_node(&u).map_err(|e| {
                RelayoutError::Command(crate::command::CommandError {
                    command: "update gres".into(),
                    reason: e.to_string(),
                })
            })?;
        }
        Ok(())
    }
    fn undo(&mut self, _: &mut dyn SlurmApi, _: &[(String, String)], _: bool) -> Result<bool, RelayoutError> {
        Ok(false)
    }
    fn put_back(&mut self, _: &[(String, String)]) -> Result<bool, RelayoutError> {
        Ok(false)
    }
    fn reload(&mut self, _: &mut dyn SlurmApi) -> Result<(), RelayoutError> {
        Ok(())
    }
}

/// What the benchmark measured.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// GPUs in the synthetic cluster.
    pub gpus: usize,
    /// Pending jobs.
    pub pending: usize,
    /// Wall time of each deciding cycle and the cycles that finish its batch (the in-memory
    /// Slurm's copies included).
    pub cycles: Vec<Duration>,
    /// Wall time of building the view and deciding and planning on it, per cycle.
    pub decide: Vec<Duration>,
    /// Peak resident memory of the process, bytes (VmHWM).
    pub peak_rss: u64,
    /// GPUs changed in the first cycle.
    pub changed: usize,
    /// Where the decision came from.
    pub source: String,
}

/// Builds a synthetic Slurm state: `gpus` A100-40GB GPUs, 8 per node, in c2/c5/c8
/// layouts, a quarter of them with a job on their first instance, and `pending` jobs
/// asking for assorted types.
pub fn synthetic(gpus: usize, pending: usize) -> FakeSlurm {
    let layouts = [
        "4g.20gb@0 3g.20gb@4",
        "3g.20gb@0 3g.20gb@4",
        "1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 3g.20gb@4",
    ];
    let mut s = FakeSlurm {
        auto_agent: true,
        ..FakeSlurm::default()
    };
    let per_node = 8;
    let mut id = 1;
    for n in 0..gpus.div_ceil(per_node) {
        let name = format!("gpu{n:05}");
        let count = per_node.min(gpus - n * per_node);
        let node_gpus: Vec<(&str, &str)> = (0..count)
            .map(|g| ("A100-SXM4-40GB", layouts[(n + g) % 3]))
            .collect();
        s.nodes.push(FakeSlurm::node(&name, &node_gpus));
        if n % 4 == 0 {
            s.jobs.push(FakeSlurm::running(id, &name, "3g.20gb", 0));
            id += 1;
        }
    }
    let types = ["gres:gpu:1g.5gb:1", "gres:gpu:3g.20gb:1", "gres:gpu:4g.20gb:1"];
    for j in 0..pending {
        // One job in a thousand asks for a type no GPU has: it is re-routed.
        let ty = if j % 1000 == 999 {
            "gres:gpu:2g.10gb:1"
        } else {
            types[j % types.len()]
        };
        let mut job = FakeSlurm::pending(id, ty);
        job.submit = unix_now() as i64 - (j % 3600) as i64;
        job.time_limit_min = Some(1 + (j % 120) as u32);
        s.jobs.push(job);
        id += 1;
    }
    s
}

/// `smartmigd bench`: central cycles on a synthetic state, with a random policy written
/// through the ONNX writer and run by ONNX Runtime (static layout when `fixed`).
pub fn bench(gpus: usize, pending: usize, cycles: usize, fixed: bool) -> anyhow::Result<BenchResult> {
    let dir = std::env::temp_dir().join(format!("smartmigd-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let policy = if fixed {
        "kind = \"static\"\nstatic_layout = [\"c8\", \"c2\"]".to_string()
    } else {
        format!(
            "kind = \"mean-field\"\nmodels_dir = \"{}\"\nstatic_layout = [\"c8\"]",
            dir.display()
        )
    };
    let text = format!(
        "version = 1\n[gpu]\nmodels = [\"a100-40gb\"]\n[policy]\n{policy}\n\
         [controller]\nmode = \"drain\"\nstate_dir = \"{d}/state\"\nsnapshot_path = \"{d}/snapshot.json\"\n\
         [controller.central]\nmin_relayout_interval_s = 0\npersist_cycles = 1\nmax_nodes_per_batch = 1000000\n",
        d = dir.display()
    );
    let resolved = Config::parse(&text, "bench")?.resolve(None)?;
    if !fixed {
        let meta = expected_metadata(&resolved, 0, Mode::Drain);
        let k = meta.k();
        let net = PolicyNetwork::init(
            &[meta.input_dim(), 64, 64, k * k],
            Activation::Tanh,
            &mut ChaCha8Rng::seed_from_u64(1),
        );
        onnx_writer::write(&policy_path(&resolved, 0, Mode::Drain), &net, &meta)?;
    }
    let decider = Decider::new(&resolved, Mode::Drain, 1);
    let fake = synthetic(gpus, pending);
    let mut c = Central::new(
        resolved,
        Box::new(fake),
        decider,
        Box::new(NoRelayout),
        Mode::Drain,
    )?;
    let mut times = Vec::new();
    let mut decide = Vec::new();
    let mut changed = 0;
    for i in 0..cycles {
        let (nodes, jobs) = (c.api().nodes()?, c.api().jobs()?);
        let start = Instant::now();
        let view = super::view::View::build(&c.resolved, nodes, jobs, &mut c.node_cache);
        let built = start.elapsed();
        let _ = c.plan(&view, unix_now());
        decide.push(start.elapsed());
        log::debug!("view {built:?}, decide+plan {:?}", start.elapsed() - built);
        drop(view);
        let start = Instant::now();
        // A deciding cycle and the ones that carry its batch through the instant agents.
        let r = c.run_once(Duration::ZERO, Duration::from_secs(600));
        times.push(start.elapsed());
        if i == 0 {
            changed = r.changed;
        }
        if let Some(e) = r.errors.first() {
            anyhow::bail!("benchmark cycle failed: {e}");
        }
    }
    let source = c.status.sources.values().next().cloned().unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(BenchResult {
        gpus,
        pending,
        cycles: times,
        decide,
        peak_rss: peak_rss(),
        changed,
        source,
    })
}

/// Peak resident set size of this process (VmHWM), bytes; 0 when unknown.
pub fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Default config path when none is given.
pub fn default_config() -> PathBuf {
    PathBuf::from(smartmig_core::config::DEFAULT_PATH)
}

/// RPCs one part of the system sends to slurmctld, by call.
pub type RpcCounts = std::collections::BTreeMap<&'static str, u64>;

/// What `smartmigd bench --rpc` counted for one cluster size.
#[derive(Debug, Clone)]
pub struct RpcResult {
    /// Nodes (8 GPUs each).
    pub nodes: usize,
    /// The central role's RPCs per cycle with nothing to do.
    pub idle_cycle: RpcCounts,
    /// Cycles measured for `idle_cycle`.
    pub idle_cycles: u64,
    /// The central role's RPCs for one batch of `[controller.central] max_nodes_per_batch`
    /// (4) nodes, from the deciding cycle to the last resume, and its cycles.
    pub batch: RpcCounts,
    /// Cycles the batch took (with instant agents).
    pub batch_cycles: u64,
    /// The agents' RPCs over `seconds` of simulated time, all idle.
    pub agents: RpcCounts,
    /// Simulated seconds of the agents.
    pub seconds: f64,
}

fn delta(after: &RpcCounts, before: &RpcCounts) -> RpcCounts {
    after
        .iter()
        .map(|(k, v)| (*k, v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// `smartmigd bench --rpc`: counts the RPCs the central role and `nodes` node agents send
/// to an in-memory Slurm: the central role's idle cycles and one batch (production
/// defaults: incremental table reads), and the agents' reads of their own records over an
/// hour of simulated time at the poll intervals `Agent::poll_delay` draws.
pub fn bench_rpc(nodes: usize) -> anyhow::Result<RpcResult> {
    use std::collections::{BTreeMap, BinaryHeap};

    let dir = tempfile::tempdir().context("temporary directory")?;
    let d = dir.path().display();
    let config = |policy: &str, central: &str| -> anyhow::Result<Resolved> {
        let text = format!(
            "version = 1\n[gpu]\nmodels = [\"a100-40gb\"]\n[policy]\n{policy}\n\
             [controller]\nmode = \"drain\"\nstate_dir = \"{d}/state\"\nsnapshot_path = \"{d}/snapshot.json\"\n\
             [controller.central]\n{central}"
        );
        Ok(Config::parse(&text, "bench")?.resolve(None)?)
    };
    let fake = super::fake::SharedFake::default();
    *fake.0.borrow_mut() = synthetic(nodes * 8, 1000);
    let counts = |f: &super::fake::SharedFake| f.0.borrow().rpcs.clone();

    // The central role with nothing to do.
    let idle = config("kind = \"none\"", "")?;
    let mut c = Central::new(
        idle.clone(),
        Box::new(fake.clone()),
        Decider::new(&idle, Mode::Drain, 1),
        Box::new(NoRelayout),
        Mode::Drain,
    )?;
    c.cycle();
    let before = counts(&fake);
    let idle_cycles = 10;
    for _ in 0..idle_cycles {
        c.cycle();
    }
    let idle_counts = delta(&counts(&fake), &before);
    drop(c);

    // One batch, with the production limits but no interval or persistence to wait for.
    let relayout = config(
        "kind = \"static\"\nstatic_layout = [\"c5\"]",
        "min_relayout_interval_s = 0\npersist_cycles = 1\n",
    )?;
    let mut c = Central::new(
        relayout.clone(),
        Box::new(fake.clone()),
        Decider::new(&relayout, Mode::Drain, 1),
        Box::new(NoRelayout),
        Mode::Drain,
    )?;
    let before = counts(&fake);
    let cycles_before = c.status.cycles;
    let r = c.run_once(Duration::ZERO, Duration::from_secs(600));
    if let Some(e) = r.errors.first() {
        anyhow::bail!("benchmark batch failed: {e}");
    }
    let batch = delta(&counts(&fake), &before);
    let batch_cycles = c.status.cycles - cycles_before;
    drop(c);

    // The agents: each reads its own record at the intervals a real agent draws, and
    // re-announces every announce_interval_s.
    let node_cfg = smartmig_core::config::node::NodeConfig::default();
    let model = smartmig_core::mig::Catalogue::embedded()
        .model("a100-40gb")?
        .clone();
    let sim = smartmig_gpu::simulated::Simulated::create_layouts(&dir.path().join("sim"), &model, &["7g@0"])?;
    let probe = crate::node::Agent::new(
        crate::node::AgentConfig {
            node: "probe".into(),
            driver: smartmig_core::mig::Driver::R510,
            catalogue: smartmig_core::mig::Catalogue::embedded(),
            state_dir: dir.path().join("agent"),
            gres_conf: dir.path().join("gres.conf"),
            slurmd_stop: vec!["true".into()],
            slurmd_start: vec!["true".into()],
            announce_interval_s: node_cfg.announce_interval_s,
            poll_interval_s: node_cfg.poll_interval_s,
            idle_poll_interval_s: node_cfg.idle_poll_interval_s,
        },
        Box::new(sim),
        Box::new(crate::node::spool::SpoolChannel::open(
            &dir.path().join("spool"),
            "probe",
        )?),
    )?;
    let names: Vec<String> = fake.0.borrow().nodes.iter().map(|n| n.name.clone()).collect();
    let mut channels: Vec<crate::node::slurm_channel::SlurmChannel> = names
        .iter()
        .map(|n| crate::node::slurm_channel::SlurmChannel::with_api(Box::new(fake.clone()), n))
        .collect();
    let seconds = 3600.0;
    let report = super::fake::FakeSlurm::report(Vec::new());
    // Each agent's last announcement fell somewhere in the hour before.
    let mut last_announce: Vec<f64> = (0..channels.len())
        .map(|i| -node_cfg.announce_interval_s * i as f64 / channels.len() as f64)
        .collect();
    // Agents start at random moments within their first interval.
    let mut queue: BinaryHeap<std::cmp::Reverse<(u64, usize)>> = (0..channels.len())
        .map(|i| std::cmp::Reverse(((probe.poll_delay().as_secs_f64() * 1e3) as u64, i)))
        .collect();
    let before = counts(&fake);
    while let Some(std::cmp::Reverse((ms, i))) = queue.pop() {
        let t = ms as f64 / 1e3;
        if t >= seconds {
            break;
        }
        use crate::node::NodeChannel as _;
        channels[i].read()?;
        if t - last_announce[i] >= node_cfg.announce_interval_s {
            channels[i].write_report(&report)?;
            last_announce[i] = t;
        }
        queue.push(std::cmp::Reverse((
            ms + (probe.poll_delay().as_secs_f64() * 1e3) as u64,
            i,
        )));
    }
    let agents: BTreeMap<&'static str, u64> = delta(&counts(&fake), &before);
    Ok(RpcResult {
        nodes,
        idle_cycle: idle_counts,
        idle_cycles,
        batch,
        batch_cycles,
        agents,
        seconds,
    })
}
