//! `smartmig bench`: simulator speed and memory on the reference day and at scale.

use std::time::Instant;

use clap::Args;

use super::{table, CliError, CliResult};
use smartmig_eval::compare::run_reference;
use smartmig_eval::EVAL_SEED_BASE;
use smartmig_sim::scenario::Scenario;
use smartmig_sim::workload;

/// `bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Repetitions of the reference day (the median is reported).
    #[arg(long, default_value_t = 21)]
    reps: u32,
    /// Skip the 1,024-GPU, 7-day, 2,560× run.
    #[arg(long)]
    quick: bool,
    /// Measure the learned policy's decision path (ONNX Runtime) instead of the simulator.
    #[arg(long)]
    policy: bool,
}

/// Peak resident memory of this process in MiB (Linux), if known.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

struct Row {
    name: String,
    jobs: usize,
    events: u64,
    gen_s: f64,
    sim_s: f64,
}

fn measure(name: &str, sets: &[String], reps: u32) -> Result<Row, CliError> {
    let sc = Scenario::reference(sets).map_err(CliError::input)?;
    let t0 = Instant::now();
    let jobs = workload::from_scenario(&sc, EVAL_SEED_BASE, false).map_err(CliError::input)?;
    let gen_s = t0.elapsed().as_secs_f64();
    let mut times = Vec::new();
    let mut events = 0;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let r = run_reference(&sc, &jobs, EVAL_SEED_BASE);
        times.push(t.elapsed().as_secs_f64());
        events = r.events;
    }
    times.sort_by(f64::total_cmp);
    Ok(Row {
        name: name.into(),
        jobs: jobs.jobs.len(),
        events,
        gen_s,
        sim_s: times[times.len() / 2],
    })
}

/// Runs the benchmark and prints a table.
pub fn run(a: BenchArgs) -> CliResult {
    if a.policy {
        return super::policy_cmd::bench(None, 10_000);
    }
    let mut rows = vec![measure("reference day, 8 GPUs, 20×", &[], a.reps)?];
    if !a.quick {
        let sets = [
            "cluster.gpus=[{model=\"a100-40gb\",count=1024}]".to_string(),
            "workload.days=7".to_string(),
            "workload.multiplier=2560".to_string(),
        ];
        rows.push(measure("1,024 GPUs, 7 days, 2,560×", &sets, 1)?);
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.jobs.to_string(),
                r.events.to_string(),
                format!("{:.1} ms", r.gen_s * 1e3),
                format!("{:.1} ms", r.sim_s * 1e3),
                format!("{:.2} M/s", r.events as f64 / r.sim_s / 1e6),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "run (static-cedf)",
                "jobs",
                "events",
                "generate",
                "simulate",
                "events/s"
            ],
            &cells
        )
    );
    if let Some(mib) = peak_rss_mib() {
        println!("peak resident memory: {mib:.0} MiB");
    }
    Ok(())
}
