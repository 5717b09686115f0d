//! Scenario files: the cluster, the workload, the baselines and the objective of a run.
//!
//! A scenario is TOML (`etc/scenarios/*.toml`). Every command that takes one also takes
//! `--set KEY=VALUE` overrides, applied to the TOML tree before it is checked, so an
//! override is validated exactly like the file.

// `!(x > 0.0)` is deliberate in the checks below: unlike `x <= 0.0`, it also refuses NaN.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use std::path::Path;

use serde::{Deserialize, Serialize};
use smartmig_core::error::{toml_error, SourceError};
use smartmig_core::mig::{
    read_entry, resolve_configurations, Catalogue, Configuration, Driver, GpuModel, LayoutEntry,
};

/// The scenario format version this build reads.
pub const SCENARIO_VERSION: u32 = 1;

/// Most GPUs a scenario may have: the engine numbers GPUs and their instance slots with
/// 32-bit ids.
pub const MAX_GPUS: usize = 1 << 24;

/// The embedded reference scenario (the paper's 8 × A100-40GB day).
pub const REFERENCE: &str = include_str!("../../etc/scenarios/paper-a100x8.toml");

/// A layout entry meaning each GPU's whole-GPU configuration (c1, q1): no partitioning.
pub const WHOLE_GPU: &str = "whole-gpu";

/// A scenario problem.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A key or value is wrong.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A `--set` override is malformed.
    #[error("--set {0}")]
    Set(String),
}

/// A whole scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Format version.
    pub version: u32,
    /// Short name.
    pub name: String,
    /// One line saying what it models.
    #[serde(default)]
    pub description: String,
    /// The GPUs.
    pub cluster: ClusterSpec,
    /// Where jobs come from.
    pub workload: WorkloadSpec,
    /// Baseline layouts.
    #[serde(default)]
    pub baselines: BaselineSpec,
    /// How repartitions happen and what they cost.
    #[serde(default)]
    pub repartition: RepartitionSpec,
    /// The energy-tardiness objective.
    #[serde(default)]
    pub objective: ObjectiveSpec,
}

/// `[cluster]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// GPU groups.
    pub gpus: Vec<GpuGroup>,
    /// Driver rules.
    #[serde(default)]
    pub driver: Driver,
    /// GPUs per node, in order: GPUs `n·k .. (n+1)·k` share node `n` (drain semantics
    /// re-lay out nodes, not single GPUs).
    #[serde(default = "default_gpus_per_node")]
    pub gpus_per_node: u32,
    /// The configurations the site lays its GPUs out as (a site whose layouts are a
    /// mig-parted file's mig-configs): `tune-static` and `tune-periodic` search only these.
    /// The baselines named in the file may use others. None: every configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configurations: Option<SiteConfigurations>,
}

/// `cluster.configurations`: one list for every GPU model, or one per model.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SiteConfigurations {
    /// The same configurations on every model (`["c1", "c7"]`).
    All(Vec<String>),
    /// Per model key, its configurations (`{ "a100-40gb" = ["c1", "c7"], "a30-24gb" =
    /// ["q1"] }`); a model not listed takes every configuration.
    PerModel(std::collections::BTreeMap<String, Vec<String>>),
}

/// As written in a scenario or a `--set` value (TOML): `["c1", "c7"]`, `{ a100-40gb = ["c1"] }`.
impl std::fmt::Display for SiteConfigurations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = toml::Value::try_from(self).map_err(|_| std::fmt::Error)?;
        write!(f, "{value}")
    }
}

impl SiteConfigurations {
    /// Every configuration name listed, whatever the model.
    fn names(&self) -> Vec<&String> {
        match self {
            SiteConfigurations::All(names) => names.iter().collect(),
            SiteConfigurations::PerModel(per) => per.values().flatten().collect(),
        }
    }
}

impl ClusterSpec {
    /// Whether the site lays GPUs of `model` (its catalogue key) out as configuration
    /// `name` (every one without `configurations`).
    pub fn site_takes(&self, model: &str, name: &str) -> bool {
        let listed = |names: &[String]| names.iter().any(|a| a.eq_ignore_ascii_case(name));
        match &self.configurations {
            None => true,
            Some(SiteConfigurations::All(names)) => listed(names),
            Some(SiteConfigurations::PerModel(per)) => per.get(model).is_none_or(|names| listed(names)),
        }
    }
}

/// A number of GPUs of one model.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuGroup {
    /// Catalogue key or name.
    pub model: String,
    /// How many.
    pub count: u32,
}

/// `[workload]`: generated (diurnal Poisson) or read from a trace.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// `generator` or `trace`.
    #[serde(default)]
    pub source: WorkloadSource,
    /// Simulated days (generator).
    #[serde(default = "one")]
    pub days: f64,
    /// Multiplier on the base hourly rates (generator).
    #[serde(default = "one")]
    pub multiplier: f64,
    /// Arrival rates in jobs/minute for hours 0..23 at multiplier 1 (generator).
    #[serde(default)]
    pub hourly_rates: Vec<f64>,
    /// Deadline = release + U(lo, hi) × time on a full GPU (generator).
    #[serde(default = "default_deadline_factor")]
    pub deadline_factor: [f64; 2],
    /// Job classes with their shares (generator).
    #[serde(default, rename = "class")]
    pub classes: Vec<JobClassSpec>,
    /// Trace file (trace), relative to the scenario file.
    #[serde(default)]
    pub trace: Option<String>,
    /// Trace format (trace).
    #[serde(default)]
    pub format: Option<TraceFormat>,
}

/// Where a scenario's jobs come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadSource {
    /// The reference diurnal generator (docs/model.md §2).
    #[default]
    Generator,
    /// A trace file.
    Trace,
}

