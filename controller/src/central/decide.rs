//! The decision of one cycle: mean-field features per GPU model, one inference per model
//! through ONNX Runtime, top-k sampling of each GPU's next configuration — or the
//! configured static/periodic layout. When a model's policy file is missing, refused or
//! fails, its GPUs keep their current layouts (never a layout the admin did not ask for).

use std::collections::HashMap;
use std::path::PathBuf;

use rand_chacha::ChaCha8Rng;
use smartmig_core::config::{
    parse_time_of_day, periodic_mismatch, Mode, PolicyKind, Resolved, ResolvedModel,
};
use smartmig_core::mig::assign_mix;
use smartmig_core::routing::{parse_hints, JobClass, SIZES};
use smartmig_policy::features::{layout as feature_layout, FeatureTracker};
use smartmig_policy::job::Job;
use smartmig_policy::{
    mode_semantics, policy_file_name, DecisionInterval, Draw, OnnxRuntime, PolicyMetadata, PolicyRuntime,
    SamplingConfig, TransitionTable,
};

use super::view::View;
use crate::slurm::{parse_gres, SlurmJob};

/// Deadlines further ahead than this count as this far (bounds the feature tracker).
const HORIZON_MIN: f64 = 7.0 * 1440.0;

/// Where one model's decision came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Source {
    /// The learned policy in this file.
    Onnx {
        /// The policy file.
        file: String,
    },
    /// The static or periodic layout of the config.
    Fixed {
        /// `static`, `periodic`, or `static (fallback: why)` for a refused policy file.
        why: String,
    },
    /// The learned policy cannot be used: every GPU keeps its layout.
    Kept {
        /// Why the policy cannot be used.
        why: String,
    },
    /// `policy.kind = "none"`: nothing changes.
    None,
}

/// What the policy wants, per GPU of the view.
#[derive(Debug, Clone)]
pub struct Decision {
    /// Target configuration of each GPU in `View::gpus` (None: leave it as it is).
    pub targets: Vec<Option<usize>>,
    /// Per model (in `Resolved::models` order), where the decision came from.
    pub sources: Vec<Source>,
}

/// What identifies one version of a policy file: modification time, size, inode
/// (None: the file cannot be read).
type Stamp = Option<(Option<std::time::SystemTime>, u64, u64)>;

fn stamp(path: &std::path::Path) -> Stamp {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.modified().ok(), m.len(), m.ino()))
}

/// Why a model's policy is not run; its GPUs keep their layouts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    /// Nothing loaded (the policy kind is not `mean-field`).
    #[error("no policy loaded")]
    NotLoaded,
    /// ONNX Runtime could not be loaded.
    #[error("{0}")]
    Runtime(String),
    /// The file is missing, corrupt or does not match the config (its error chain).
    #[error("{0}")]
    File(String),
    /// Its metadata says it must not run here (a failed deployment guard, validated where
    /// requeued jobs resume at a site whose jobs start over, or with padding records at a
    /// site without them).
    #[error("{}: {why}", path.display())]
    Refused {
        /// The policy file.
        path: PathBuf,
        /// Why, from [`PolicyMetadata::refusal`].
        why: String,
    },
    /// It failed on this cycle's features (its error chain).
    #[error("{0}")]
    Failed(String),
}

/// Per-model policies, loaded at start and again whenever a policy file changes.
pub struct Decider {
    kind: PolicyKind,
    mode: Mode,
    runtime: Result<OnnxRuntime, Unusable>,
    policies: Vec<Result<PolicyRuntime, Unusable>>,
    /// The version of each model's policy file that `policies` holds.
    stamps: Vec<Stamp>,
    sampling: SamplingConfig,
    classes: Vec<JobClass>,
    rng: ChaCha8Rng,
    features: Vec<f32>,
    /// Why the periodic schedule does not run (searched under other rules): the static
    /// layout runs instead.
    periodic_refused: Option<String>,
}

/// The policy file of a model: `<models_dir>/<model key>-<semantics>.onnx`.
pub fn policy_path(resolved: &Resolved, model: usize, mode: Mode) -> PathBuf {
    resolved.config.policy.models_dir.join(policy_file_name(
        &resolved.models[model].model.key,
        mode_semantics(mode),
    ))
}

