//! `smartmig bounds`: energy and tardiness lower bounds for one day of jobs.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use super::sim_cmd::ScenarioArgs;
use super::{print_json, table, CliError, CliResult, Format};
use smartmig_bounds::{day_bounds, DayBounds, Method, TardinessOptions};
use smartmig_eval::EVAL_SEED_BASE;
use smartmig_sim::scenario::TraceFormat;
use smartmig_sim::workload;

/// `bounds`.
#[derive(Debug, Args)]
pub struct BoundsArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// Read jobs from a trace instead of the scenario's workload.
    #[arg(long, requires = "trace_format")]
    trace: Option<PathBuf>,
    /// Format of `--trace`.
    #[arg(long, value_enum, requires = "trace")]
    trace_format: Option<TraceFormat>,
    /// Seed of the job stream (generated workloads).
    #[arg(long, default_value_t = EVAL_SEED_BASE)]
    seed: u64,
    /// Solve the tardiness MIP (binary completion variables) whatever the size.
    #[arg(long, conflicts_with = "relaxed")]
    exact: bool,
    /// Solve only the LP relaxation of the tardiness model whatever the size.
    #[arg(long)]
    relaxed: bool,
    /// Time limit for the tardiness solver, seconds (a MIP reports its proven bound).
    #[arg(long, default_value_t = 60.0)]
    time_limit: f64,
    /// Size budget of the tardiness model in job-slot cells (sets the slot length; default:
    /// 400 for the MIP, 50,000 for the LP).
    #[arg(long)]
    cells: Option<usize>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// What `bounds --format json` prints.
#[derive(Debug, Serialize)]
struct Report {
    scenario: String,
    seed: u64,
    jobs: usize,
    gpus: usize,
    #[serde(flatten)]
    bounds: DayBounds,
}

/// Runs `bounds`.
pub fn run(a: BoundsArgs) -> CliResult {
    if a.time_limit.is_nan() || a.time_limit <= 0.0 {
        return Err(CliError::input(anyhow::anyhow!(
            "--time-limit {} must be a positive number of seconds",
            a.time_limit
        )));
    }
    let sc = a.scenario.load()?;
    let jobs = match (&a.trace, a.trace_format) {
        (Some(path), Some(fmt)) => workload::load_trace(path, fmt, false).map_err(CliError::input)?.0,
        _ => workload::from_scenario(&sc, a.seed, false).map_err(CliError::input)?,
    };
    let opts = TardinessOptions {
        method: match (a.exact, a.relaxed) {
            (true, _) => Method::Exact,
            (_, true) => Method::Relaxed,
            _ => Method::Auto,
        },
        time_limit_s: a.time_limit,
        ..TardinessOptions::default()
    };
    let opts = match a.cells {
        Some(c) => TardinessOptions {
            exact_cells: c,
            max_cells: c,
            ..opts
        },
        None => opts,
    };
    let bounds = day_bounds(&sc, &jobs.jobs, &opts).map_err(CliError::failure)?;
    let report = Report {
        scenario: sc.scenario.name.clone(),
        seed: a.seed,
        jobs: jobs.jobs.len(),
        gpus: sc.gpus.len(),
        bounds,
    };
    match a.format {
        Format::Json => print_json(&report),
        Format::Table => {
            print_report(&report);
            Ok(())
        }
    }
}

fn print_report(r: &Report) {
    println!(
        "scenario {} | seed {} | {} jobs on {} GPUs",
        r.scenario, r.seed, r.jobs, r.gpus
    );
    let e = &r.bounds.energy;
    let mut rows = vec![vec![
        "energy ≥".into(),
        format!(
            "{:.3} kWh ({:.0} W·min)",
            smartmig_sim::energy::wmin_to_kwh(e.energy_wmin),
            e.energy_wmin
        ),
        format!(
            "C* = {:.2} min, work {:.1} GPU-min, {:.2} ms",
            e.makespan_min,
            e.work_machine_min,
            r.bounds.energy_s * 1e3
        ),
    ]];
    if let Some(t) = &r.bounds.tardiness {
        let slot = t
            .slot_min
            .map(|s| format!("slot {s:.4} min, {} cells, ", t.cells))
            .unwrap_or_default();
        rows.push(vec![
            "avg tardiness ≥".into(),
            format!("{:.4} min", t.avg_tardiness_min),
            format!(
                "{} ({}{}, {:.2} s); preemptive EDF on the relaxation: {:.4} min",
                t.method, slot, t.status, t.solve_s, t.edf_avg_tardiness_min
            ),
        ]);
    }
    print!("{}", table(&["bound", "value", "how"], &rows));
}
