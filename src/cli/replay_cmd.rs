//! `smartmig replay`: a what-if on a site's own `sacct` history.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use smartmig_core::config::Config;
use smartmig_core::routing::builtin_classes;

use super::sim_cmd::{shipped_model, ScenarioArgs};
use super::{print_json, table, CliError, CliResult, Format};
use smartmig_eval::replay::{replay, Replay, ReplayInput};
use smartmig_eval::{replay_html, EVAL_SEED_BASE};
use smartmig_sim::energy::WMIN_PER_KWH;

/// `replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The history: `sacct -a -X --parsable2 --format=JobID,Submit,Start,End,Timelimit,ReqTRES,AllocTRES,State,Comment` (run with TZ=UTC).
    #[arg(long)]
    sacct: PathBuf,
    /// The cluster it ran on, as a scenario (`--scenario`, `--set cluster.gpus=[...]`).
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// smartmig.toml whose `[[routing.class]]` curves apply to jobs labelled with them.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Policy file (ONNX) for the smart-mig column (default: the shipped one, when present).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Leave the smart-mig column out.
    #[arg(long, conflicts_with = "model")]
    no_model: bool,
    /// Seed of the simulated runs.
    #[arg(long, default_value_t = EVAL_SEED_BASE)]
    seed: u64,
    /// Skip malformed sacct rows (and count them) instead of failing.
    #[arg(long)]
    skip_bad: bool,
    /// Write the self-contained HTML report here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// The figures' sampling interval for a history: about 150 samples over the time the jobs
/// ran, at most 10 minutes (a day's figures) and at least 3 s, so a short history still
/// draws lines rather than one point.
fn sample_interval(runs: &[smartmig_sim::workload::sacct::Ran]) -> f64 {
    let start = runs.iter().map(|r| r.start).fold(f64::INFINITY, f64::min);
    let end = runs.iter().map(|r| r.end).fold(f64::NEG_INFINITY, f64::max);
    let span = if end > start { end - start } else { 0.0 };
    (span / 150.0).clamp(0.05, 10.0)
}

/// Runs `replay`.
pub fn run(a: ReplayArgs) -> CliResult {
    let sc = a.scenario.load()?;
    let name = a.sacct.display().to_string();
    let file = std::fs::File::open(&a.sacct)
        .with_context(|| format!("cannot read {name}"))
        .map_err(CliError::input)?;
    let (jobs, stats, runs) =
        smartmig_sim::workload::sacct::read_sacct_runs(std::io::BufReader::new(file), &name, a.skip_bad)
            .map_err(CliError::input)?;
    if jobs.jobs.is_empty() {
        return Err(CliError::input(smartmig_sim::workload::TraceError::Empty {
            path: name,
            stats,
        }));
    }
    let classes = match &a.config {
        Some(p) => Config::from_file(p)
            .map_err(CliError::input)?
            .routing
            .all_classes(),
        None => builtin_classes(),
    };
    let model = if a.no_model {
        Err("left out with --no-model".to_string())
    } else {
        a.model.clone().map_or_else(|| shipped_model(&sc), Ok)
    };
    if model.is_ok() {
        super::policy_cmd::ensure_runtime()?;
    }
    let pb = indicatif::ProgressBar::hidden();
    let sample_every = a.html.as_ref().map(|_| sample_interval(&runs));
    let input = ReplayInput {
        source: name,
        jobs,
        runs,
        stats,
        classes,
        model,
        seed: a.seed,
        sample_every,
    };
    let r = replay(&sc, input, &pb).map_err(CliError::input)?;
    if let Some(path) = &a.html {
        let labels = smartmig_eval::plot::configuration_labels(&sc);
        let page = replay_html::render(&r, &labels).map_err(CliError::failure)?;
        std::fs::write(path, page)
            .with_context(|| format!("cannot write {}", path.display()))
            .map_err(CliError::failure)?;
    }
    match a.format {
        Format::Json => print_json(&r),
        Format::Table => {
            print_replay(&r);
            Ok(())
        }
    }
}

fn print_replay(r: &Replay) {
    println!(
        "history {} | {} jobs of {} rows | cluster {} ({} GPUs) | seed {}",
        r.source, r.jobs, r.rows, r.scenario, r.gpus, r.seed
    );
    let kwh = |w: f64| format!("{:.3}", w / WMIN_PER_KWH);
    let mut rows = vec![vec![
        "as ran".to_string(),
        format!(
            "{} ({}–{})",
            kwh(r.as_ran.energy_wmin),
            kwh(r.as_ran.energy_wmin_low),
            kwh(r.as_ran.energy_wmin_high)
        ),
        format!("{:.3}", r.as_ran.avg_tardiness_min),
        "1.000".into(),
        "-".into(),
    ]];
    for c in &r.columns {
        rows.push(vec![
            c.name.clone(),
            kwh(c.energy_wmin),
            format!("{:.3}", c.avg_tardiness_min),
            format!("{:.3}", c.et_vs_as_ran),
            c.layout
                .as_ref()
                .map_or_else(|| "learned".into(), |l| super::layout_summary(l)),
        ]);
    }
    rows.push(vec![
        "lower bounds".into(),
        kwh(r.bounds.energy_wmin),
        r.bounds
            .tardiness_min
            .map_or_else(|| "none".into(), |t| format!("{t:.3}")),
        "-".into(),
        "-".into(),
    ]);
    print!(
        "{}",
        table(
            &[
                "schedule",
                "energy kWh",
                "tardiness min",
                "ET vs as ran",
                "layout"
            ],
            &rows
        )
    );
    if let Some(why) = &r.smart_mig_missing {
        println!("no smart-mig column: {why}");
    }
    for i in &r.inferred {
        println!("[{}] {}: {}", i.confidence, i.quantity, i.source);
    }
}
