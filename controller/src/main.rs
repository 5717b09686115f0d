//! smartmigd: the MIG repartitioning daemon (central and node roles).
//!
//! Exit codes (the same as `smartmig`'s): 0 success; 1 a run failed (printed once with its
//! causes); 2 bad command line; 3 invalid input: smartmig.toml missing or wrong.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use smartmigd::central::run;

mod manual;

/// smartmigd: repartitions MIG GPUs between Slurm allocations.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    role: Role,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// The node agent (root on each GPU node): applies layouts, writes gres.conf.
    Node {
        /// smartmig.toml.
        #[arg(long, default_value = smartmig_core::config::DEFAULT_PATH)]
        config: PathBuf,
        /// Recover, handle the current desired state once, and exit.
        #[arg(long)]
        once: bool,
    },
    /// The central role (on the Slurm controller host): decide layouts, hand plans to the
    /// node agents, make Slurm see the new layouts.
    Central {
        /// smartmig.toml.
        #[arg(long, default_value = smartmig_core::config::DEFAULT_PATH)]
        config: PathBuf,
        /// Run one cycle and exit.
        #[arg(long)]
        once: bool,
        /// Decide, log and report what would change; touch nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// The central role's status: layouts, pending transitions, last decisions, errors.
    Status {
        /// smartmig.toml (for `[controller] state_dir`).
        #[arg(long, default_value = smartmig_core::config::DEFAULT_PATH)]
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
    /// Write smartmigd(8) and its subcommand pages into DIR (packaging).
    #[command(hide = true)]
    Manpages {
        /// Output directory (created if missing).
        dir: PathBuf,
    },
    /// Print a shell completion script on stdout (packaging).
    #[command(hide = true)]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

fn node(config: PathBuf, once: bool) -> anyhow::Result<()> {
    smartmigd::node::daemon::run(&config, once)
}

fn bench(gpus: usize, jobs: usize, cycles: usize, fixed: bool) -> anyhow::Result<()> {
    let r = run::bench(gpus, jobs, cycles, fixed)?;
    let ms = |d: &std::time::Duration| d.as_secs_f64() * 1e3;
    println!(
        "{} GPUs, {} pending jobs, policy {}; {} GPUs changed in the first cycle",
        r.gpus, r.pending, r.source, r.changed
    );
    println!("| cycle | read + decide + plan (ms) | whole cycle (ms) |");
    println!("|---|---|---|");
    for (i, (d, c)) in r.decide.iter().zip(&r.cycles).enumerate() {
        println!("| {} | {:.1} | {:.1} |", i + 1, ms(d), ms(c));
    }
    println!("peak RSS: {:.0} MB", r.peak_rss as f64 / 1e6);
    Ok(())
}

/// `smartmigd manpages DIR`: section 8, the daemon's manual section.
fn manpages(dir: PathBuf) -> anyhow::Result<()> {
    for page in smartmig_clidoc::write_man_pages(Cli::command(), "8", &dir, &manual::page_text)? {
        println!("{}", page.display());
    }
    Ok(())
}

/// Exit code for a missing or invalid smartmig.toml (as `smartmig` uses for bad input).
const EXIT_INPUT: u8 = 3;

fn main() -> ExitCode {
    // Before any thread exists: the environment is still safe to change.
    smartmig_policy::runtime::disable_telemetry();
    let cli = Cli::parse();
    // The benchmark's table is its output; its cycles' routine log lines would bury it.
    let level = if matches!(cli.role, Role::Bench { .. }) {
        "warn"
    } else {
        "info"
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level)).init();
    let result = match cli.role {
        Role::Node { config, once } => node(config, once),
        Role::Central {
            config,
            once,
            dry_run,
        } => run::central(&config, once, dry_run),
        Role::Status { config, json } => run::status(&config, json),
        Role::Bench {
            gpus,
            jobs,
            cycles,
            fixed,
        } => bench(gpus, jobs, cycles, fixed),
        Role::Manpages { dir } => manpages(dir),
        Role::Completions { shell } => {
            smartmig_clidoc::write_completions(&mut Cli::command(), shell, &mut std::io::stdout());
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("smartmigd: {e:#}");
            let bad_config = e
                .chain()
                .any(|c| c.downcast_ref::<smartmig_core::config::ConfigError>().is_some());
            ExitCode::from(if bad_config { EXIT_INPUT } else { 1 })
        }
    }
}