/// The metadata a policy for `model` must carry to be used by this configuration.
pub fn expected_metadata(resolved: &Resolved, model: usize, mode: Mode) -> PolicyMetadata {
    let m = &resolved.models[model];
    let p = &resolved.config.policy;
    PolicyMetadata {
        decision: DecisionInterval {
            events: p.decision_events,
            seconds: p.decision_interval_s,
        },
        top_k: p.top_k,
        ..PolicyMetadata::new(
            m.model.key.clone(),
            m.configurations.iter().map(|c| c.name.clone()).collect(),
            mode_semantics(mode),
            resolved.config.controller.central.requeued,
        )
    }
}

impl Decider {
    /// Loads each model's policy when the kind is `mean-field`; a model whose file is
    /// missing or refused keeps its layouts (logged, and in every decision's source).
    pub fn new(resolved: &Resolved, mode: Mode, seed: u64) -> Decider {
        let p = &resolved.config.policy;
        let runtime = if p.kind == PolicyKind::MeanField {
            OnnxRuntime::init(resolved.config.controller.onnxruntime.as_deref())
                .map_err(|e| Unusable::Runtime(e.to_string()))
        } else {
            Err(Unusable::NotLoaded)
        };
        let n = resolved.models.len();
        let mut d = Decider {
            kind: p.kind,
            mode,
            runtime,
            policies: (0..n).map(|_| Err(Unusable::NotLoaded)).collect(),
            stamps: vec![None; n],
            sampling: SamplingConfig {
                top_k: p.top_k as usize,
                stay_threshold: p.stay_threshold,
            },
            classes: resolved.config.routing.all_classes(),
            rng: rand::SeedableRng::seed_from_u64(seed),
            features: Vec::new(),
            periodic_refused: periodic_mismatch(&resolved.config),
        };
        if p.kind == PolicyKind::MeanField {
            for m in 0..n {
                d.load(resolved, m);
            }
        }
        if let Some(why) = &d.periodic_refused {
            log::error!("periodic schedule refused; the GPUs get policy.static_layout: {why}");
        }
        d
    }

    /// (Re)loads model `m`'s policy file; a failure is logged and kept as the reason.
    fn load(&mut self, resolved: &Resolved, m: usize) {
        let path = policy_path(resolved, m, self.mode);
        self.stamps[m] = stamp(&path);
        let key = &resolved.models[m].model.key;
        let loaded = self.runtime.as_ref().map_err(Clone::clone).and_then(|rt| {
            let policy = PolicyRuntime::load_with(rt, &path, &expected_metadata(resolved, m, self.mode))
                .map_err(|e| Unusable::File(format!("{:#}", anyhow::Error::new(e))))?;
            // The trainer's deployment guard (a policy that did not beat the best static
            // layout on its validation days is not run), and what its validation assumed
            // of requeued jobs against what this site's do.
            let central = &resolved.config.controller.central;
            let site = smartmig_policy::Site {
                requeued: central.requeued,
                padding: central.padding,
                requeue_max_run_s: central.requeue_max_run_s,
            };
            match policy.metadata().refusal(site) {
                Some(why) => Err(Unusable::Refused {
                    path: path.clone(),
                    why,
                }),
                None => Ok(policy),
            }
        });
        match &loaded {
            Ok(_) => log::info!("policy for {key}: {}", path.display()),
            Err(e @ Unusable::Refused { .. }) => {
                log::error!("policy for {key} refused; its GPUs take policy.static_layout: {e}")
            }
            Err(e) => log::error!("policy for {key} unusable; its GPUs keep their layouts: {e}"),
        }
        self.policies[m] = loaded;
    }

    /// Reloads the policy files replaced since they were loaded (a retrained policy, or
    /// a broken file, which then keeps the layouts).
    fn reload_changed(&mut self, resolved: &Resolved) {
        if self.kind != PolicyKind::MeanField || self.runtime.is_err() {
            return;
        }
        for m in 0..self.policies.len() {
            let path = policy_path(resolved, m, self.mode);
            if stamp(&path) != self.stamps[m] {
                log::info!("policy file {} changed; reloading it", path.display());
                self.load(resolved, m);
            }
        }
    }