/// Trace file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum TraceFormat {
    /// `sacct --parsable2` output.
    Sacct,
    /// The Alibaba openb pod CSV.
    Alibaba,
    /// smartmig's own job list (what `simulate --dump-jobs` writes).
    Jobs,
}

/// One job class of the generator.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobClassSpec {
    /// Label (`bert-infer`).
    pub name: String,
    /// Fraction of arrivals (shares are normalised).
    pub share: f64,
    /// Processing time on one slice (1g), minutes.
    pub duration: DurationSpec,
    /// Speed-up over 1g on 1g/2g/3g/4g/7g (first is 1).
    pub speedup: [f64; 5],
    /// Relative share in each hour 0..23, when the mix moves over the day (replaces
    /// `share` hour by hour; shares are normalised within each hour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hourly_share: Option<Vec<f64>>,
}

impl JobClassSpec {
    /// The class's (unnormalised) share of arrivals in hour `hour` of the day.
    pub fn share_at(&self, hour: usize) -> f64 {
        self.hourly_share
            .as_ref()
            .and_then(|h| h.get(hour % 24).copied())
            .unwrap_or(self.share)
    }
}

/// A processing-time distribution, in minutes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DurationSpec {
    /// Exponential with the given mean.
    Exponential {
        /// Mean.
        mean: f64,
    },
    /// Log-normal with 90% of the mass between `p5` and `p95`.
    LognormalRange {
        /// 5th percentile.
        p5: f64,
        /// 95th percentile.
        p95: f64,
    },
    /// A fixed time.
    Fixed {
        /// The time.
        value: f64,
    },
}

/// `[baselines]`: layouts the comparison runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineSpec {
    /// The paper's reference static layout: a layout per GPU (cycled if shorter), each a
    /// configuration name or an instance list equal to one of the GPU's configurations.
    #[serde(default = "default_reference_layout")]
    pub reference_layout: Vec<String>,
    /// Periodic schedule: layouts by time of day.
    #[serde(default = "default_periodic")]
    pub periodic: Vec<PeriodicSpec>,
    /// Best static layout found by `tune-static --write` (absent until tuned).
    #[serde(default)]
    pub static_best: Option<Vec<String>>,
    /// Best time-of-day schedule found by `tune-periodic --write` (absent until tuned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub periodic_best: Option<Vec<PeriodicSpec>>,
}

/// One entry of a periodic schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeriodicSpec {
    /// `HH:MM` from which `layout` applies.
    pub at: String,
    /// Layout per GPU (cycled), as in `reference_layout`.
    pub layout: Vec<String>,
}

/// Repartition semantics (in smartmig-policy: policy files are named after them).
pub use smartmig_policy::Semantics;

/// Which Slurm rule a re-layout obeys on a node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeRule {
    /// Slurm 22.05 (and 24.11): Slurm requeues every running job of a node whose total
    /// GPU-instance count changes. Under drain such a node must have no running job when
    /// it is re-laid out, so the whole node drains (a node whose count stays drains only
    /// the instances that change); under preempt all its jobs are preempted.
    #[default]
    #[serde(rename = "slurm-22.05")]
    Slurm2205,
    /// Only the instances that change drain, whatever the node's count (what a Slurm
    /// that re-reads a node's GPUs without requeueing its jobs would allow).
    Instances,
}

/// `[repartition]`: what a repartition costs and the limits the daemon puts on them
/// (named as in smartmig.toml's `[controller.central]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepartitionSpec {
    /// Preempt or drain.
    #[serde(default)]
    pub semantics: Semantics,
    /// Preempt: seconds a repartition costs the jobs it preempts (the paper's 4 s).
    #[serde(default = "four")]
    pub penalty_s: f64,
    /// Drain: seconds a GPU is unavailable while it switches (a Slurm re-layout).
    #[serde(default = "four")]
    pub reconfigure_s: f64,
    /// Least seconds between two re-layout batches, cluster-wide (0: no limit).
    #[serde(default = "default_min_relayout_interval")]
    pub min_relayout_interval_s: f64,
    /// A GPU's new configuration must be chosen in this many consecutive decisions
    /// before it is acted on (1: at once).
    #[serde(default = "default_persist_cycles")]
    pub persist_cycles: u32,
    /// Most nodes one re-layout batch changes (>= 1).
    #[serde(default = "default_max_nodes_per_batch")]
    pub max_nodes_per_batch: u32,
    /// Seconds between the decisions of a time-of-day schedule (the daemon's
    /// `policy.decision_interval_s`).
    #[serde(default = "default_decision_interval")]
    pub decision_interval_s: f64,
    /// The Slurm rule for a node whose GPU count changes.
    #[serde(default)]
    pub node_rule: NodeRule,
    /// How Slurm numbers a node's devices and which changes keep a running job's index.
    #[serde(default)]
    pub index_rule: IndexRule,
    /// Drain: what is held free of new jobs while a change waits for its jobs to end.
    #[serde(default)]
    pub drain_hold: DrainHold,
    /// Preempt: what a job stopped by a re-layout keeps when it runs again.
    #[serde(default)]
    pub requeued: Requeued,
    /// Preempt: a change that would stop a job running longer than this waits for it, as
    /// under drain (None: any job is stopped).
    #[serde(default)]
    pub requeue_max_run_s: Option<f64>,
}

/// Preempt: what a job stopped by a re-layout keeps when it runs again (`resume`, the
/// paper's model, by default).
pub use smartmig_policy::Requeued;

