//! The `smartmigd central`, `smartmigd status` and `smartmigd bench` entry points.

use std::collections::HashSet;
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

/// `smartmigd central`: the reconcile loop (or one cycle with `once`).
pub fn central(config: &Path, once: bool, dry_run: bool) -> anyhow::Result<()> {
    let resolved = load_config(config)?;
    let mode = if dry_run {
        Mode::DryRun
    } else {
        resolved.config.controller.mode
    };
    let cc = resolved.config.controller.central.clone();
    let seed = cc.seed.unwrap_or_else(rand::random);
    let decider = Decider::new(&resolved, mode, seed);
    let relayout = chosen(&cc, Libslurm::version());
    log::info!(
        "central role: mode {}, policy {:?}, seed {seed}, re-layout {} ({:?}; built for Slurm {})",
        mode_name(mode),
        resolved.config.policy.kind,
        relayout.name(),
        cc.relayout,
        crate::slurm::version_text(Libslurm::version())
    );
    let mut api = Libslurm::new();
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
    let mut c = Central::new(resolved, Box::new(api), decider, relayout, mode);
    if once {
        let r = c.cycle();
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
    let mut known: Option<HashSet<u32>> = None;
    let mut events = 0u32;
    let mut last = Instant::now() - interval;
    loop {
        // Arrivals and completions since the last poll count towards decision_events.
        match c.api().jobs() {
            Ok(jobs) => {
                let now: HashSet<u32> = jobs.iter().map(|j| j.id).collect();
                if let Some(prev) = &known {
                    events += (now.difference(prev).count() + prev.difference(&now).count()) as u32;
                }
                known = Some(now);
            }
            Err(e) => log::warn!("polling Slurm: {e}"),
        }
        let by_events = events_needed > 0 && events >= events_needed;
        if by_events || last.elapsed() >= interval {
            log::debug!("cycle ({} events, {:?} since the last)", events, last.elapsed());
            c.cycle();
            events = 0;
            last = Instant::now();
        }
        std::thread::sleep(poll);
    }
}

/// `smartmigd status`: the central role's last status, readable.
pub fn status(config: &Path, json: bool) -> anyhow::Result<()> {
    let resolved = load_config(config)?;
    let dir = &resolved.config.controller.state_dir;
    let s = Status::read(dir).map_err(anyhow::Error::msg)?;
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
    fn apply(&mut self, _: &mut dyn SlurmApi, _: &[(String, String)]) -> Result<(), RelayoutError> {
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
    /// Wall time of each cycle (the in-memory Slurm's copies included).
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
         [controller]\nmode = \"drain\"\nstate_dir = \"{d}/state\"\nsnapshot_path = \"{d}/snapshot.json\"\n",
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
    )
    .with_poll(Duration::from_millis(0));
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
        let r = c.cycle();
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