    /// Decides the target configuration of every GPU of `view` at `now` (Unix seconds).
    pub fn decide(&mut self, resolved: &Resolved, view: &View, now: f64) -> Decision {
        self.reload_changed(resolved);
        let mut targets = vec![None; view.gpus.len()];
        let mut sources = Vec::with_capacity(resolved.models.len());
        let minute_of_day = (now.rem_euclid(86_400.0)) / 60.0;
        let tracker = if self.policies.iter().any(Result::is_ok) {
            Some(self.tracker(resolved, view, now, minute_of_day))
        } else {
            None
        };
        for (m, rm) in resolved.models.iter().enumerate() {
            let gpus: Vec<usize> = (0..view.gpus.len())
                .filter(|&g| view.gpus[g].model == m)
                .collect();
            let fixed = |why: String, layout: &[usize], targets: &mut Vec<Option<usize>>| {
                for (i, &g) in gpus.iter().enumerate() {
                    targets[g] = Some(layout[i % layout.len()]);
                }
                Source::Fixed { why }
            };
            let source = match (self.kind, &mut self.policies[m], &tracker) {
                (PolicyKind::None, _, _) => Source::None,
                // Searched under other rules, the schedule may lose to the static layout
                // it was measured against: that layout runs instead.
                (PolicyKind::Periodic, _, _) => match &self.periodic_refused {
                    Some(why) => fixed(
                        format!("static (fallback: {why})"),
                        &rm.static_layout,
                        &mut targets,
                    ),
                    None => {
                        let layout = periodic_layout(resolved, m, minute_of_day);
                        let source = fixed("periodic".into(), &layout, &mut targets);
                        node_mixes(rm, view, &gpus, &mut targets);
                        source
                    }
                },
                (PolicyKind::Static, _, _) => fixed("static".into(), &rm.static_layout, &mut targets),
                (PolicyKind::MeanField, Ok(policy), Some(tracker)) => {
                    let counts = config_counts(view, m, rm.configurations.len());
                    let busy: u32 = gpus
                        .iter()
                        .flat_map(|&g| view.gpus[g].busy.iter())
                        .map(|i| u32::from(rm.model.profiles[i.profile].compute))
                        .sum();
                    self.features.clear();
                    tracker.write(minute_of_day, &counts, busy, view.gpus.len(), &mut self.features);
                    let available: Vec<bool> = rm.configurations.iter().map(|c| c.is_available()).collect();
                    let table = policy
                        .infer(&self.features)
                        .map_err(|e| Unusable::Failed(format!("{:#}", anyhow::Error::new(e))))
                        .and_then(|l| {
                            TransitionTable::new(&l, &available, self.sampling)
                                .map_err(|e| Unusable::Failed(e.to_string()))
                        });
                    match table {
                        Ok(table) => {
                            // A GPU outside the configurations is left alone.
                            let known: Vec<usize> = gpus
                                .iter()
                                .copied()
                                .filter(|&g| view.gpus[g].config.is_some())
                                .collect();
                            match policy.metadata().draw {
                                Draw::Sample => {
                                    for &g in &known {
                                        if let Some(c) = view.gpus[g].config {
                                            targets[g] = table.sample(c, &mut self.rng).ok().map(usize::from);
                                        }
                                    }
                                }
                                Draw::Apportion => {
                                    let current: Vec<u16> = known
                                        .iter()
                                        .map(|&g| view.gpus[g].config.unwrap_or(0) as u16)
                                        .collect();
                                    // The least busy GPUs move first: they drain soonest.
                                    let mut order: Vec<usize> = (0..known.len()).collect();
                                    order.sort_by_key(|&i| (view.gpus[known[i]].busy.len(), i));
                                    if let Ok(next) = table.apportion(&current, &order) {
                                        for (&g, c) in known.iter().zip(next) {
                                            targets[g] = Some(usize::from(c));
                                        }
                                    }
                                }
                            }
                            Source::Onnx {
                                file: policy.origin().to_string(),
                            }
                        }
                        Err(e) => {
                            log::error!(
                                "policy for {} failed; its GPUs keep their layouts: {e}",
                                rm.model.key
                            );
                            Source::Kept { why: e.to_string() }
                        }
                    }
                }
                // Its own file says it must not run here: the deployed behaviour is the
                // static layout, as `smartmig compare`'s guard deploys static-best.
                (PolicyKind::MeanField, Err(e @ Unusable::Refused { .. }), _) => {
                    fixed(format!("static (fallback: {e})"), &rm.static_layout, &mut targets)
                }
                (PolicyKind::MeanField, Err(e), _) => Source::Kept { why: e.to_string() },
                (PolicyKind::MeanField, Ok(_), None) => Source::None,
            };
            sources.push(source);
        }
        Decision { targets, sources }
    }

