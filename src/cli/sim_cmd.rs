//! `smartmig simulate | compare`, and the arguments every simulator command shares.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

use super::daemon_limits::{daemon_hardware, daemon_limits, site_layouts, SiteLayouts};
use super::{print_json, table, CliError, CliResult, Format};
use smartmig_core::config::Config;
use smartmig_eval::compare::{
    baselines, compare as run_compare, guard, run_policy, run_reference, Comparison, Days, LayoutSpec,
    Paired, PolicySpec, Tuned, SMART_MIG, STATIC_BEST,
};
use smartmig_eval::periodic::{tune_periodic_on, DEFAULT_BLOCKS, DEFAULT_PASSES};
use smartmig_eval::plot;
use smartmig_eval::tune::tune_static_on;
use smartmig_eval::{EVAL_SEED_BASE, TRAIN_SEED_BASE, VALIDATION_SEED_BASE};
use smartmig_sim::scenario::{ResolvedScenario, Scenario, Semantics, TraceFormat};
use smartmig_sim::sched::Scheduler;
use smartmig_sim::workload::{self, write_jobs_csv, JobSet};
use smartmig_sim::RunResult;

/// Scenario selection shared by every command that runs the simulator.
#[derive(Debug, Clone, Args)]
pub struct ScenarioArgs {
    /// Scenario file (default: the embedded paper reference, 8 × A100-40GB at 20×).
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// Override a scenario key, e.g. `--set workload.multiplier=12` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Simulated days (shorthand for `--set workload.days=D`).
    #[arg(long)]
    pub days: Option<f64>,
    /// Repartition semantics (shorthand for `--set repartition.semantics=...`).
    #[arg(long, value_parser = semantics_parser())]
    pub semantics: Option<Semantics>,
    /// Run under the limits smartmigd enforces with this smartmig.toml where they differ
    /// from the scenario's: its mode, padding (the index rule), batch interval, hysteresis
    /// and batch size. `tune-periodic` also writes its schedule there as
    /// `[[policy.periodic]]` (other keys kept; set `policy.kind = "periodic"` to use it).
    #[arg(long, value_name = "FILE")]
    pub smartmig_toml: Option<PathBuf>,
    /// The overrides `smartmig_toml` gave, set by [`ScenarioArgs::load`].
    #[arg(skip)]
    daemon_sets: std::sync::OnceLock<Vec<String>>,
    /// `smartmig_toml`'s mig-parted layouts, if it has them, set by [`ScenarioArgs::load`].
    #[arg(skip)]
    site: std::sync::OnceLock<Option<SiteLayouts>>,
}

/// `--semantics`: the policy crate's names, shown as the possible values.
fn semantics_parser() -> impl clap::builder::TypedValueParser<Value = Semantics> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(Semantics::ALL.map(Semantics::as_str))
        .try_map(|s| s.parse::<Semantics>())
}

impl ScenarioArgs {
    /// A scenario file (or the reference) with `--set` overrides and nothing else.
    pub fn with_sets(scenario: Option<PathBuf>, sets: Vec<String>) -> ScenarioArgs {
        ScenarioArgs {
            scenario,
            sets,
            days: None,
            semantics: None,
            smartmig_toml: None,
            daemon_sets: std::sync::OnceLock::new(),
            site: std::sync::OnceLock::new(),
        }
    }

    /// Loads and resolves the scenario with its overrides, then, with `--smartmig-toml`,
    /// again under that file's limits where they differ (said on stderr).
    pub fn load(&self) -> Result<ResolvedScenario, CliError> {
        let load = |sets: &[String]| match &self.scenario {
            Some(p) => Scenario::load(p, sets),
            None => Scenario::reference(sets),
        };
        let sc = load(&self.all_sets()).map_err(CliError::input)?;
        let long: Vec<String> = sc
            .layouts_longer_than_the_cluster()
            .into_iter()
            .map(|(key, entries)| format!("{key} ({entries})"))
            .collect();
        if !long.is_empty() {
            eprintln!(
                "warning: the cluster has {} GPUs and these layouts name more configurations, whose \
                 rest never runs: {}",
                sc.gpus.len(),
                long.join(", ")
            );
        }
        let Some(path) = &self.smartmig_toml else {
            return Ok(sc);
        };
        let cfg = Config::from_file(path).map_err(CliError::input)?;
        let named = |e: String| CliError::input(anyhow::anyhow!("{}: {e}", path.display()));
        let site = site_layouts(&cfg, path.parent(), &sc).map_err(named)?;
        let site = self.site.get_or_init(|| site).as_ref();
        if let Some(left_out) = site.map(SiteLayouts::left_out).filter(|l| !l.is_empty()) {
            let named: Vec<String> = left_out
                .iter()
                .map(|(model, mig)| format!("{mig} ({model})"))
                .collect();
            eprintln!(
                "warning: {}'s mig-configs {} are none of the configurations the simulator runs: \
                 searches and runs here leave them out",
                path.display(),
                named.join(", ")
            );
        }
        let mut daemon = daemon_hardware(&cfg, site, &sc).map_err(named)?;
        daemon.extend(daemon_limits(&cfg, &sc.scenario.repartition).map_err(named)?);
        let daemon = self.daemon_sets.get_or_init(|| daemon);
        if daemon.is_empty() {
            return Ok(sc);
        }
        eprintln!(
            "running under {}'s limits: --set {}",
            path.display(),
            daemon.join(" --set ")
        );
        // A layout the scenario names may be one the site cannot run (its driver rules).
        load(&self.all_sets()).map_err(|e| {
            CliError::input(anyhow::anyhow!(
                "under {}'s limits (--set {}): {e}",
                path.display(),
                daemon.join(" --set ")
            ))
        })
    }