/// Drain: what a change that waits for running jobs holds free of new ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrainHold {
    /// Nothing (smartmigd's drain mode): a change is made at a decision that finds idle
    /// everything it destroys (on Slurm 22.05's rule, a count change: the whole node), and
    /// waits otherwise, while Slurm keeps starting jobs on those instances. Slurm has no
    /// drain of single GPU devices.
    #[default]
    None,
    /// The instances a change destroys (or, on Slurm 22.05's rule, a node whose count
    /// changes) take no new job until they are idle, then switch: the simulator's drain
    /// before 2026-12-01. Slurm cannot hold single devices, so smartmigd cannot do this.
    Instances,
    /// The whole node (Slurm's node drain: running jobs go on, no new job starts on it)
    /// until its changing instances are idle, then it switches and resumes: what Slurm
    /// allows, at the cost of the node's other slices.
    Node,
    /// Every instance of a type a change destroys, on that node, until the changing
    /// instances are idle: what the job_submit plugin can do by routing jobs around the
    /// type on that node.
    Type,
}

/// The device-index rule a re-layout keeps on a node with running jobs (sim::index_rule).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IndexRule {
    /// smartmigd's: devices numbered by type in the node's `Gres` order (a type keeps its
    /// place, a new one goes last), then GPU, then placement start. Under
    /// drain a change goes ahead only if every busy device keeps its index; under preempt
    /// it goes ahead and the jobs whose device index it moves are preempted too.
    #[default]
    Fixed,
    /// The numbering chosen at each re-layout (type order in `Gres`, gres.conf order
    /// within a type) to keep busy indices whenever one can: not done by smartmigd yet.
    Assigned,
    /// Padding records: every type a block of fixed size in the node's `Gres` (padding
    /// fills what its instances leave), so the node's GPU count never changes (no node
    /// drains whole) and a change moves no other type's indices; within a type the
    /// devices are in GPU and placement order (as smartmigd wrote gres.conf until
    /// 2026-12-06), so a busy device keeps its index while as many of its type come
    /// before it.
    Padded,
    /// smartmigd with padding records (`[controller.central] padding = true`): as
    /// `padded`, and gres.conf's order within a type chosen at each re-layout so that each
    /// busy device keeps its position where its type's new count allows.
    PaddedAssigned,
    /// No rule: what the simulator did before smartmigd kept indices (Slurm may then
    /// hand a running job's device to another job).
    Off,
}

impl IndexRule {
    /// Whether padding records keep every type's block (and the node's GPU count) fixed.
    pub fn padded(self) -> bool {
        matches!(self, IndexRule::Padded | IndexRule::PaddedAssigned)
    }
}

/// `[objective]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectiveSpec {
    /// Weight `a` of energy against tardiness.
    #[serde(default = "half")]
    pub energy_weight: f64,
    /// Tardiness tolerance τ as a fraction of the jobs' mean time on a full GPU: ET
    /// compares (t + τ)/(t_ref + τ), so it stays finite, and is 1 for equal schedules,
    /// when the reference is never late (docs/evaluation.md, "The objective").
    #[serde(default = "default_tardiness_tolerance")]
    pub tardiness_tolerance: f64,
}

impl Default for BaselineSpec {
    fn default() -> Self {
        BaselineSpec {
            reference_layout: default_reference_layout(),
            periodic: default_periodic(),
            static_best: None,
            periodic_best: None,
        }
    }
}
impl Default for RepartitionSpec {
    fn default() -> Self {
        RepartitionSpec {
            semantics: Semantics::Preempt,
            penalty_s: 4.0,
            reconfigure_s: 4.0,
            min_relayout_interval_s: default_min_relayout_interval(),
            persist_cycles: default_persist_cycles(),
            max_nodes_per_batch: default_max_nodes_per_batch(),
            decision_interval_s: default_decision_interval(),
            node_rule: NodeRule::default(),
            index_rule: IndexRule::default(),
            drain_hold: DrainHold::default(),
            requeued: Requeued::default(),
            requeue_max_run_s: None,
        }
    }
}
impl Default for ObjectiveSpec {
    fn default() -> Self {
        ObjectiveSpec {
            energy_weight: 0.5,
            tardiness_tolerance: default_tardiness_tolerance(),
        }
    }
}

fn one() -> f64 {
    1.0
}
fn four() -> f64 {
    4.0
}
fn half() -> f64 {
    0.5
}
fn default_gpus_per_node() -> u32 {
    8
}
fn default_min_relayout_interval() -> f64 {
    900.0
}
fn default_persist_cycles() -> u32 {
    2
}
fn default_max_nodes_per_batch() -> u32 {
    4
}
fn default_decision_interval() -> f64 {
    60.0
}
fn default_tardiness_tolerance() -> f64 {
    0.05
}
fn default_deadline_factor() -> [f64; 2] {
    [1.0, 1.5]
}
fn default_reference_layout() -> Vec<String> {
    ["c1", "c1", "c2", "c3", "c3", "c5", "c5", "c10"]
        .map(String::from)
        .to_vec()
}
fn default_periodic() -> Vec<PeriodicSpec> {
    vec![
        PeriodicSpec {
            at: "00:00".into(),
            layout: vec!["c1".into()],
        },
        PeriodicSpec {
            at: "08:00".into(),
            layout: vec!["c6".into()],
        },
    ]
}

/// One GPU of a resolved cluster.
#[derive(Debug, Clone)]
pub struct GpuSlot {
    /// Index of its model in [`ResolvedScenario::models`].
    pub model: usize,
}

/// A GPU model of the cluster with its configurations.
#[derive(Debug, Clone)]
pub struct ClusterModel {
    /// The model.
    pub model: GpuModel,
    /// Configurations c1..c12 on it.
    pub configurations: Vec<Configuration>,
}

/// A checked scenario with its GPU models resolved.
#[derive(Debug, Clone)]
pub struct ResolvedScenario {
    /// The scenario as written (after overrides).
    pub scenario: Scenario,
    /// Distinct GPU models.
    pub models: Vec<ClusterModel>,
    /// Every GPU, in group order.
    pub gpus: Vec<GpuSlot>,
    /// Directory the scenario file is in (traces are relative to it).
    pub base_dir: Option<std::path::PathBuf>,
}

