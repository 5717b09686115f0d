//! `smartmig simulate | compare | tune-static`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

use super::{print_json, table, CliError, CliResult, Format};
use crate::eval::compare::{
    baselines, compare as run_compare, run_policy, Comparison, LayoutSpec, PolicySpec,
};
use crate::eval::tune::{tune_static as run_tune, TuneResult};
use crate::eval::{eval_seeds, train_seeds, EVAL_SEED_BASE};
use crate::scenario::{ResolvedScenario, Scenario, Semantics, TraceFormat};
use crate::sched::Scheduler;
use crate::sim::plot;
use crate::workload::{self, write_jobs_csv};

/// Scenario selection shared by every command that runs the simulator.
#[derive(Debug, Args)]
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
    #[arg(long, value_enum)]
    pub semantics: Option<Semantics>,
}

impl ScenarioArgs {
    /// Loads and resolves the scenario with its overrides.
    pub fn load(&self) -> Result<ResolvedScenario, CliError> {
        let sets = self.all_sets();
        match &self.scenario {
            Some(p) => Scenario::load(p, &sets),
            None => Scenario::reference(&sets),
        }
        .map_err(CliError::input)
    }

    /// The `--set` overrides with the shorthands (`--days`, `--semantics`) folded in.
    pub fn all_sets(&self) -> Vec<String> {
        let mut sets = self.sets.clone();
        if let Some(d) = self.days {
            sets.push(format!("workload.days={d}"));
        }
        if let Some(s) = self.semantics {
            let name = s
                .to_possible_value()
                .map(|v| v.get_name().to_string())
                .unwrap_or_default();
            sets.push(format!("repartition.semantics=\"{name}\""));
        }
        sets
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
    /// Static layout: configurations cycled over the GPUs (`c6,c6,c2`).
    #[arg(long, value_delimiter = ',')]
    layout: Option<Vec<String>>,
    /// Policy file (ONNX) for `--policy mean-field`.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Scheduler.
    #[arg(long, value_enum, default_value = "cedf")]
    scheduler: Scheduler,
    /// Seed of the job stream and the run.
    #[arg(long, default_value_t = EVAL_SEED_BASE)]
    seed: u64,
    /// Read jobs from a trace instead of the scenario's workload.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Format of `--trace`.
    #[arg(long, value_enum, requires = "trace")]
    trace_format: Option<TraceFormat>,
    /// Skip malformed trace lines (and report how many) instead of failing.
    #[arg(long)]
    skip_bad: bool,
    /// Write the job list (smartmig's CSV) to this file.
    #[arg(long)]
    dump_jobs: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Write figures (SVG) to this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// `compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// Evaluation days (seeds).
    #[arg(long, default_value_t = 10)]
    seeds: u32,
    /// Search `static-best` now on training seeds instead of reading it from the scenario.
    #[arg(long)]
    tune: bool,
    /// Training seeds for `--tune`.
    #[arg(long, default_value_t = 4)]
    tune_seeds: u32,
    /// Policy file (ONNX) to include as `smart-mig` (default: `onnx/<gpu-key>-<semantics>.onnx`
    /// in the current directory or /usr/share/smartmig/onnx, when present).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Leave the learned policy out even when one is shipped.
    #[arg(long, conflicts_with = "model")]
    no_model: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
    /// Write figures (SVG) to this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// Where the `smartmig` package installs the learned policies.
pub const SHIPPED_POLICY_DIR: &str = "/usr/share/smartmig/onnx";

/// The shipped policy for a scenario's GPU model and semantics (`onnx/` of the current
/// directory, then [`SHIPPED_POLICY_DIR`]), or one line saying why there is none.
pub fn shipped_model(sc: &ResolvedScenario) -> Result<PathBuf, String> {
    let cm = sc
        .models
        .first()
        .ok_or_else(|| "the scenario has no GPU model".to_string())?;
    let name = crate::policy::policy_file_name(&cm.model.key, sc.scenario.repartition.semantics);
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
        Ok(p) => Some(p),
        Err(why) => {
            eprintln!("smartmig: no smart-mig row: {why}");
            None
        }
    }
}

/// The layout a learned policy starts from: the scenario's best static layout, else its reference.
fn mean_field_start(sc: &ResolvedScenario) -> Vec<String> {
    sc.scenario
        .baselines
        .static_best
        .clone()
        .unwrap_or_else(|| sc.scenario.baselines.reference_layout.clone())
}

/// `tune-static`.
#[derive(Debug, Args)]
pub struct TuneArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// Training days (seeds) to search on.
    #[arg(long, default_value_t = 4)]
    seeds: u32,
    /// Record the result as `baselines.static_best` in the scenario file.
    #[arg(long, requires = "scenario")]
    write: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

fn progress(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_message(what.to_string());
    pb
}

/// Runs `simulate`.
pub fn simulate(a: SimulateArgs) -> CliResult {
    let sc = a.scenario.load()?;
    let jobs = match (&a.trace, a.trace_format) {
        (Some(path), Some(fmt)) => {
            let (jobs, stats) = workload::load_trace(path, fmt, a.skip_bad).map_err(CliError::input)?;
            if stats.total_skipped() > 0 {
                eprintln!(
                    "{}: skipped {} lines ({})",
                    path.display(),
                    stats.total_skipped(),
                    stats
                );
            }
            jobs
        }
        (Some(_), None) => return Err(CliError::input(anyhow::anyhow!("--trace needs --trace-format"))),
        _ => workload::from_scenario(&sc, a.seed, a.skip_bad).map_err(CliError::input)?,
    };
    if let Some(path) = &a.dump_jobs {
        let f = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))
            .map_err(CliError::failure)?;
        write_jobs_csv(&jobs, std::io::BufWriter::new(f))
            .with_context(|| format!("cannot write {}", path.display()))
            .map_err(CliError::failure)?;
    }
    let layout = match a.policy {
        PolicyArg::None => LayoutSpec::Static(vec![crate::scenario::WHOLE_GPU.into()]),
        PolicyArg::Static => {
            let l = a.layout.clone().unwrap_or_else(|| sc.scenario.baselines.reference_layout.clone());
            sc.check_layout(&l)
                .map_err(|m| CliError::input(anyhow::anyhow!("--layout {}: {m}", l.join(","))))?;
            LayoutSpec::Static(l)
        }
        PolicyArg::StaticBest => LayoutSpec::Static(sc.scenario.baselines.static_best.clone().ok_or_else(|| {
            CliError::input(anyhow::anyhow!(
                "the scenario has no baselines.static_best: run `smartmig tune-static --scenario FILE --write`"
            ))
        })?),
        PolicyArg::Periodic => LayoutSpec::Periodic,
        PolicyArg::MeanField => {
            let model = match a.model.clone() {
                Some(m) => m,
                None => shipped_model(&sc)
                    .map_err(|why| CliError::input(anyhow::anyhow!("--policy mean-field needs a policy: {why}")))?,
            };
            super::policy_cmd::ensure_runtime()?;
            LayoutSpec::MeanField { model, initial: mean_field_start(&sc) }
        }
    };
    let name = a
        .policy
        .to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    let spec = PolicySpec {
        name,
        scheduler: a.scheduler,
        layout,
    };
    let sample = a.plot.as_ref().map(|_| 10.0);
    let r = run_policy(&sc, &jobs, &spec, a.seed, sample).map_err(CliError::input)?;
    if let (Some(dir), Some(series)) = (&a.plot, &r.series) {
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
            &plot::configuration_labels(&sc),
            &format!("{}: configuration mix", r.policy),
        )
        .map_err(CliError::failure)?;
    }
    match a.format {
        Format::Json => print_json(&r),
        Format::Table => {
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
                vec!["makespan".into(), format!("{:.1} min", r.makespan_min)],
                vec!["utilisation".into(), format!("{:.1}%", 100.0 * r.utilisation)],
                vec!["repartitions".into(), r.repartitions.to_string()],
                vec!["preemptions".into(), r.preemptions.to_string()],
                vec!["events".into(), r.events.to_string()],
            ];
            print!("{}", table(&["metric", "value"], &rows));
            Ok(())
        }
    }
}