    /// `--smartmig-toml`'s mig-parted layouts on the scenario's GPUs, if it has them (none
    /// before [`ScenarioArgs::load`]).
    pub fn site_layouts(&self) -> Option<&SiteLayouts> {
        self.site.get().and_then(Option::as_ref)
    }

    /// The overrides `--smartmig-toml` gave (empty before [`ScenarioArgs::load`]).
    pub fn daemon_overrides(&self) -> &[String] {
        self.daemon_sets.get().map_or(&[], Vec::as_slice)
    }

    /// The `--set` overrides with the shorthands (`--days`, `--semantics`) and, once
    /// loaded, `--smartmig-toml`'s limits folded in.
    pub fn all_sets(&self) -> Vec<String> {
        let mut sets = self.sets.clone();
        if let Some(d) = self.days {
            sets.push(format!("workload.days={d}"));
        }
        if let Some(s) = self.semantics {
            sets.push(format!("repartition.semantics=\"{}\"", s.as_str()));
        }
        sets.extend(self.daemon_overrides().iter().cloned());
        sets
    }

    /// The overrides that change the world a tuned baseline was searched for: everything
    /// but other baselines, names and the number of days (the day repeats); a schedule
    /// (`repartitions`) also depends on `repartition.*`, a static layout does not.
    pub fn world_overrides(&self, repartitions: bool) -> Vec<String> {
        self.all_sets()
            .into_iter()
            .filter(|s| {
                let key = s.split_once('=').map_or(s.as_str(), |(k, _)| k).trim();
                let neutral = key.starts_with("baselines.")
                    || matches!(key, "name" | "description" | "version" | "workload.days")
                    || (!repartitions && key.starts_with("repartition."));
                !neutral
            })
            .collect()
    }
}

/// Days to run: a count from the command's first seed, or a range of seeds
/// (`A..B` excludes B, `A..=B` includes it), e.g. training seeds `1..=16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedArg {
    /// This many days from the command's default first seed.
    Count(u32),
    /// Seeds `first..=last`.
    Range(u64, u64),
}

impl FromStr for SeedArg {
    type Err = String;
    fn from_str(s: &str) -> Result<SeedArg, String> {
        let bad = || format!("`{s}`: expected a number of days (20) or a range of seeds (1..17, 1..=16)");
        let parse = |x: &str| x.trim().parse::<u64>().map_err(|_| bad());
        let range = if let Some((a, b)) = s.split_once("..=") {
            Some((parse(a)?, parse(b)?))
        } else if let Some((a, b)) = s.split_once("..") {
            let (a, b) = (parse(a)?, parse(b)?);
            if b <= a {
                return Err(format!("`{s}` is empty"));
            }
            Some((a, b - 1))
        } else {
            None
        };
        match range {
            Some((a, b)) if b < a => Err(format!("`{s}` is empty")),
            Some((a, b)) => Ok(SeedArg::Range(a, b)),
            None => match s.trim().parse::<u32>() {
                Ok(0) => Err(format!("`{s}`: at least one day")),
                Ok(n) => Ok(SeedArg::Count(n)),
                Err(_) => Err(bad()),
            },
        }
    }
}

impl SeedArg {
    /// The seeds, counting from `base` for a count.
    pub fn seeds(self, base: u64) -> Vec<u64> {
        match self {
            SeedArg::Count(n) => (0..u64::from(n)).map(|i| base + i).collect(),
            SeedArg::Range(a, b) => (a..=b).collect(),
        }
    }
}

/// Reading jobs from a trace instead of the scenario's workload.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Read jobs from a trace instead of the scenario's workload.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Format of `--trace`.
    #[arg(long, value_enum, requires = "trace")]
    pub trace_format: Option<TraceFormat>,
    /// Skip malformed trace lines (and report how many) instead of failing.
    #[arg(long)]
    pub skip_bad: bool,
}

impl TraceArgs {
    /// The trace's jobs, if a trace was given.
    pub fn load(&self) -> Result<Option<(String, JobSet)>, CliError> {
        let Some(path) = &self.trace else {
            return Ok(None);
        };
        let fmt = self
            .trace_format
            .ok_or_else(|| CliError::input(anyhow::anyhow!("--trace needs --trace-format")))?;
        let (jobs, stats) = workload::load_trace(path, fmt, self.skip_bad).map_err(CliError::input)?;
        if stats.total_skipped() > 0 {
            eprintln!(
                "{}: skipped {} lines ({})",
                path.display(),
                stats.total_skipped(),
                stats
            );
        }
        Ok(Some((path.display().to_string(), jobs)))
    }