impl Scenario {
    /// Reads a scenario file with overrides.
    pub fn load(path: &Path, sets: &[String]) -> Result<ResolvedScenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut r = Scenario::parse(&text, &path.display().to_string(), sets)?;
        r.base_dir = path.parent().map(Path::to_path_buf);
        Ok(r)
    }

    /// The embedded reference scenario with overrides.
    pub fn reference(sets: &[String]) -> Result<ResolvedScenario, ScenarioError> {
        Scenario::parse(REFERENCE, "embedded paper-a100x8.toml", sets)
    }

    /// Parses scenario text, applies `KEY=VALUE` overrides, checks and resolves it.
    pub fn parse(text: &str, origin: &str, sets: &[String]) -> Result<ResolvedScenario, ScenarioError> {
        if sets.is_empty() {
            let scenario: Scenario = toml::from_str(text).map_err(|e| toml_error(origin, text, &e))?;
            return scenario.resolve(origin);
        }
        let mut table: toml::Table = toml::from_str(text).map_err(|e| toml_error(origin, text, &e))?;
        for s in sets {
            apply_set(&mut table, s)?;
        }
        let merged = toml::to_string(&table).map_err(|e| ScenarioError::Set(e.to_string()))?;
        let with_sets = format!("{origin} with --set {}", sets.join(" --set "));
        toml::from_str::<Scenario>(&merged)
            .map_err(|e| {
                let mut err = toml_error(&with_sets, &merged, &e);
                // Line numbers refer to the merged text, not the file: drop them.
                err.line = None;
                err.column = None;
                ScenarioError::from(err)
            })
            .and_then(|scenario| scenario.resolve(&with_sets))
            .map_err(|err| blame_set(err, sets, || Scenario::parse(text, origin, &[]).is_ok()))
    }

    fn resolve(self, origin: &str) -> Result<ResolvedScenario, ScenarioError> {
        let bad = |key: &str, message: String| -> ScenarioError {
            SourceError {
                origin: origin.to_string(),
                line: None,
                column: None,
                key: Some(key.into()),
                message,
            }
            .into()
        };
        if self.version != SCENARIO_VERSION {
            return Err(bad(
                "version",
                format!(
                    "version {} is not supported (this build reads {SCENARIO_VERSION})",
                    self.version
                ),
            ));
        }
        let catalogue = Catalogue::embedded();
        let listed = self
            .cluster
            .configurations
            .as_ref()
            .map(SiteConfigurations::names);
        let unknown = listed.iter().flatten().find(|a| {
            !catalogue
                .configurations
                .iter()
                .any(|c| c.name.eq_ignore_ascii_case(a))
        });
        if let Some(name) = unknown {
            return Err(bad(
                "cluster.configurations",
                format!("unknown configuration `{name}`"),
            ));
        }
        if let Some(SiteConfigurations::PerModel(per)) = &self.cluster.configurations {
            let in_cluster = |key: &str| {
                self.cluster
                    .gpus
                    .iter()
                    .any(|g| catalogue.model(&g.model).is_ok_and(|m| m.key == key))
            };
            if let Some(key) = per.keys().find(|k| !in_cluster(k)) {
                return Err(bad(
                    "cluster.configurations",
                    format!("`{key}` is no GPU model of the cluster (its models go by their catalogue keys)"),
                ));
            }
        }
        let mut models: Vec<ClusterModel> = Vec::new();
        let mut gpus = Vec::new();
        if self.cluster.gpus.is_empty() {
            return Err(bad("cluster.gpus", "names no GPUs".into()));
        }
        for g in &self.cluster.gpus {
            let m = catalogue
                .model(&g.model)
                .map_err(|e| bad("cluster.gpus.model", e.to_string()))?;
            if g.count == 0 {
                return Err(bad("cluster.gpus.count", format!("{} has count 0", g.model)));
            }
            let idx = match models.iter().position(|x| x.model.key == m.key) {
                Some(i) => i,
                None => {
                    let configurations = resolve_configurations(&catalogue, m, self.cluster.driver)
                        .map_err(|e| bad("cluster.gpus.model", e.to_string()))?;
                    // A model's own list names only its configurations.
                    if let Some(SiteConfigurations::PerModel(per)) = &self.cluster.configurations {
                        let foreign = per
                            .get(&m.key)
                            .into_iter()
                            .flatten()
                            .find(|n| !configurations.iter().any(|c| c.name.eq_ignore_ascii_case(n)));
                        if let Some(name) = foreign {
                            return Err(bad(
                                "cluster.configurations",
                                format!("`{name}` is no configuration of {}", m.key),
                            ));
                        }
                    }
                    if !configurations
                        .iter()
                        .any(|c| c.is_available() && self.cluster.site_takes(&m.key, &c.name))
                    {
                        return Err(bad(
                            "cluster.configurations",
                            format!("names no configuration {} can take", m.key),
                        ));
                    }
                    models.push(ClusterModel {
                        model: m.clone(),
                        configurations,
                    });
                    models.len() - 1
                }
            };
            let total = gpus.len() + g.count as usize;
            if total > MAX_GPUS {
                return Err(bad(
                    "cluster.gpus.count",
                    format!("{total} GPUs in all, more than the simulator's {MAX_GPUS}"),
                ));
            }
            gpus.extend((0..g.count).map(|_| GpuSlot { model: idx }));
        }
        let w = &self.workload;
        match w.source {
            WorkloadSource::Generator => {
                if w.hourly_rates.len() != 24 {
                    return Err(bad(
                        "workload.hourly_rates",
                        format!("has {} values, needs 24", w.hourly_rates.len()),
                    ));
                }
                if w.hourly_rates.iter().any(|r| !r.is_finite() || *r < 0.0) {
                    return Err(bad("workload.hourly_rates", "rates must be >= 0".into()));
                }
                if !(w.days > 0.0) {
                    return Err(bad("workload.days", "must be positive".into()));
                }
                if !(w.multiplier > 0.0) {
                    return Err(bad("workload.multiplier", "must be positive".into()));
                }
                let [lo, hi] = w.deadline_factor;
                if !(lo >= 1.0 && hi >= lo) {
                    return Err(bad(
                        "workload.deadline_factor",
                        format!("[{lo}, {hi}] must satisfy 1 <= lo <= hi"),
                    ));
                }
                if w.classes.is_empty() || w.classes.iter().map(|c| c.share).sum::<f64>() <= 0.0 {
                    return Err(bad(
                        "workload.class",
                        "needs at least one class with a positive share".into(),
                    ));
                }
                for c in &w.classes {
                    check_class(c).map_err(|m| bad("workload.class", format!("class `{}`: {m}", c.name)))?;
                }
                if let Some(h) =
                    (0..24).find(|&h| w.classes.iter().map(|c| c.share_at(h)).sum::<f64>() <= 0.0)
                {
                    return Err(bad(
                        "workload.class",
                        format!("no class has a positive share in hour {h}"),
                    ));
                }
            }
            WorkloadSource::Trace => {
                if w.trace.is_none() || w.format.is_none() {
                    return Err(bad(
                        "workload.trace",
                        "a trace workload needs `trace` and `format`".into(),
                    ));
                }
            }
        }
        let check_layout = |key: &str, names: &[String]| -> Result<(), ScenarioError> {
            entry_indices(&catalogue, &models, &gpus, self.cluster.driver, names)
                .map(|_| ())
                .map_err(|m| bad(key, m))
        };
        check_layout("baselines.reference_layout", &self.baselines.reference_layout)?;
        if let Some(best) = &self.baselines.static_best {
            check_layout("baselines.static_best", best)?;
        }
        let check_schedule = |key: &str, entries: &[PeriodicSpec]| -> Result<(), ScenarioError> {
            let mut last = None;
            for p in entries {
                let m = smartmig_core::config::parse_time_of_day(&p.at)
                    .map_err(|e| bad(&format!("{key}.at"), e))?;
                if last.is_some_and(|l| m <= l) {
                    return Err(bad(&format!("{key}.at"), "times must increase".into()));
                }
                last = Some(m);
                check_layout(&format!("{key}.layout"), &p.layout)?;
            }
            Ok(())
        };
        check_schedule("baselines.periodic", &self.baselines.periodic)?;
        if let Some(best) = &self.baselines.periodic_best {
            if best.is_empty() {
                return Err(bad("baselines.periodic_best", "is empty".into()));
            }
            check_schedule("baselines.periodic_best", best)?;
        }
        if self.cluster.gpus_per_node == 0 {
            return Err(bad("cluster.gpus_per_node", "must be >= 1".into()));
        }
        let r = &self.repartition;
        if !(r.penalty_s >= 0.0 && r.reconfigure_s >= 0.0) {
            return Err(bad(
                "repartition",
                "penalty_s and reconfigure_s must be >= 0".into(),
            ));
        }
        if !(r.min_relayout_interval_s >= 0.0 && r.min_relayout_interval_s.is_finite()) {
            return Err(bad(
                "repartition.min_relayout_interval_s",
                format!("{} must be a number of seconds >= 0", r.min_relayout_interval_s),
            ));
        }
        if let Some(cap) = r.requeue_max_run_s.filter(|c| !(*c >= 0.0 && c.is_finite())) {
            return Err(bad(
                "repartition.requeue_max_run_s",
                format!("{cap} must be a number of seconds >= 0"),
            ));
        }
        if r.persist_cycles == 0 {
            return Err(bad("repartition.persist_cycles", "must be >= 1".into()));
        }
        if r.max_nodes_per_batch == 0 {
            return Err(bad("repartition.max_nodes_per_batch", "must be >= 1".into()));
        }
        if !(r.decision_interval_s > 0.0 && r.decision_interval_s.is_finite()) {
            return Err(bad(
                "repartition.decision_interval_s",
                format!("{} must be a number of seconds > 0", r.decision_interval_s),
            ));
        }
        if !(self.objective.energy_weight >= 0.0) {
            return Err(bad("objective.energy_weight", "must be >= 0".into()));
        }
        if !(self.objective.tardiness_tolerance >= 0.0 && self.objective.tardiness_tolerance.is_finite()) {
            return Err(bad("objective.tardiness_tolerance", "must be >= 0".into()));
        }
        Ok(ResolvedScenario {
            scenario: self,
            models,
            gpus,
            base_dir: None,
        })
    }
}