fn make_dir(dir: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
        .map_err(CliError::failure)
}

/// Runs `compare`.
pub fn compare(a: CompareArgs) -> CliResult {
    let sc = a.scenario.load()?;
    let best = if a.tune {
        let pb = progress(30, "tune static-best");
        let t = run_tune(&sc, &train_seeds(a.tune_seeds), &pb).map_err(CliError::input)?;
        pb.finish_and_clear();
        Some(t.layout)
    } else {
        sc.scenario.baselines.static_best.clone()
    };
    let model = smart_mig_model(&sc, &a.model, a.no_model);
    if model.is_some() {
        super::policy_cmd::ensure_runtime()?;
    }
    let policies = compare_policies(&sc, best.as_deref(), model);
    let seeds = eval_seeds(a.seeds);
    let pb = progress(seeds.len() as u64, "compare");
    let sample = a.plot.as_ref().map(|_| 10.0);
    let cmp = run_compare(&sc, &policies, &seeds, sample, &pb).map_err(CliError::input)?;
    pb.finish_and_clear();
    if let Some(dir) = &a.plot {
        compare_plots(dir, &cmp, &plot::configuration_labels(&sc))?;
    }
    match a.format {
        Format::Json => print_json(&cmp),
        Format::Table => {
            print_comparison(&cmp, best.as_deref());
            Ok(())
        }
    }
}