    /// The days to run: a trace's days (`--trace`, or the scenario's own trace), else the
    /// seeds. A trace ignores `seeds` (said on stderr when they were given).
    pub fn days(
        &self,
        sc: &ResolvedScenario,
        seeds: Option<SeedArg>,
        default: SeedArg,
        base: u64,
    ) -> Result<Days, CliError> {
        let trace = match self.load()? {
            Some(t) => Some(t),
            None if sc.scenario.workload.source == smartmig_sim::scenario::WorkloadSource::Trace => {
                let jobs = workload::from_scenario(sc, 0, self.skip_bad).map_err(CliError::input)?;
                Some((sc.scenario.workload.trace.clone().unwrap_or_default(), jobs))
            }
            None => None,
        };
        match trace {
            Some((name, jobs)) => {
                if seeds.is_some() {
                    eprintln!("warning: --seeds is ignored: the days are the trace's");
                }
                Ok(Days::Trace {
                    name,
                    days: workload::split_days(&jobs),
                })
            }
            None => Ok(Days::Seeds(seeds.unwrap_or(default).seeds(base))),
        }
    }
}

/// Policies `simulate` can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyArg {
    /// Every GPU whole (c1).
    None,
    /// A static layout (`--layout`, default: the scenario's reference layout).
    Static,
    /// The scenario's best static layout (`tune-static --write`).
    StaticBest,
    /// The scenario's periodic schedule.
    Periodic,
    /// The scenario's best time-of-day schedule (`tune-periodic --write`).
    PeriodicBest,
    /// The learned mean-field policy (`--model`, or the shipped one for the scenario).
    MeanField,
}

/// `simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// Repartition policy.
    #[arg(long, value_enum, default_value = "static")]
    policy: PolicyArg,
    /// Static layout: configurations cycled over the GPUs (`c6,c6,c2`); `--policy static` only.
    #[arg(long, value_delimiter = ',')]
    layout: Option<Vec<String>>,
    /// Policy file (ONNX) for `--policy mean-field`.
    #[arg(long)]
    model: Option<PathBuf>,
    /// `--policy mean-field`: a GPU moves only when the move is this much likelier than
    /// staying, as smartmigd's `policy.stay_threshold` (0: off).
    #[arg(long, default_value_t = 0.0, value_parser = super::parse_fraction)]
    stay_threshold: f64,
    /// Scheduler (default: EDF with `--policy none`, as compare's `none` row, else CEDF).
    #[arg(long, value_enum)]
    scheduler: Option<Scheduler>,
    /// Seed of the job stream and the run.
    #[arg(long, default_value_t = EVAL_SEED_BASE, conflicts_with = "seeds")]
    seed: u64,
    /// Several days: a count from the first evaluation seed, or a range (`1..=16`).
    #[arg(long)]
    seeds: Option<SeedArg>,
    #[command(flatten)]
    trace: TraceArgs,
    /// Write the job list (smartmig's CSV) to this file (one day only).
    #[arg(long)]
    dump_jobs: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Write figures (SVG) to this directory (one day only).
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// `compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// Evaluation days: a count from the first evaluation seed (default 10), or a range
    /// of seeds (`1000000..=1000019`, also training seeds `1..=16`).
    #[arg(long)]
    seeds: Option<SeedArg>,
    #[command(flatten)]
    trace: TraceArgs,
    /// Search `static-best` and `periodic-best` now on training days instead of reading
    /// them from the scenario (they are also searched when `--set` or `--trace` changes
    /// the world the file's were tuned for).
    #[arg(long)]
    tune: bool,
    /// Keep the scenario file's tuned baselines even when `--set` or `--trace` changes the
    /// world they were tuned for (their rows are then marked).
    #[arg(long, conflicts_with = "tune")]
    no_tune: bool,
    /// Training days for tuning: a count from seed 1 or a range.
    #[arg(long, default_value = "16")]
    tune_seeds: SeedArg,
    /// Skip the lower bounds (the tardiness bound solves an LP per day).
    #[arg(long)]
    no_bounds: bool,
    /// Policy file (ONNX) to include as `smart-mig` (default: `onnx/<gpu-key>-<semantics>.onnx`
    /// in the current directory or /usr/share/smartmig/onnx, when present).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Leave the learned policy out even when one is shipped.
    #[arg(long, conflicts_with = "model")]
    no_model: bool,
    /// The learned policy moves a GPU only when the move is this much likelier than
    /// staying, as smartmigd's `policy.stay_threshold` (0: off).
    #[arg(long, default_value_t = 0.0, value_parser = super::parse_fraction, conflicts_with = "no_model")]
    stay_threshold: f64,
    /// Show the learned policy as it is, without the deployment guard (which runs it only
    /// where it beats static-best on 16 validation days of this scenario, or on the days of
    /// `--trace`).
    #[arg(long)]
    no_guard: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Write figures (SVG) to this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// Validation days the guard of `compare` (and `policy average`) uses.
pub(crate) const GUARD_DAYS: u64 = 16;

/// Where the `smartmig` package installs the learned policies.
pub const SHIPPED_POLICY_DIR: &str = "/usr/share/smartmig/onnx";

/// The shipped policy for a scenario's GPU model and semantics (`onnx/` of the current
/// directory, then [`SHIPPED_POLICY_DIR`]), or one line saying why there is none.
pub fn shipped_model(sc: &ResolvedScenario) -> Result<PathBuf, String> {
    let cm = sc
        .models
        .first()
        .ok_or_else(|| "the scenario has no GPU model".to_string())?;
    let name = smartmig_policy::policy_file_name(&cm.model.key, sc.scenario.repartition.semantics);
    [PathBuf::from("onnx"), PathBuf::from(SHIPPED_POLICY_DIR)]
        .into_iter()
        .map(|d| d.join(&name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "no policy file {name} in ./onnx or {SHIPPED_POLICY_DIR} (run from the smartmig checkout, install the smartmig package, or pass --model FILE)"
            )
        })
}