fn check_class(c: &JobClassSpec) -> Result<(), String> {
    if !(c.share >= 0.0) {
        return Err("share must be >= 0".into());
    }
    if let Some(h) = &c.hourly_share {
        if h.len() != 24 {
            return Err(format!("hourly_share has {} values, needs 24", h.len()));
        }
        if h.iter().any(|x| !(x.is_finite() && *x >= 0.0)) {
            return Err("hourly_share values must be >= 0".into());
        }
    }
    if (c.speedup[0] - 1.0).abs() > 1e-12 {
        return Err("speedup must start with 1 (the 1g)".into());
    }
    if c.speedup.windows(2).any(|w| !(w[1] >= w[0])) {
        return Err(format!(
            "speedup {:?} must not decrease with slice size",
            c.speedup
        ));
    }
    match c.duration {
        DurationSpec::Exponential { mean } if !(mean > 0.0) => Err("mean must be positive".into()),
        DurationSpec::LognormalRange { p5, p95 } if !(p5 > 0.0 && p95 >= p5) => {
            Err("needs 0 < p5 <= p95".into())
        }
        DurationSpec::Fixed { value } if !(value > 0.0) => Err("value must be positive".into()),
        _ => Ok(()),
    }
}

/// A scenario error with overrides, laid at the override's door where one is to blame:
/// the one whose key the error names, or the only one when the file alone loads
/// (`file_loads`, asked only then).
fn blame_set(err: ScenarioError, sets: &[String], file_loads: impl FnOnce() -> bool) -> ScenarioError {
    let ScenarioError::Source(source) = &err else {
        return err;
    };
    let by_key = source.key.as_deref().and_then(|k| {
        let mut hits = sets.iter().filter(|s| {
            let key = s.split_once('=').map_or(s.as_str(), |(k, _)| k).trim();
            // Keys from the merged text are bare (`multiplier`), the checks' dotted.
            key == k || key.ends_with(&format!(".{k}")) || k.starts_with(&format!("{key}."))
        });
        match (hits.next(), hits.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        }
    });
    let culprit = by_key.or_else(|| match sets {
        [only] if file_loads() => Some(only),
        _ => None,
    });
    match culprit {
        // A key inside the override's value (`cluster.gpus.count` of `--set cluster.gpus=…`)
        // is named; the override's own key is already in it.
        Some(set) => match source.key.as_deref().filter(|k| !set.contains(&format!("{k}="))) {
            Some(k) if k.contains('.') => ScenarioError::Set(format!("{set}: key `{k}`: {}", source.message)),
            _ => ScenarioError::Set(format!("{set}: {}", source.message)),
        },
        None => err,
    }
}