    /// The queue statistics of the pending jobs, in minutes on a time axis whose `now`
    /// is `minute_of_day` (so the time-of-day features come out right).
    fn tracker(&self, resolved: &Resolved, view: &View, now: f64, minute_of_day: f64) -> FeatureTracker {
        let routing = &resolved.config.routing;
        let mut tracker = match FeatureTracker::new(feature_layout(12), minute_of_day + HORIZON_MIN) {
            Ok(t) => t,
            // The default layout is always supported; an empty tracker keeps the loop alive.
            Err(_) => return empty_tracker(),
        };
        let compute_of: HashMap<&str, u8> = resolved
            .models
            .iter()
            .flat_map(|m| m.model.profiles.iter())
            .map(|p| (p.name.as_str(), p.compute))
            .collect();
        let default_class = self
            .classes
            .iter()
            .find(|c| c.name == routing.default_class)
            .or(self.classes.last());
        // Queues hold many jobs with the same request text: parse each text once.
        let mut compute_cache: HashMap<&[Option<String>; 4], u8> = HashMap::new();
        for j in &view.pending {
            let Some(class) = job_class(j, &self.classes).or(default_class) else {
                continue;
            };
            let compute = *compute_cache
                .entry(&j.tres)
                .or_insert_with(|| requested_compute(j, &compute_of).unwrap_or(7));
            let run_own = j.time_limit_min.map_or(routing.default_runtime_min, f64::from);
            // times[i]: minutes on SIZES[i], from the time on the requested slice.
            let own = class.speedup_on(compute);
            let mut times = [0.0; 5];
            for (i, kind) in SIZES.iter().enumerate() {
                let c = kind_compute(*kind);
                times[i] = (run_own * own / class.speedup_on(c)).max(1e-3);
            }
            for i in 1..5 {
                times[i] = times[i].min(times[i - 1]);
            }
            let ahead = |t: i64| ((t as f64 - now) / 60.0).clamp(-HORIZON_MIN, HORIZON_MIN);
            let release = minute_of_day + ahead(j.submit);
            let deadline = match j.deadline {
                Some(d) => minute_of_day + ahead(d),
                None => release + routing.slack * times[4],
            };
            let job = Job {
                id: j.id,
                release,
                deadline: deadline.max(release),
                times,
                class: 0,
            };
            tracker.enqueue(&job, 1.0);
        }
        tracker
    }
}

fn empty_tracker() -> FeatureTracker {
    // Unreachable in practice (see `tracker`); a one-minute horizon is always valid.
    FeatureTracker::new(feature_layout(12), 1.0).unwrap_or_else(|_| unreachable!("default layout"))
}

fn kind_compute(kind: smartmig_core::mig::Kind) -> u8 {
    kind.as_str().trim_end_matches(['g', '*']).parse().unwrap_or(1)
}

/// The compute slices of the type a job asks for (None: `gpu:mig`, untyped or unknown).
fn requested_compute(j: &SlurmJob, compute_of: &HashMap<&str, u8>) -> Option<u8> {
    j.tres.iter().flatten().find_map(|t| {
        parse_gres(t, "job")
            .ok()?
            .iter()
            .find_map(|g| compute_of.get(g.gpu_type.as_str()).copied())
    })
}

fn job_class<'a>(j: &SlurmJob, classes: &'a [JobClass]) -> Option<&'a JobClass> {
    let name = parse_hints(j.comment.as_deref()?).ok()?.class?;
    classes.iter().find(|c| c.name == name)
}

/// GPUs of model `m` in each configuration.
fn config_counts(view: &View, m: usize, k: usize) -> Vec<u32> {
    let mut counts = vec![0u32; k];
    for g in view.gpus.iter().filter(|g| g.model == m) {
        if let Some(c) = g.config {
            counts[c] += 1;
        }
    }
    counts
}