/// The policy file of the `smart-mig` row: `--model`, else the shipped one; `--no-model`
/// or a missing file leaves the row out, and the latter is said on standard error.
pub(crate) fn smart_mig_model(
    sc: &ResolvedScenario,
    model: &Option<PathBuf>,
    no_model: bool,
) -> Option<PathBuf> {
    if no_model {
        return None;
    }
    match model.clone().map_or_else(|| shipped_model(sc), Ok) {
        Ok(p) => {
            warn_policy_scope(sc, &p);
            Some(p)
        }
        Err(why) => {
            eprintln!("smartmig: no smart-mig row: {why}");
            None
        }
    }
}

/// Warns where policy file `path` does not cover the run: trained under other semantics
/// than the scenario's (smartmigd loads the file of its own mode, so the run shows what no
/// site would run), or a cluster of several GPU models, whose others it does not drive.
fn warn_policy_scope(sc: &ResolvedScenario, path: &std::path::Path) {
    if let [first, others @ ..] = sc.models.as_slice() {
        if !others.is_empty() {
            let semantics = sc.scenario.repartition.semantics;
            let files: Vec<String> = others
                .iter()
                .map(|m| smartmig_policy::policy_file_name(&m.model.key, semantics))
                .collect();
            eprintln!(
                "warning: {} drives the {} GPUs only; the {} GPUs keep their starting layout \
                 (smartmigd loads one file per model: {})",
                path.display(),
                first.model.key,
                others
                    .iter()
                    .map(|m| m.model.key.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                files.join(", ")
            );
        }
    }
    let trained = std::fs::read(path)
        .ok()
        .and_then(|b| smartmig_policy::onnx_proto::read_metadata(path, &b).ok())
        .map(|m| m.semantics);
    let here = sc.scenario.repartition.semantics;
    if let Some(trained) = trained.filter(|t| *t != here) {
        eprintln!(
            "warning: {} was trained under {} semantics and runs here under {}: smartmigd in {} \
             mode loads a file trained for it",
            path.display(),
            trained.as_str(),
            here.as_str(),
            here.as_str()
        );
    }
}

/// The layout a learned policy starts from: the scenario's best static layout, else its reference.
pub(crate) fn mean_field_start(sc: &ResolvedScenario) -> Vec<String> {
    sc.scenario
        .baselines
        .static_best
        .clone()
        .unwrap_or_else(|| sc.scenario.baselines.reference_layout.clone())
}

/// A progress bar with a label.
pub(crate) fn progress(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_message(what.to_string());
    pb
}

/// One simulated day with its ET against static CEDF on the same jobs.
#[derive(Debug, Clone, serde::Serialize)]
struct SimulatedDay {
    #[serde(flatten)]
    run: RunResult,
    /// ET against static CEDF on the same jobs.
    et: f64,
}

/// Warns about flags the chosen policy does not read.
fn warn_ignored(a: &SimulateArgs) {
    if a.layout.is_some() && a.policy != PolicyArg::Static {
        eprintln!(
            "warning: --layout is ignored with --policy {}",
            policy_name(a.policy)
        );
    }
    if a.model.is_some() && a.policy != PolicyArg::MeanField {
        eprintln!(
            "warning: --model is ignored with --policy {}",
            policy_name(a.policy)
        );
    }
    if a.stay_threshold > 0.0 && a.policy != PolicyArg::MeanField {
        eprintln!(
            "warning: --stay-threshold is ignored with --policy {}",
            policy_name(a.policy)
        );
    }
    if a.trace.trace.is_some() && a.seeds.is_some() {
        eprintln!("warning: --seeds is ignored with --trace (the trace is one run)");
    }
}

fn policy_name(p: PolicyArg) -> String {
    p.to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default()
}

/// The layout source `simulate --policy` names.
fn simulate_layout(a: &SimulateArgs, sc: &ResolvedScenario) -> Result<LayoutSpec, CliError> {
    let missing = |key: &str, cmd: &str| {
        CliError::input(anyhow::anyhow!(
            "the scenario has no baselines.{key}: run `smartmig {cmd} --scenario FILE --write`"
        ))
    };
    Ok(match a.policy {
        PolicyArg::None => LayoutSpec::Static(vec![smartmig_sim::scenario::WHOLE_GPU.into()]),
        PolicyArg::Static => {
            let l = a
                .layout
                .clone()
                .unwrap_or_else(|| sc.scenario.baselines.reference_layout.clone());
            sc.check_layout(&l)
                .map_err(|m| CliError::input(anyhow::anyhow!("--layout {}: {m}", l.join(","))))?;
            if l.len() > sc.gpus.len() {
                eprintln!(
                    "warning: --layout names {} configurations for the cluster's {} GPUs: it runs as {}",
                    l.len(),
                    sc.gpus.len(),
                    super::cluster_layout_summary(sc, &sc.layout_as_run(&l))
                );
            }
            LayoutSpec::Static(l)
        }
        PolicyArg::StaticBest | PolicyArg::PeriodicBest => {
            // `compare` marks a file baseline whose world the run changes; simulate, which
            // does not tune, says so once.
            let tuned = file_tuned(sc, &a.scenario, a.trace.trace.is_some());
            let (spec, note) = if a.policy == PolicyArg::StaticBest {
                let (l, note) = tuned
                    .static_best
                    .ok_or_else(|| missing("static_best", "tune-static"))?;
                (LayoutSpec::Static(l), note)
            } else {
                let (p, note) = tuned
                    .periodic_best
                    .ok_or_else(|| missing("periodic_best", "tune-periodic"))?;
                (LayoutSpec::Periodic(p), note)
            };
            if let Some(note) = note {
                eprintln!("warning: {}: {note}", policy_name(a.policy));
            }
            spec
        }
        PolicyArg::Periodic => LayoutSpec::Periodic(sc.scenario.baselines.periodic.clone()),
        PolicyArg::MeanField => {
            let model = match a.model.clone() {
                Some(m) => m,
                None => shipped_model(sc).map_err(|why| {
                    CliError::input(anyhow::anyhow!("--policy mean-field needs a policy: {why}"))
                })?,
            };
            super::policy_cmd::ensure_runtime()?;
            warn_policy_scope(sc, &model);
            LayoutSpec::MeanField {
                model,
                initial: mean_field_start(sc),
                stay_threshold: a.stay_threshold,
            }
        }
    })
}

/// Runs `simulate`.
pub fn simulate(a: SimulateArgs) -> CliResult {
    warn_ignored(&a);
    let sc = a.scenario.load()?;
    let scheduler = a.scheduler.unwrap_or(match a.policy {
        PolicyArg::None => Scheduler::Edf,
        _ => Scheduler::Cedf,
    });
    let spec = PolicySpec::new(&policy_name(a.policy), scheduler, simulate_layout(&a, &sc)?);
    let days: Vec<(u64, JobSet)> = match a.trace.load()? {
        Some((_, jobs)) => vec![(a.seed, jobs)],
        None => {
            let seeds = a.seeds.map_or(vec![a.seed], |s| s.seeds(EVAL_SEED_BASE));
            seeds
                .into_iter()
                .map(|seed| Ok((seed, workload::from_scenario(&sc, seed, a.trace.skip_bad)?)))
                .collect::<Result<_, workload::TraceError>>()
                .map_err(CliError::input)?
        }
    };
    if days.len() > 1 && (a.dump_jobs.is_some() || a.plot.is_some()) {
        eprintln!("warning: --dump-jobs and --plot are ignored with several days");
    }
    let one = days.len() == 1;
    let mut out = Vec::with_capacity(days.len());
    for (seed, jobs) in &days {
        if let (true, Some(path)) = (one, &a.dump_jobs) {
            let f = std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))
                .map_err(CliError::failure)?;
            write_jobs_csv(jobs, std::io::BufWriter::new(f))
                .with_context(|| format!("cannot write {}", path.display()))
                .map_err(CliError::failure)?;
        }
        let sample = a.plot.as_ref().filter(|_| one).map(|_| 10.0);
        let r = run_policy(&sc, jobs, &spec, *seed, sample).map_err(CliError::input)?;
        let et = r.et(&run_reference(&sc, jobs, *seed), &sc.scenario.objective);
        if let (Some(dir), Some(series)) = (a.plot.as_ref().filter(|_| one), &r.series) {
            simulate_plots(dir, &sc, &r.policy, series)?;
        }
        out.push(SimulatedDay { run: r, et });
    }
    match (a.format, out.as_slice()) {
        (Format::Json, [day]) => print_json(day),
        (Format::Json, days) => print_json(&serde_json::json!({
            "scenario": sc.scenario.name,
            "policy": spec.name,
            "days": days,
            "mean": means(days),
        })),
        (Format::Table, [day]) => {
            print_run(&sc, day);
            Ok(())
        }
        (Format::Table, days) => {
            print_days(&sc, days);
            Ok(())
        }
    }
}