/// Applies `a.b.c=VALUE` to a TOML tree. VALUE is read as a TOML value when it parses
/// as one (`20`, `[1, 2]`, `"x"`, `true`), else taken as a bare string.
pub fn apply_set(table: &mut toml::Table, set: &str) -> Result<(), ScenarioError> {
    let (key, raw) = set
        .split_once('=')
        .ok_or_else(|| ScenarioError::Set(format!("`{set}`: expected KEY=VALUE")))?;
    let key = key.trim();
    let value: toml::Value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").unwrap_or(toml::Value::String(raw.to_string())),
        Err(e) => {
            let trimmed = raw.trim();
            // An array or table that is not TOML is a typo, never a bare string.
            if trimmed.starts_with('[') || trimmed.starts_with('{') {
                return Err(ScenarioError::Set(format!(
                    "`{set}`: `{trimmed}` is not a TOML value ({}); strings inside need quotes, \
                     e.g. --set 'baselines.static_best=[\"c2\", \"c6\"]'",
                    e.message().trim()
                )));
            }
            if trimmed.is_empty() {
                return Err(ScenarioError::Set(format!("`{set}`: no value after `=`")));
            }
            toml::Value::String(trimmed.to_string())
        }
    };
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(ScenarioError::Set(format!(
            "`{set}`: `{key}` is not a dotted key"
        )));
    }
    let mut t = table;
    for p in &parts[..parts.len() - 1] {
        t = t
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| ScenarioError::Set(format!("`{set}`: `{p}` is not a table")))?;
    }
    t.insert(parts[parts.len() - 1].to_string(), value);
    Ok(())
}