/// Turns the cycled targets of `gpus` (one model's GPUs) into each node's mix: on every
/// node the GPUs whose move stops the fewest running jobs take the configurations the node
/// lacks ([`assign_mix`]), so that in drain mode a node changes through its idle GPUs
/// instead of waiting on the busy ones the cycle happened to name. GPUs whose layout is
/// none of the configurations keep their cycled target.
fn node_mixes(rm: &ResolvedModel, view: &View, gpus: &[usize], targets: &mut [Option<usize>]) {
    let mut nodes: Vec<&str> = gpus.iter().map(|&g| view.gpus[g].node.as_str()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    for node in nodes {
        let here: Vec<usize> = gpus
            .iter()
            .copied()
            .filter(|&g| view.gpus[g].node == node && view.gpus[g].config.is_some())
            .collect();
        let current: Vec<u16> = here
            .iter()
            .map(|&g| view.gpus[g].config.unwrap_or(0) as u16)
            .collect();
        let want: Vec<u16> = here.iter().map(|&g| targets[g].unwrap_or(0) as u16).collect();
        let stops = |i: usize, c: u16| {
            let layout = &rm.configurations[usize::from(c)].layout;
            view.gpus[here[i]]
                .busy
                .iter()
                .filter(|b| !layout.contains(b))
                .count() as u32
        };
        for (&g, c) in here.iter().zip(assign_mix(&current, &want, stops)) {
            targets[g] = Some(usize::from(c));
        }
    }
}

/// The periodic schedule's configurations for model `m` at a minute of the day.
fn periodic_layout(resolved: &Resolved, m: usize, minute_of_day: f64) -> Vec<usize> {
    let entries = &resolved.config.policy.periodic;
    let at =
        |e: &smartmig_core::config::PeriodicEntry| parse_time_of_day(e.at.get_ref()).map_or(0.0, f64::from);
    // The entry in force: the last one whose time has come, else (before the first) the
    // last one, wrapping from the day before.
    let entry = entries
        .iter()
        .rposition(|e| at(e) <= minute_of_day)
        .or_else(|| entries.len().checked_sub(1));
    let rm = &resolved.models[m];
    match entry.and_then(|e| rm.periodic.get(e)) {
        Some(layout) if !layout.is_empty() => layout.clone(),
        _ => rm.static_layout.clone(),
    }
}

/// Writes a policy file for `model` that moves every GPU to configuration `to` with
/// probability ≈ 1 (one linear layer: zero weights, a bias of 20 on column `to` of
/// every row), with the deployment guard's verdict `guard`. For trials and tests that
/// need a known decision through the real ONNX path.
pub fn write_preferring(
    resolved: &Resolved,
    model: usize,
    mode: Mode,
    to: usize,
    guard: Option<&str>,
) -> Result<PathBuf, smartmig_policy::WriteError> {
    let mut meta = expected_metadata(resolved, model, mode);
    meta.guard = guard.map(str::to_string);
    let path = policy_path(resolved, model, mode);
    smartmig_policy::onnx_writer::write(&path, &preferring(&meta, &[to]), &meta)?;
    Ok(path)
}

/// One linear layer whose every row puts a bias of 20 on each column in `to` (equally
/// likely among them, ≈ 1 together).
fn preferring(meta: &PolicyMetadata, to: &[usize]) -> smartmig_policy::PolicyNetwork {
    let (d, k) = (meta.input_dim(), meta.k());
    let mut b = vec![0.0f32; k * k];
    for row in 0..k {
        for &c in to {
            b[row * k + c] = 20.0;
        }
    }
    smartmig_policy::PolicyNetwork {
        layers: vec![smartmig_policy::Dense {
            in_dim: d,
            out_dim: k * k,
            w: vec![0.0; d * k * k],
            b,
        }],
        hidden: smartmig_policy::Activation::Tanh,
    }
}

#[cfg(test)]
mod tests {
    use smartmig_core::config::Config;

    use smartmig_policy::Requeued;

    use super::super::fake::FakeSlurm;
    use super::*;

    fn resolved(dir: &std::path::Path) -> Resolved {
        let text = format!(
            "version = 1\n[policy]\nkind = \"mean-field\"\nmodels_dir = \"{}\"\nstatic_layout = [\"c2\"]\n",
            dir.display()
        );
        Config::parse(&text, "t.toml").unwrap().resolve(None).unwrap()
    }

    /// Writes a policy for model 0 in drain mode with `draw` and `guard`, rows split
    /// equally between configurations `to`.
    fn write(r: &Resolved, to: &[usize], draw: Draw, guard: Option<&str>) {
        let mut meta = expected_metadata(r, 0, Mode::Drain);
        meta.draw = draw;
        meta.guard = guard.map(str::to_string);
        let path = policy_path(r, 0, Mode::Drain);
        smartmig_policy::onnx_writer::write(&path, &preferring(&meta, to), &meta).unwrap();
    }

    /// Three idle GPUs in c2 on one node, as the central role reads them.
    fn view(r: &Resolved) -> View {
        let c2 = ("A100-SXM4-40GB", "4g.20gb@0 3g.20gb@4");
        let nodes = vec![FakeSlurm::node("n", &[c2, c2, c2])];
        View::build(r, nodes, Vec::new(), &mut Default::default())
    }

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("smartmig-decide-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A periodic entry written as an instance list runs as the configuration it equals,
    /// not as the static layout (it was dropped when only names were looked up).
    #[test]
    fn a_periodic_entry_given_as_an_instance_list_is_followed() {
        let text = "version = 1\n[policy]\nkind = \"periodic\"\nstatic_layout = [\"c1\"]\n\
                    [[policy.periodic]]\nat = \"00:00\"\nlayout = [\"4g.20gb+3g.20gb\"]\n\
                    [[policy.periodic]]\nat = \"12:00\"\nlayout = [\"c5\"]\n";
        let r = Config::parse(text, "t.toml").unwrap().resolve(None).unwrap();
        let c = |name: &str| r.models[0].configurations.iter().position(|c| c.name == name);
        let mut decider = Decider::new(&r, Mode::Drain, 1);
        let at = |hour: f64| 86_400.0 * 100.0 + 3_600.0 * hour;
        let morning = decider.decide(&r, &view(&r), at(6.0)).targets;
        assert_eq!(morning, vec![c("c2"); 3]);
        let evening = decider.decide(&r, &view(&r), at(18.0)).targets;
        assert_eq!(evening, vec![c("c5"); 3]);
    }

    /// A schedule searched under other re-layout rules than the daemon's runs as the
    /// static layout, and the decision names both rules; under the same rules it runs.
    #[test]
    fn a_periodic_schedule_searched_under_other_rules_runs_as_the_static_layout() {
        let drain = "[controller]\nmode = \"drain\"\n";
        let searched = smartmig_core::config::RelayoutRules::of(
            &Config::parse(&format!("version = 1\n{drain}"), "t.toml").unwrap(),
        )
        .unwrap()
        .to_string();
        let resolved = |controller: &str| {
            let text = format!(
                "version = 1\n[policy]\nkind = \"periodic\"\nstatic_layout = [\"c1\"]\n\
                 periodic_tuned_under = \"{searched}\"\n\
                 [[policy.periodic]]\nat = \"00:00\"\nlayout = [\"c5\"]\n{controller}"
            );
            Config::parse(&text, "t.toml").unwrap().resolve(None).unwrap()
        };
        let r = resolved(drain);
        let c = |name: &str| r.models[0].configurations.iter().position(|c| c.name == name);
        let same = Decider::new(&r, Mode::Drain, 1).decide(&r, &view(&r), 3_600.0);
        assert_eq!(same.targets, vec![c("c5"); 3]);
        let r = resolved("[controller]\nmode = \"drain\"\n[controller.central]\npadding = true\n");
        let other = Decider::new(&r, Mode::Drain, 1).decide(&r, &view(&r), 3_600.0);
        assert_eq!(other.targets, vec![c("c1"); 3]);
        assert!(
            matches!(&other.sources[0], Source::Fixed { why }
                if why.starts_with("static (fallback: ") && why.contains("padding = false") && why.contains("padding = true")),
            "{:?}",
            other.sources
        );
    }

    /// A periodic entry is each node's mix: the GPU the cycle names for a move but whose
    /// move would stop a running job keeps its layout, and an idle GPU of the node moves.
    #[test]
    fn a_periodic_entry_moves_the_nodes_idle_gpu_not_the_busy_one_the_cycle_names() {
        let text = "version = 1\n[policy]\nkind = \"periodic\"\nstatic_layout = [\"c2\"]\n\
                    [[policy.periodic]]\nat = \"00:00\"\nlayout = [\"c1\", \"c2\"]\n";
        let r = Config::parse(text, "t.toml").unwrap().resolve(None).unwrap();
        let c = |name: &str| r.models[0].configurations.iter().position(|c| c.name == name);
        let c2 = ("A100-SXM4-40GB", "4g.20gb@0 3g.20gb@4");
        let nodes = vec![FakeSlurm::node("n", &[c2, c2])];
        // Node n's Gres lists 3g.20gb first: GPU 0's 4g.20gb is device 2.
        let jobs = vec![FakeSlurm::running(7, "n", "4g.20gb", 2)];
        let v = View::build(&r, nodes, jobs, &mut Default::default());
        assert_eq!(v.gpus[0].busy.len(), 1, "the job holds GPU 0's 4g.20gb");
        let mut decider = Decider::new(&r, Mode::Drain, 1);
        let targets = decider.decide(&r, &v, 3_600.0).targets;
        assert_eq!(targets, vec![c("c2"), c("c1")]);
        // Three idle GPUs in c2 get the cycle's mix, two c1 and a c2, with one move fewer
        // than the cycle's own order (c1 c2 c1): the first GPU keeps its c2.
        let targets = decider.decide(&r, &view(&r), 3_600.0).targets;
        assert_eq!(targets, vec![c("c2"), c("c1"), c("c1")]);
    }

    #[test]
    fn a_policy_whose_deployment_guard_failed_is_not_run() {
        let d = dir("guard");
        let r = resolved(&d);
        write(
            &r,
            &[4],
            Draw::Sample,
            Some("failed: -4.3% ± 0.8% over static-best on validation days"),
        );
        let decider = Decider::new(&r, Mode::Drain, 1);
        let why = decider.policies[0]
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default();
        // Without ONNX Runtime the file is refused before its metadata is read.
        if decider.runtime.is_ok() {
            assert!(why.contains("its deployment guard failed: -4.3%"), "{why}");
        }
        std::fs::remove_dir_all(&d).ok();
    }

    /// A site running mean-field policies from `d` in `mode`, static layout c1, with
    /// `central` as its `[controller.central]` keys.
    fn mean_field_site(d: &std::path::Path, mode: &str, central: &str) -> Resolved {
        let text = format!(
            "version = 1\n[policy]\nkind = \"mean-field\"\nmodels_dir = \"{}\"\n\
             static_layout = [\"c1\"]\n[controller]\nmode = \"{mode}\"\n\
             [controller.central]\n{central}",
            d.display()
        );
        Config::parse(&text, "t.toml").unwrap().resolve(None).unwrap()
    }

    /// The position of configuration `name` among model 0's.
    fn config_index(r: &Resolved, name: &str) -> Option<usize> {
        r.models[0].configurations.iter().position(|c| c.name == name)
    }

    #[test]
    fn a_preempt_policy_validated_where_requeued_jobs_resume_runs_only_where_they_do() {
        let d = dir("requeued");
        let site = |requeued: &str| mean_field_site(&d, "preempt", requeued);
        // The shipped preempt policies' case: trained and validated under `resume`.
        let restart = site("");
        let c = |name: &str| config_index(&restart, name);
        let mut meta = expected_metadata(&restart, 0, Mode::Preempt);
        assert_eq!(meta.requeued, Requeued::Restart, "the default: jobs start over");
        meta.requeued = Requeued::Resume;
        let path = policy_path(&restart, 0, Mode::Preempt);
        smartmig_policy::onnx_writer::write(&path, &preferring(&meta, &[4]), &meta).unwrap();
        let decider = Decider::new(&restart, Mode::Preempt, 1);
        if decider.runtime.is_err() {
            eprintln!("skipped: no ONNX Runtime here");
            return;
        }
        let why = decider.policies[0]
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(why.contains("validated where requeued jobs resume"), "{why}");
        assert!(why.contains(&path.display().to_string()), "{why}");
        // The GPUs go to the static layout (c1; they are in c2), and the decision says why.
        let mut decider = decider;
        let decision = decider.decide(&restart, &view(&restart), 0.0);
        assert_eq!(decision.targets, vec![c("c1"); 3]);
        assert!(
            matches!(&decision.sources[0], Source::Fixed { why }
                if why.starts_with("static (fallback: ") && why.contains("requeued = \"restart\"")),
            "{:?}",
            decision.sources
        );
        // A site whose jobs checkpoint runs it.
        let resume = site("requeued = \"resume\"\n");
        let mut decider = Decider::new(&resume, Mode::Preempt, 1);
        assert!(decider.policies[0].is_ok());
        let decision = decider.decide(&resume, &view(&resume), 0.0);
        assert_eq!(decision.targets, vec![c("c5"); 3]);
        // Validated where jobs start over but requeueing only jobs younger than 60 s: it
        // runs where smartmigd keeps that limit, not where it would requeue older jobs.
        meta.requeued = Requeued::Restart;
        meta.requeue_max_run_s = Some(60.0);
        smartmig_policy::onnx_writer::write(&path, &preferring(&meta, &[4]), &meta).unwrap();
        let why = Decider::new(&restart, Mode::Preempt, 1).policies[0]
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(why.contains("requeue_max_run_s = 60 s"), "{why}");
        let limited = site("requeue_max_run_s = 60\n");
        assert!(Decider::new(&limited, Mode::Preempt, 1).policies[0].is_ok());
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_policy_validated_with_padding_runs_only_where_smartmigd_writes_padding() {
        let d = dir("padded-policy");
        let site = |padding: bool| mean_field_site(&d, "drain", &format!("padding = {padding}\n"));
        let unpadded = site(false);
        let c = |name: &str| config_index(&unpadded, name);
        let mut meta = expected_metadata(&unpadded, 0, Mode::Drain);
        meta.padding = true;
        let path = policy_path(&unpadded, 0, Mode::Drain);
        smartmig_policy::onnx_writer::write(&path, &preferring(&meta, &[4]), &meta).unwrap();
        let mut decider = Decider::new(&unpadded, Mode::Drain, 1);
        if decider.runtime.is_err() {
            eprintln!("skipped: no ONNX Runtime here");
            return;
        }
        let decision = decider.decide(&unpadded, &view(&unpadded), 0.0);
        assert_eq!(decision.targets, vec![c("c1"); 3], "the static layout");
        assert!(
            matches!(&decision.sources[0], Source::Fixed { why }
                if why.starts_with("static (fallback: ") && why.contains("padding = false")),
            "{:?}",
            decision.sources
        );
        let padded = site(true);
        let mut decider = Decider::new(&padded, Mode::Drain, 1);
        assert!(decider.policies[0].is_ok());
        let decision = decider.decide(&padded, &view(&padded), 0.0);
        assert_eq!(decision.targets, vec![c("c5"); 3]);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn an_apportioned_policy_splits_a_row_exactly_as_its_file_says() {
        let d = dir("apportion");
        let r = resolved(&d);
        // Every row: c1 (0) and c5 (4) equally likely.
        write(
            &r,
            &[0, 4],
            Draw::Apportion,
            Some("passed: +7% ± 1% over static-best"),
        );
        let mut decider = Decider::new(&r, Mode::Drain, 1);
        if decider.runtime.is_err() {
            eprintln!("skipped: no ONNX Runtime here");
            return;
        }
        for seed_cycle in 0..3 {
            let got = decider
                .decide(&r, &view(&r), 1_000.0 * f64::from(seed_cycle))
                .targets;
            let (c1, c5) = (
                got.iter().filter(|t| **t == Some(0)).count(),
                got.iter().filter(|t| **t == Some(4)).count(),
            );
            // 3 × ½ each: one by floor each, the remainder to the first (c1): 2 and 1, always.
            assert_eq!((c1, c5), (2, 1), "{got:?}");
        }
        std::fs::remove_dir_all(&d).ok();
    }
}