fn simulate_plots(
    dir: &Path,
    sc: &ResolvedScenario,
    policy: &str,
    series: &smartmig_sim::Series,
) -> CliResult {
    make_dir(dir)?;
    plot::load_over_time(
        &dir.join("load.svg"),
        series,
        &format!("{}: arrivals, busy slices, waiting jobs", sc.scenario.name),
    )
    .map_err(CliError::failure)?;
    plot::configuration_mix(
        &dir.join("configurations.svg"),
        series,
        &plot::configuration_labels(sc),
        &format!("{policy}: configuration mix"),
    )
    .map_err(CliError::failure)
}

/// Means over days and the standard error of ET.
fn means(days: &[SimulatedDay]) -> serde_json::Value {
    let n = days.len().max(1) as f64;
    let m = |f: &dyn Fn(&SimulatedDay) -> f64| days.iter().map(f).sum::<f64>() / n;
    let et = m(&|d| d.et);
    let se = (days.iter().map(|d| (d.et - et).powi(2)).sum::<f64>() / (n - 1.0).max(1.0) / n).sqrt();
    serde_json::json!({
        "energy_wmin": m(&|d| d.run.energy_wmin),
        "avg_tardiness_min": m(&|d| d.run.avg_tardiness_min),
        "et": et,
        "et_se": se,
        "repartitions": m(&|d| d.run.repartitions as f64),
    })
}

