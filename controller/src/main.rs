//! smartmigd: the MIG repartitioning daemon (central and node roles).
//!
//! Exit codes: 0 success, 1 error (printed once with its causes), 2 bad command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use smartmigd::central::run;

#[derive(Parser)]
#[command(
    name = "smartmigd",
    version,
    about = "Repartitions MIG GPUs between Slurm allocations"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The central role, on the Slurm controller host: decide, plan, hand plans to node
    /// agents, make Slurm see the new layouts.
    Central {
        /// Config file.
        #[arg(long, default_value_os_t = run::default_config())]
        config: PathBuf,
        /// Run one cycle and exit.
        #[arg(long)]
        once: bool,
        /// Decide, log and report what would change; touch nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show the central role's status: layouts, pending transitions, last decisions, errors.
    Status {
        /// Config file (for `[controller] state_dir`).
        #[arg(long, default_value_os_t = run::default_config())]
        config: PathBuf,
        /// Print the status file's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Time central cycles on a synthetic Slurm state (Slurm's own response time excluded).
    Bench {
        /// GPUs in the synthetic cluster.
        #[arg(long, default_value_t = 10_000)]
        gpus: usize,
        /// Pending jobs.
        #[arg(long, default_value_t = 100_000)]
        jobs: usize,
        /// Cycles to run.
        #[arg(long, default_value_t = 5)]
        cycles: usize,
        /// Use the static layout instead of a (random) ONNX policy.
        #[arg(long)]
        fixed: bool,
    },
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Central { config, once, dry_run } => run::central(&config, once, dry_run),
        Command::Status { config, json } => run::status(&config, json),
        Command::Bench { gpus, jobs, cycles, fixed } => run::bench(gpus, jobs, cycles, fixed).map(|r| {
            let ms: Vec<f64> = r.cycles.iter().map(|d| d.as_secs_f64() * 1e3).collect();
            let max = ms.iter().copied().fold(0.0, f64::max);
            let dms: Vec<f64> = r.decide.iter().map(|d| (d.as_secs_f64() * 1e4).round() / 10.0).collect();
            println!(
                "{} GPUs, {} pending jobs, policy {}: read+decide+plan ms {dms:?}; whole cycle ms {:?} (max {max:.1}); {} GPUs changed in the first; peak RSS {:.0} MB",
                r.gpus,
                r.pending,
                r.source,
                ms.iter().map(|m| (m * 10.0).round() / 10.0).collect::<Vec<_>>(),
                r.changed,
                r.peak_rss as f64 / 1e6
            );
        }),
    };
    if let Err(e) = result {
        eprintln!("smartmigd: {e:#}");
        std::process::exit(1);
    }
}