/// The policies `compare` runs: the baselines, and `smart-mig` when a model is given.
pub(crate) fn compare_policies(
    sc: &ResolvedScenario,
    best: Option<&[String]>,
    model: Option<PathBuf>,
) -> Vec<PolicySpec> {
    let mut policies = baselines(sc, best);
    if let Some(model) = model {
        policies.push(PolicySpec {
            name: "smart-mig".into(),
            scheduler: Scheduler::Cedf,
            layout: LayoutSpec::MeanField {
                model,
                initial: mean_field_start(sc),
            },
        });
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
            energy_sd: p.energy_wmin_sd / crate::energy::WMIN_PER_KWH,
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

pub(crate) fn print_comparison(cmp: &Comparison, best: Option<&[String]>) {
    println!(
        "scenario {} | {} GPUs | {} jobs/day | {} evaluation days (seeds {}..={}) | reference {}",
        cmp.scenario,
        cmp.gpus,
        cmp.jobs,
        cmp.seeds.len(),
        cmp.seeds.first().copied().unwrap_or(0),
        cmp.seeds.last().copied().unwrap_or(0),
        cmp.reference
    );
    let rows: Vec<Vec<String>> = cmp
        .policies
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.scheduler.name().to_string(),
                format!(
                    "{:.2} ± {:.2}",
                    p.energy_kwh,
                    p.energy_wmin_sd / crate::energy::WMIN_PER_KWH
                ),
                format!("{:.3} ± {:.3}", p.avg_tardiness_min, p.avg_tardiness_min_sd),
                format!("{:.3} ± {:.3}", p.et, p.et_sd),
                format!("{:+.1}%", 100.0 * p.et_gain),
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
                "reparts",
                "util",
                "E vs LB"
            ],
            &rows
        )
    );
    if let Some(b) = &cmp.bounds {
        let kwh = b["energy_kwh"].as_f64().unwrap_or(f64::NAN);
        let tardiness = match (b["tardiness_min"].as_f64(), b["tardiness_method"].as_str()) {
            (Some(t), Some(m)) => format!("{t:.3} min ({m})"),
            _ => "none".into(),
        };
        println!("lower bounds (mean over days): energy {kwh:.2} kWh, avg tardiness {tardiness}");
    }
    match best {
        Some(b) => println!("static-best layout: {}", b.join(" ")),
        None => {
            println!("static-best: not in the scenario (run `smartmig tune-static --write` or pass --tune)")
        }
    }
}

/// Runs `tune-static`.
pub fn tune_static(a: TuneArgs) -> CliResult {
    let sc = a.scenario.load()?;
    let seeds = train_seeds(a.seeds);
    let pb = progress(30, "tune static-best");
    let t = run_tune(&sc, &seeds, &pb).map_err(CliError::input)?;
    pb.finish_and_clear();
    if a.write {
        if let Some(path) = &a.scenario.scenario {
            write_static_best(path, &t)?;
        }
    }
    match a.format {
        Format::Json => print_json(&t),
        Format::Table => {
            println!("best static layout: {}", t.layout.join(" "));
            println!(
                "ET vs static-cedf on training seeds {:?}: {:.3} (gain {:+.1}%); best uniform {} at {:.3}; {} layouts simulated",
                t.seeds,
                t.et,
                100.0 * (1.0 - t.et),
                t.best_uniform.0,
                t.best_uniform.1,
                t.evaluations
            );
            if a.write {
                println!("written to baselines.static_best");
            }
            Ok(())
        }
    }
}

/// Sets `baselines.static_best` in a scenario file, keeping its comments and layout.
fn write_static_best(path: &Path, t: &TuneResult) -> CliResult {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {}", path.display()))
        .map_err(CliError::failure)?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("cannot edit {}", path.display()))
        .map_err(CliError::input)?;
    let mut arr = toml_edit::Array::new();
    for c in &t.layout {
        arr.push(c.as_str());
    }
    if !doc.contains_table("baselines") {
        doc["baselines"] = toml_edit::table();
    }
    doc["baselines"]["static_best"] = toml_edit::value(arr);
    std::fs::write(path, doc.to_string())
        .with_context(|| format!("cannot write {}", path.display()))
        .map_err(CliError::failure)
}