/// A layout given per GPU (cycled) → each GPU's configuration index: every entry a
/// configuration name, an instance list equal to one of the GPU's configurations, or
/// [`WHOLE_GPU`]; the error names the entry and the GPU it does not fit.
fn entry_indices(
    catalogue: &Catalogue,
    models: &[ClusterModel],
    gpus: &[GpuSlot],
    driver: Driver,
    names: &[String],
) -> Result<Vec<usize>, String> {
    if names.is_empty() {
        return Err("is empty".into());
    }
    gpus.iter()
        .enumerate()
        .map(|(i, g)| {
            let name = &names[i % names.len()];
            let cm = &models[g.model];
            let m = &cm.model;
            if name == WHOLE_GPU {
                return cm
                    .configurations
                    .iter()
                    .position(|c| c.sizes == [m.compute_slices])
                    .ok_or_else(|| format!("{} has no whole-GPU configuration", m.key));
            }
            let known = || {
                cm.configurations
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            match read_entry(catalogue, &cm.configurations, m, driver, name)? {
                Some(LayoutEntry::Configuration(c)) => Ok(c),
                Some(LayoutEntry::Layout(_)) => Err(format!(
                    "`{name}` (GPU {i}, {}) is none of its configurations ({})",
                    m.key,
                    known()
                )),
                None => Err(format!(
                    "unknown configuration `{name}` for GPU {i} ({}; its configurations: {})",
                    m.key,
                    known()
                )),
            }
        })
        .collect()
}

impl ResolvedScenario {
    /// Whether a search may lay GPUs of `model` out as configuration `c`: one the GPU can
    /// take and, with `cluster.configurations`, one the site lays its GPUs out as.
    pub fn searchable(&self, model: usize, c: usize) -> bool {
        let config = &self.models[model].configurations[c];
        config.is_available()
            && self
                .scenario
                .cluster
                .site_takes(&self.models[model].model.key, &config.name)
    }

    /// Compute slices of every GPU together.
    pub fn total_slices(&self) -> u32 {
        self.gpus
            .iter()
            .map(|g| u32::from(self.models[g.model].model.compute_slices))
            .sum()
    }

    /// Checks a layout given on the command line, as the scenario's own layouts are checked.
    pub fn check_layout(&self, names: &[String]) -> Result<(), String> {
        self.try_layout_indices(names).map(|_| ())
    }

    /// A layout given per GPU (cycled) as configuration index per GPU, or why it does not
    /// fit the cluster.
    pub fn try_layout_indices(&self, names: &[String]) -> Result<Vec<usize>, String> {
        entry_indices(
            &Catalogue::embedded(),
            &self.models,
            &self.gpus,
            self.scenario.cluster.driver,
            names,
        )
    }

    /// The layout given per GPU (cycled) as configuration index per GPU. The names must
    /// have passed [`ResolvedScenario::check_layout`] (the scenario's own layouts have);
    /// a GPU they do not fit keeps its first configuration.
    pub fn layout_indices(&self, names: &[String]) -> Vec<usize> {
        self.try_layout_indices(names)
            .unwrap_or_else(|_| vec![0; self.gpus.len()])
    }

    /// The configuration each GPU takes from `names`, by name: the layout as it runs
    /// (cycled over the GPUs, cut at the last), for reports.
    pub fn layout_as_run(&self, names: &[String]) -> Vec<String> {
        self.layout_indices(names)
            .iter()
            .zip(&self.gpus)
            .map(|(&c, g)| self.models[g.model].configurations[c].name.clone())
            .collect()
    }

    /// The scenario's layouts with more configurations than the cluster has GPUs (the
    /// rest never run; a file tuned for a larger cluster, say), as `(key, entries)`.
    pub fn layouts_longer_than_the_cluster(&self) -> Vec<(String, usize)> {
        let b = &self.scenario.baselines;
        let mut all: Vec<(String, &Vec<String>)> =
            vec![("baselines.reference_layout".into(), &b.reference_layout)];
        if let Some(l) = &b.static_best {
            all.push(("baselines.static_best".into(), l));
        }
        for (key, schedule) in [
            ("baselines.periodic", Some(&b.periodic)),
            ("baselines.periodic_best", b.periodic_best.as_ref()),
        ] {
            // A schedule counts once, by its longest entry.
            if let Some(e) = schedule.into_iter().flatten().max_by_key(|e| e.layout.len()) {
                all.push((key.into(), &e.layout));
            }
        }
        all.into_iter()
            .filter(|(_, l)| l.len() > self.gpus.len())
            .map(|(k, l)| (k, l.len()))
            .collect()
    }

    /// [`ResolvedScenario::layout_indices`] as the engine numbers configurations (what a
    /// partition policy's `initial_layout` returns).
    pub fn layout_configs(&self, names: &[String]) -> Vec<u16> {
        self.layout_indices(names).into_iter().map(|c| c as u16).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_longer_than_the_cluster_runs_cut_and_is_reported() {
        let sc = Scenario::reference(&["cluster.gpus=[{model=\"a100-40gb\",count=6}]".into()]).unwrap();
        let best = sc.scenario.baselines.static_best.clone().unwrap();
        assert_eq!(best.len(), 8);
        assert_eq!(sc.layout_as_run(&best), ["c2"; 6]);
        let keys: Vec<String> = sc
            .layouts_longer_than_the_cluster()
            .into_iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        assert_eq!(
            keys,
            [
                "baselines.reference_layout 8",
                "baselines.static_best 8",
                "baselines.periodic_best 8"
            ]
        );
        // Cycled, a shorter layout covers every GPU.
        let sc = Scenario::reference(&[]).unwrap();
        assert_eq!(sc.layout_as_run(&["c1".into(), "c6".into()]).len(), 8);
        assert!(sc.layouts_longer_than_the_cluster().is_empty());
    }

    /// `cluster.configurations` narrows what searches may choose, not what the file's
    /// baselines name; a name that is no configuration, or a list a model cannot take
    /// any of, is refused naming the key.
    #[test]
    fn a_sites_configurations_are_what_searches_may_choose() {
        let sc = Scenario::reference(&["cluster.configurations=[\"c1\", \"C7\"]".into()]).unwrap();
        let searchable: Vec<&str> = (0..sc.models[0].configurations.len())
            .filter(|&c| sc.searchable(0, c))
            .map(|c| sc.models[0].configurations[c].name.as_str())
            .collect();
        assert_eq!(searchable, ["c1", "c7"]);
        assert!(
            sc.check_layout(&["c2".into()]).is_ok(),
            "the baselines may name others"
        );
        let e = Scenario::reference(&["cluster.configurations=[\"c1\", \"c99\"]".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown configuration `c99`"), "{e}");
        // q1 is an A30 configuration: the A100s could be laid out as none of the list.
        let e = Scenario::reference(&["cluster.configurations=[\"q1\"]".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("names no configuration a100-40gb can take"), "{e}");
        let e = Scenario::reference(&[
            "cluster.driver=\"pre-r510\"".into(),
            "cluster.configurations=[\"c2\"]".into(),
            "baselines.reference_layout=[\"c1\"]".into(),
            "baselines.static_best=[\"c1\"]".into(),
            "baselines.periodic=[]".into(),
            "baselines.periodic_best=[{at = \"00:00\", layout = [\"c1\"]}]".into(),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("names no configuration a100-40gb can take"),
            "c2 needs R510: {e}"
        );
    }

    /// A list per model narrows each model's searches apart; a model left out takes every
    /// configuration, and a key that is no model of the cluster, or a name that is none of
    /// the model's configurations, is refused.
    #[test]
    fn a_sites_configurations_may_differ_by_model() {
        let gpus = "cluster.gpus=[{model=\"a100-40gb\",count=1},{model=\"h100-80gb\",count=1}]";
        let sc = Scenario::reference(&[
            gpus.into(),
            "cluster.configurations={\"h100-80gb\" = [\"c2\", \"c7\"]}".into(),
        ])
        .unwrap();
        let searchable = |m: usize| -> Vec<&str> {
            (0..sc.models[m].configurations.len())
                .filter(|&c| sc.searchable(m, c))
                .map(|c| sc.models[m].configurations[c].name.as_str())
                .collect()
        };
        assert_eq!(searchable(1), ["c2", "c7"]);
        assert_eq!(searchable(0).len(), 12, "{:?}", searchable(0));
        let e = Scenario::reference(&[
            gpus.into(),
            "cluster.configurations={\"a30-24gb\" = [\"q1\"]}".into(),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("`a30-24gb` is no GPU model of the cluster"), "{e}");
        let e = Scenario::reference(&[
            gpus.into(),
            "cluster.configurations={\"h100-80gb\" = [\"c2\", \"q1\"]}".into(),
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("`q1` is no configuration of h100-80gb"), "{e}");
    }

    #[test]
    fn a_cluster_larger_than_the_engine_can_number_is_refused_naming_the_key() {
        let e = Scenario::reference(&["cluster.gpus=[{model = \"a100-40gb\", count = 16777217}]".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cluster.gpus.count") && e.contains("16777217 GPUs in all"),
            "{e}"
        );
    }

    #[test]
    fn the_reference_scenario_resolves_to_eight_a100s() {
        let r = Scenario::reference(&[]).unwrap();
        assert_eq!(r.gpus.len(), 8);
        assert_eq!(r.models[0].model.key, "a100-40gb");
        assert_eq!(r.scenario.workload.hourly_rates.len(), 24);
        assert_eq!(
            r.layout_indices(&r.scenario.baselines.reference_layout),
            vec![0, 0, 1, 2, 2, 4, 4, 9]
        );
    }

    #[test]
    fn set_overrides_a_nested_key_and_is_validated() {
        let r = Scenario::reference(&["workload.multiplier=12".into()]).unwrap();
        assert_eq!(r.scenario.workload.multiplier, 12.0);
        let e = Scenario::reference(&["workload.multipler=3".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `multipler`"), "{e}");
    }

    /// A check that fails after overrides names the override that broke it, not the file.
    #[test]
    fn a_value_an_override_breaks_names_the_override() {
        let err = |sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            Scenario::reference(&sets).unwrap_err().to_string()
        };
        assert_eq!(
            err(&["workload.multiplier=-1", "name=x"]),
            "--set workload.multiplier=-1: must be positive"
        );
        assert_eq!(
            err(&["cluster.gpus=[{model = \"a100-40gb\", count = 0}]"]),
            "--set cluster.gpus=[{model = \"a100-40gb\", count = 0}]: key `cluster.gpus.count`: \
             a100-40gb has count 0"
        );
        // One override and a file that loads without it: the override is to blame.
        assert!(err(&["nosuch.key=1"]).starts_with("--set nosuch.key=1: unknown field `nosuch`"));
        // A file that is itself wrong keeps its own name when an unrelated override is given.
        let broken = REFERENCE.replace("multiplier = 20", "multiplier = 0");
        let e = Scenario::parse(&broken, "broken.toml", &["name=x".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("broken.toml with --set name=x: key `workload.multiplier`"),
            "{e}"
        );
    }

    #[test]
    fn a_malformed_set_value_names_the_override_and_what_was_expected() {
        let e = Scenario::reference(&["workload.multiplier=abc".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--set workload.multiplier=abc: invalid type"),
            "{e}"
        );
        let e = Scenario::reference(&["baselines.static_best=[c2,c6]".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`[c2,c6]` is not a TOML value") && e.contains("quotes"),
            "{e}"
        );
        let e = Scenario::reference(&["workload.multiplier=".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("no value after `=`"), "{e}");
    }

    #[test]
    fn set_takes_arrays_and_strings() {
        let r = Scenario::reference(&[
            "baselines.reference_layout=[\"c6\"]".into(),
            "repartition.semantics=drain".into(),
        ])
        .unwrap();
        assert_eq!(
            r.layout_indices(&r.scenario.baselines.reference_layout),
            vec![5; 8]
        );
        assert_eq!(r.scenario.repartition.semantics, Semantics::Drain);
    }

    #[test]
    fn an_unknown_configuration_in_a_baseline_is_refused() {
        let e = Scenario::reference(&["baselines.reference_layout=[\"c13\"]".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("baselines.reference_layout") && e.contains("unknown configuration `c13` for GPU 0"),
            "{e}"
        );
    }

    #[test]
    fn a_mixed_cluster_takes_a_layout_per_gpu_fitting_each_model() {
        let mixed = [
            "cluster.gpus=[{model = \"a100-40gb\", count = 2}, {model = \"a30-24gb\", count = 2}]"
                .to_string(),
            "baselines.reference_layout=[\"c2\", \"4g.20gb+3g.20gb\", \"q2\", \"2g.12gb+1g.6gb+1g.6gb\"]"
                .into(),
            "baselines.periodic=[{at = \"00:00\", layout = [\"whole-gpu\"]}]".into(),
            "baselines.static_best=[\"whole-gpu\"]".into(),
            "baselines.periodic_best=[{at = \"00:00\", layout = [\"whole-gpu\"]}]".into(),
        ];
        let r = Scenario::reference(&mixed).unwrap();
        assert_eq!(r.total_slices(), 7 + 7 + 4 + 4);
        assert_eq!(
            r.layout_indices(&r.scenario.baselines.reference_layout),
            [1, 1, 1, 2]
        );
        assert_eq!(r.layout_indices(&[WHOLE_GPU.to_string()]), [0, 0, 0, 0]);
        let mut bad = mixed.to_vec();
        bad[1] = "baselines.reference_layout=[\"c2\"]".into();
        let e = Scenario::reference(&bad).unwrap_err().to_string();
        assert!(
            e.contains("unknown configuration `c2` for GPU 2 (a30-24gb; its configurations: q1, q2, q3, q4)"),
            "{e}"
        );
    }

    #[test]
    fn a_misspelt_key_in_a_scenario_file_names_its_line() {
        let text = REFERENCE.replacen("multiplier", "multiplyer", 1);
        let e = Scenario::parse(&text, "s.toml", &[]).unwrap_err().to_string();
        assert!(e.starts_with("s.toml:") && e.contains("multiplyer"), "{e}");
    }
}