fn print_run(sc: &ResolvedScenario, day: &SimulatedDay) {
    let r = &day.run;
    println!(
        "scenario {} | policy {} | scheduler {} | semantics {} | seed {} | {} jobs on {} GPUs",
        sc.scenario.name,
        r.policy,
        r.scheduler.name(),
        r.semantics.as_str(),
        r.seed,
        r.jobs,
        sc.gpus.len()
    );
    let rows = vec![
        vec![
            "energy".into(),
            format!("{:.3} kWh ({:.0} W·min)", r.energy_kwh(), r.energy_wmin),
        ],
        vec!["avg tardiness".into(), format!("{:.3} min", r.avg_tardiness_min)],
        vec!["ET vs static-cedf".into(), format!("{:.3}", day.et)],
        vec!["makespan".into(), format!("{:.1} min", r.makespan_min)],
        vec!["utilisation".into(), format!("{:.1}%", 100.0 * r.utilisation)],
        vec!["repartitions".into(), r.repartitions.to_string()],
        vec!["re-layout batches".into(), r.relayout_batches.to_string()],
        vec!["preemptions".into(), r.preemptions.to_string()],
        vec!["events".into(), r.events.to_string()],
    ];
    print!("{}", table(&["metric", "value"], &rows));
}

fn print_days(sc: &ResolvedScenario, days: &[SimulatedDay]) {
    let first = &days[0].run;
    println!(
        "scenario {} | policy {} | scheduler {} | semantics {} | {} days on {} GPUs",
        sc.scenario.name,
        first.policy,
        first.scheduler.name(),
        first.semantics.as_str(),
        days.len(),
        sc.gpus.len()
    );
    let rows: Vec<Vec<String>> = days
        .iter()
        .map(|d| {
            vec![
                d.run.seed.to_string(),
                d.run.jobs.to_string(),
                format!("{:.2}", d.run.energy_kwh()),
                format!("{:.3}", d.run.avg_tardiness_min),
                format!("{:.3}", d.et),
                d.run.repartitions.to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &["seed", "jobs", "energy kWh", "tardiness min", "ET", "reparts"],
            &rows
        )
    );
    let m = means(days);
    println!(
        "mean: energy {:.2} kWh, tardiness {:.3} min, ET {:.3} ± {:.3} (standard error)",
        m["energy_wmin"].as_f64().unwrap_or(f64::NAN) / smartmig_sim::energy::WMIN_PER_KWH,
        m["avg_tardiness_min"].as_f64().unwrap_or(f64::NAN),
        m["et"].as_f64().unwrap_or(f64::NAN),
        m["et_se"].as_f64().unwrap_or(f64::NAN)
    );
}

pub(crate) fn make_dir(dir: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
        .map_err(CliError::failure)
}

/// The scenario file's tuned baselines, each with a caveat when the run's overrides (or a
/// trace) change the world it was tuned for.
pub(crate) fn file_tuned(sc: &ResolvedScenario, args: &ScenarioArgs, trace: bool) -> Tuned {
    let note = |repartitions: bool, cmd: &str| -> Option<String> {
        let sets = args.world_overrides(repartitions);
        let what = match (sets.is_empty(), trace) {
            (true, false) => return None,
            (true, true) => "the trace".to_string(),
            (false, false) => format!("--set {}", sets.join(" --set ")),
            (false, true) => format!("the trace and --set {}", sets.join(" --set ")),
        };
        Some(format!(
            "tuned for the scenario file, not for {what}; run `smartmig {cmd}` with them"
        ))
    };
    let b = &sc.scenario.baselines;
    Tuned {
        static_best: b.static_best.clone().map(|l| (l, note(false, "tune-static"))),
        periodic_best: b.periodic_best.clone().map(|p| (p, note(true, "tune-periodic"))),
    }
}

/// Runs `compare`.
pub fn compare(a: CompareArgs) -> CliResult {
    let sc = a.scenario.load()?;
    let days = a.trace.days(&sc, a.seeds, SeedArg::Count(10), EVAL_SEED_BASE)?;
    let trace = matches!(days, Days::Trace { .. });
    let mut tuned = file_tuned(&sc, &a.scenario, trace);
    let stale = |n: &Option<String>| n.is_some() && !a.no_tune;
    let retune_static = a.tune || tuned.static_best.as_ref().is_some_and(|(_, n)| stale(n));
    let retune_periodic = a.tune || tuned.periodic_best.as_ref().is_some_and(|(_, n)| stale(n));
    if retune_static || retune_periodic {
        let (train, label, note) = tuning_days(&sc, &a, &days)?;
        if retune_static {
            eprintln!("static-best: tuning on {label} for this run's scenario");
            let pb = progress(30, "tune static-best");
            let t = tune_static_on(&sc, train.clone(), &pb);
            pb.finish_and_clear();
            tuned.static_best = Some((t.layout, note.clone()));
        }
        if retune_periodic {
            let start = tuned.static_best.as_ref().map_or_else(
                || sc.scenario.baselines.reference_layout.clone(),
                |(l, _)| l.clone(),
            );
            eprintln!("periodic-best: tuning on {label} for this run's scenario");
            let pb = progress(60, "tune periodic-best");
            let t = tune_periodic_on(&sc, train, &start, DEFAULT_BLOCKS, DEFAULT_PASSES, &pb);
            pb.finish_and_clear();
            tuned.periodic_best = Some((t.map_err(CliError::input)?.schedule, note));
        }
    }
    let model = smart_mig_model(&sc, &a.model, a.no_model);
    if model.is_some() {
        super::policy_cmd::ensure_runtime()?;
    }
    let mut policies = compare_policies(&sc, &tuned, model, a.stay_threshold);
    if !a.no_guard {
        apply_guard(&sc, &mut policies, &days)?;
    }
    let pb = progress(days.seeds().len() as u64, "compare");
    let sample = a.plot.as_ref().map(|_| 10.0);
    let cmp = run_compare(&sc, &policies, &days, sample, !a.no_bounds, &pb).map_err(CliError::input)?;
    pb.finish_and_clear();
    if let Some(dir) = &a.plot {
        compare_plots(dir, &cmp, &plot::configuration_labels(&sc))?;
    }
    match a.format {
        Format::Json => print_json(&cmp),
        Format::Table => {
            let best = tuned
                .static_best
                .as_ref()
                .map(|(l, _)| super::cluster_layout_summary(&sc, &sc.layout_as_run(l)));
            print_comparison(&cmp, best.as_deref());
            Ok(())
        }
    }
}

/// Days to tune on, how to describe them, and the caveat of the result.
type TuningDays = (Vec<(u64, JobSet)>, String, Option<String>);

/// The days `compare` tunes on: training seeds, or a trace's own days (in-sample, noted),
/// with how to describe them.
fn tuning_days(sc: &ResolvedScenario, a: &CompareArgs, days: &Days) -> Result<TuningDays, CliError> {
    match days {
        Days::Trace { days, .. } => Ok((
            days.iter()
                .cloned()
                .enumerate()
                .map(|(i, d)| (i as u64, d))
                .collect(),
            "the trace's days".to_string(),
            Some("tuned on the same trace days it is evaluated on (in-sample)".to_string()),
        )),
        Days::Seeds(_) => {
            let seeds = a.tune_seeds.seeds(TRAIN_SEED_BASE);
            let label = format!("training {}", Days::Seeds(seeds.clone()).describe());
            let train = seeds
                .iter()
                .map(|&s| Ok((s, workload::from_scenario(sc, s, false)?)))
                .collect::<Result<Vec<_>, workload::TraceError>>()
                .map_err(CliError::input)?;
            Ok((train, label, None))
        }
    }
}

/// The deployment guard on `compare`'s learned policy: validated against static-best on
/// this scenario's validation days (on a trace, on the trace's own days: a site judges a
/// policy on its history, not on the generator's), it runs as itself when it passes; when
/// it fails (or
/// smartmigd would refuse its file here: its own guard failed, it was validated where
/// requeued jobs resume and this scenario's restart, or with padding records this
/// scenario does not have) the deployed behaviour
/// is static-best's layout, and the policy itself is shown as `smart-mig-unguarded`.
fn apply_guard(sc: &ResolvedScenario, policies: &mut Vec<PolicySpec>, days: &Days) -> CliResult {
    let Some(i) = policies.iter().position(|p| p.name == SMART_MIG) else {
        return Ok(());
    };
    let Some(static_layout) = policies
        .iter()
        .find(|p| p.name == STATIC_BEST)
        .and_then(|p| match &p.layout {
            LayoutSpec::Static(l) => Some(l.clone()),
            _ => None,
        })
    else {
        return Ok(());
    };
    let file_verdict = match &policies[i].layout {
        LayoutSpec::MeanField { model, .. } => std::fs::read(model)
            .ok()
            .and_then(|b| smartmig_policy::onnx_proto::read_metadata(model, &b).ok())
            .and_then(|m| {
                m.refusal(smartmig_policy::Site {
                    requeued: sc.scenario.repartition.requeued,
                    padding: sc.scenario.repartition.index_rule.padded(),
                    requeue_max_run_s: sc.scenario.repartition.requeue_max_run_s,
                })
            }),
        _ => None,
    }
    // smartmigd takes a policy whose configurations are its action space, which on a
    // mig-parted site is the file's mig-configs.
    .or_else(|| {
        sc.scenario.cluster.configurations.as_ref().map(|_| {
            "its configurations are the catalogue's, not the site's mig-configs \
             (cluster.configurations)"
                .to_string()
        })
    });
    // The trace's days are also the ones reported: in-sample, as tuning on a trace is.
    let validation;
    let (guard_days, in_sample) = match days {
        Days::Trace { .. } => (days, true),
        Days::Seeds(_) => {
            validation = Days::Seeds((0..GUARD_DAYS).map(|d| VALIDATION_SEED_BASE + d).collect());
            (&validation, false)
        }
    };
    let pb = progress(1, "guard");
    let verdict = guard(sc, policies[i].clone(), &static_layout, guard_days).map_err(CliError::input)?;
    pb.finish_and_clear();
    let mut note = format!("guard {}", verdict.describe());
    if in_sample {
        note.push_str(" (the trace's days shown here, in-sample)");
    }
    if let Some(why) = &file_verdict {
        note.push_str(&format!("; smartmigd would refuse its file: {why}"));
    }
    if verdict.passed && file_verdict.is_none() {
        policies[i].note = Some(note);
        return Ok(());
    }
    let mut raw = policies[i].clone();
    raw.name = format!("{SMART_MIG}-unguarded");
    policies[i] = PolicySpec::new(SMART_MIG, Scheduler::Cedf, LayoutSpec::Static(static_layout))
        .with_note(Some(format!("{note}: deployed as static-best")));
    policies.push(raw);
    Ok(())
}

/// The policies `compare` runs: the baselines, and `smart-mig` when a model is given
/// (moving a GPU only when the move is `stay_threshold` likelier than staying).
pub(crate) fn compare_policies(
    sc: &ResolvedScenario,
    tuned: &Tuned,
    model: Option<PathBuf>,
    stay_threshold: f64,
) -> Vec<PolicySpec> {
    let mut policies = baselines(sc, tuned);
    if let Some(model) = model {
        policies.push(PolicySpec::new(
            SMART_MIG,
            Scheduler::Cedf,
            LayoutSpec::MeanField {
                model,
                initial: mean_field_start(sc),
                stay_threshold,
            },
        ));
    }
    policies
}

fn compare_plots(dir: &Path, cmp: &Comparison, labels: &[String]) -> CliResult {
    make_dir(dir)?;
    let first = cmp.runs.first().map(Vec::as_slice).unwrap_or_default();
    if let Some(series) = first
        .iter()
        .find(|r| r.policy == cmp.reference)
        .and_then(|r| r.series.as_ref())
    {
        plot::load_over_time(
            &dir.join("load.svg"),
            series,
            &format!(
                "{}: arrivals, busy slices, waiting jobs ({}, first day)",
                cmp.scenario, cmp.reference
            ),
        )
        .map_err(CliError::failure)?;
    }
    for r in first.iter().filter(|r| r.repartitions > 0) {
        if let Some(series) = &r.series {
            plot::configuration_mix(
                &dir.join(format!("configurations-{}.svg", r.policy)),
                series,
                labels,
                &format!("{}: configuration mix over the first day", r.policy),
            )
            .map_err(CliError::failure)?;
        }
    }
    let points: Vec<plot::EtPoint> = cmp
        .policies
        .iter()
        .map(|p| plot::EtPoint {
            name: p.name.clone(),
            energy_kwh: p.energy_kwh,
            energy_sd: p.energy_wmin_sd / smartmig_sim::energy::WMIN_PER_KWH,
            tardiness_min: p.avg_tardiness_min,
            tardiness_sd: p.avg_tardiness_min_sd,
        })
        .collect();
    let bounds = cmp.bounds.as_ref().and_then(|b| {
        Some((
            b["energy_kwh"].as_f64()?,
            b["tardiness_min"].as_f64().unwrap_or(0.0),
        ))
    });
    plot::energy_vs_tardiness(
        &dir.join("energy-vs-tardiness.svg"),
        &points,
        bounds,
        &format!(
            "{}: energy vs tardiness (mean ± sd over {} days)",
            cmp.scenario,
            cmp.seeds.len()
        ),
    )
    .map_err(CliError::failure)
}

/// `+4.9% ± 0.4%` of a paired gain, or `-`.
fn paired_cell(p: Option<&Paired>) -> String {
    p.map_or("-".into(), |p| {
        format!("{:+.1}% ± {:.1}%", 100.0 * p.mean, 100.0 * p.se)
    })
}

/// `compare`'s table; `best`: static-best's layout in words, for its last line.
pub(crate) fn print_comparison(cmp: &Comparison, best: Option<&str>) {
    println!(
        "scenario {} | {} GPUs | {} jobs/day | {} evaluation days ({}) | reference {}",
        cmp.scenario,
        cmp.gpus,
        cmp.jobs,
        cmp.seeds.len(),
        cmp.days_from,
        cmp.reference
    );
    let rows: Vec<Vec<String>> = cmp
        .policies
        .iter()
        .map(|p| {
            vec![
                if p.note.is_some() {
                    format!("{}*", p.name)
                } else {
                    p.name.clone()
                },
                p.scheduler.name().to_string(),
                format!(
                    "{:.2} ± {:.2}",
                    p.energy_kwh,
                    p.energy_wmin_sd / smartmig_sim::energy::WMIN_PER_KWH
                ),
                format!("{:.3} ± {:.3}", p.avg_tardiness_min, p.avg_tardiness_min_sd),
                format!("{:.3} ± {:.3}", p.et, p.et_sd),
                format!("{:+.1}%", 100.0 * p.et_gain),
                paired_cell(p.vs_static_best.as_ref()),
                format!("{:.1}", p.repartitions),
                format!("{:.1}%", 100.0 * p.utilisation),
                p.energy_above_lb
                    .map(|x| format!("{:+.1}%", 100.0 * x))
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "policy",
                "sched",
                "energy kWh",
                "tardiness min",
                "ET",
                "ET gain",
                "vs static-best",
                "reparts",
                "util",
                "E vs LB"
            ],
            &rows
        )
    );
    println!(
        "± over days: standard deviation; vs static-best: mean ± standard error of the per-day gain 1 − ET/ET(static-best)"
    );
    for p in cmp.policies.iter().filter(|p| p.note.is_some()) {
        println!("* {}: {}", p.name, p.note.as_deref().unwrap_or_default());
    }
    if let Some(b) = &cmp.bounds {
        let kwh = b["energy_kwh"].as_f64().unwrap_or(f64::NAN);
        let tardiness = match (b["tardiness_min"].as_f64(), b["tardiness_method"].as_str()) {
            (Some(t), Some(m)) => format!("{t:.3} min ({m})"),
            _ => "none".into(),
        };
        println!("lower bounds (mean over days): energy {kwh:.2} kWh, avg tardiness {tardiness}");
    }
    match best {
        Some(b) => println!("{STATIC_BEST} layout: {b}"),
        None => {
            println!("{STATIC_BEST}: not in the scenario (run `smartmig tune-static --write` or pass --tune)")
        }
    }
}
