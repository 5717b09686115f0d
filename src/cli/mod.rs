//! Command-line interface: argument definitions and dispatch.
//!
//! Exit codes: 0 success; 1 a run failed (I/O, internal error); 2 usage error (bad
//! arguments, from clap); 3 invalid input (config, scenario, trace, layout or model file).

mod bench_cmd;
mod bounds_cmd;
mod config_cmd;
mod daemon_limits;
mod doctor_cmd;
mod mig_cmd;
mod policy_cmd;
mod replay_cmd;
mod sim_cmd;
mod status_cmd;
mod sweep_cmd;
#[cfg(feature = "train")]
mod train_cmd;
mod tune_cmd;

use std::fmt::Display;

use clap::{Parser, Subcommand, ValueEnum};

/// Exit code for a failed run.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code for a usage error (clap's own, for the same kind of mistake).
pub const EXIT_USAGE: u8 = 2;
/// Exit code for invalid input.
pub const EXIT_INPUT: u8 = 3;

/// A command failure with its exit code.
#[derive(Debug)]
pub struct CliError {
    code: u8,
    error: anyhow::Error,
}

impl CliError {
    /// Bad input: a file or value the user gave.
    pub fn input(e: impl Into<anyhow::Error>) -> CliError {
        CliError {
            code: EXIT_INPUT,
            error: e.into(),
        }
    }

    /// A failure while running.
    pub fn failure(e: impl Into<anyhow::Error>) -> CliError {
        CliError {
            code: EXIT_FAILURE,
            error: e.into(),
        }
    }

    /// A usage error: the command line asks for something this command cannot do.
    pub fn usage(e: impl Into<anyhow::Error>) -> CliError {
        CliError {
            code: EXIT_USAGE,
            error: e.into(),
        }
    }

    /// An exit code with nothing more to print (the command printed its own report).
    pub fn exit(code: u8) -> CliError {
        CliError {
            code,
            error: anyhow::anyhow!(""),
        }
    }

    /// The exit code.
    pub fn code(&self) -> u8 {
        self.code
    }

    /// The error and its causes on one line.
    pub fn message(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        for cause in self.error.chain() {
            let s = cause.to_string();
            // thiserror's transparent wrappers repeat their source: print each text once.
            if !parts.iter().any(|p| p.contains(&s)) {
                parts.push(s);
            }
        }
        parts.join(": ")
    }
}

/// Result of a command.
pub type CliResult = Result<(), CliError>;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// Aligned text.
    #[default]
    Table,
    /// JSON on stdout.
    Json,
}

/// smartmig: energy-aware MIG GPU scheduling — simulate, compare, tune and inspect.
#[derive(Debug, Parser)]
#[command(name = "smartmig", version, about, long_about = None)]
pub struct Cli {
    /// More log output (-v info, -vv debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Log filter from the verbosity flags.
    pub fn log_level(&self) -> &'static str {
        match self.verbose {
            0 => "warn",
            1 => "info",
            _ => "debug",
        }
    }
}

/// Commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// MIG geometry: models, layouts, transition plans.
    #[command(subcommand)]
    Mig(mig_cmd::MigCommand),
    /// Check smartmig.toml.
    #[command(subcommand)]
    Config(config_cmd::ConfigCommand),
    /// Simulate one policy on a scenario.
    Simulate(sim_cmd::SimulateArgs),
    /// Compare every baseline on the same job streams (default: the reference scenario).
    Compare(sim_cmd::CompareArgs),
    /// Search the best static layout for a scenario.
    TuneStatic(tune_cmd::TuneArgs),
    /// Search the best time-of-day schedule for a scenario and write it for smartmigd.
    TunePeriodic(tune_cmd::TunePeriodicArgs),
    /// Measure simulator speed and memory.
    Bench(bench_cmd::BenchArgs),
    /// Learned policies: inspect files, provision ONNX Runtime.
    #[command(subcommand)]
    Policy(policy_cmd::PolicyCommand),
    /// Train a mean-field policy (imitation of a tuned controller, or PPO) and write it as ONNX.
    #[cfg(feature = "train")]
    Train(train_cmd::TrainArgs),
    /// Train a mean-field policy: not in this build (rebuild with `--features train`).
    #[cfg(not(feature = "train"))]
    #[command(disable_help_flag = true)]
    Train(NoTrainer),
    /// Lower bounds on energy and tardiness for one day of jobs.
    Bounds(bounds_cmd::BoundsArgs),
    /// What-if on a site's own sacct history: as ran, best static layout, smart-mig, bounds.
    Replay(replay_cmd::ReplayArgs),
    /// Run a comparison as a Slurm array job (`--emit-sbatch DIR`) and merge it (`--collect DIR`).
    Sweep(sweep_cmd::SweepArgs),
    /// Check an installation: Slurm, plugin, smartmig.toml, snapshot, NVML, ONNX, gres.conf.
    Doctor(doctor_cmd::DoctorArgs),
    /// The controller's status: layouts, pending transitions, last decisions, errors.
    Status(status_cmd::StatusArgs),
    /// Write smartmig(1), its subcommand pages and smartmig.toml(5) into DIR (packaging).
    #[command(hide = true)]
    Manpages {
        /// Output directory (created if missing).
        dir: std::path::PathBuf,
    },
    /// Print a shell completion script on stdout (packaging).
    #[command(hide = true)]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Why `train` is missing from a build without the `train` feature, and what to do.
#[cfg(not(feature = "train"))]
const NO_TRAINER: &str = "train: this smartmig was built without the trainer (the `train` feature, which \
     pulls candle); rebuild with `cargo build --release --features train`, or use the smartmig \
     package, which has it";

/// `train`'s arguments in a build without the trainer: whatever was given, to refuse it
/// with [`NO_TRAINER`] rather than as an unknown command.
#[cfg(not(feature = "train"))]
#[derive(Debug, clap::Args)]
pub struct NoTrainer {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    args: Vec<std::ffi::OsString>,
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> CliResult {
    match cli.command {
        Command::Mig(c) => mig_cmd::run(c),
        Command::Config(c) => config_cmd::run(c),
        Command::Simulate(a) => sim_cmd::simulate(a),
        Command::Compare(a) => sim_cmd::compare(a),
        Command::TuneStatic(a) => tune_cmd::tune_static(a),
        Command::TunePeriodic(a) => tune_cmd::tune_periodic(a),
        Command::Bench(a) => bench_cmd::run(a),
        Command::Policy(c) => policy_cmd::run(c),
        #[cfg(feature = "train")]
        Command::Train(a) => train_cmd::run(a),
        #[cfg(not(feature = "train"))]
        Command::Train(_) => Err(CliError::usage(anyhow::anyhow!(NO_TRAINER))),
        Command::Bounds(a) => bounds_cmd::run(a),
        Command::Replay(a) => replay_cmd::run(a),
        Command::Sweep(a) => sweep_cmd::run(a),
        Command::Doctor(a) => doctor_cmd::run(a),
        Command::Status(a) => status_cmd::run(a),
        Command::Manpages { dir } => manpages(&dir),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            crate::docs::write_completions(&mut Cli::command(), shell, &mut std::io::stdout());
            Ok(())
        }
    }
}

/// `smartmig manpages DIR`: the command pages and smartmig.toml(5).
fn manpages(dir: &std::path::Path) -> CliResult {
    let mut pages = crate::docs::write_smartmig_man_pages(dir).map_err(CliError::failure)?;
    pages.push(crate::docs::write_config_man_page(dir).map_err(CliError::failure)?);
    for p in pages {
        println!("{}", p.display());
    }
    Ok(())
}

/// A layout of scenario `sc` in few words ([`layout_summary`]); on several GPU models each
/// model's GPUs as the layout runs on them (`a100-40gb c1×4, h100-80gb c1 c2`), since
/// their configurations' names overlap.
pub(crate) fn cluster_layout_summary(
    sc: &smartmig_sim::scenario::ResolvedScenario,
    layout: &[String],
) -> String {
    if sc.models.len() == 1 {
        return layout_summary(layout);
    }
    let run = sc.layout_as_run(layout);
    sc.models
        .iter()
        .enumerate()
        .map(|(m, cm)| {
            let names: Vec<String> = run
                .iter()
                .zip(&sc.gpus)
                .filter(|(_, g)| g.model == m)
                .map(|(n, _)| n.clone())
                .collect();
            format!("{} {}", cm.model.key, layout_summary(&names))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A layout in few words: runs of equal configurations counted (`c2×6 c6×2`).
pub(crate) fn layout_summary(layout: &[String]) -> String {
    let mut runs: Vec<(&str, usize)> = Vec::new();
    for c in layout {
        match runs.last_mut() {
            Some((name, n)) if *name == c.as_str() => *n += 1,
            _ => runs.push((c, 1)),
        }
    }
    runs.iter()
        .map(|(c, n)| {
            if *n == 1 {
                (*c).to_string()
            } else {
                format!("{c}×{n}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A flag's value between 0 and 1 (`--stay-threshold`, a difference of probabilities;
/// `train --stake-weight`).
pub(crate) fn parse_fraction(text: &str) -> Result<f64, String> {
    parse_number_in(text, 0.0..=1.0, "between 0 and 1")
}

/// A flag's number within `range`; outside it, the error says it is not `what`.
pub(crate) fn parse_number_in(
    text: &str,
    range: std::ops::RangeInclusive<f64>,
    what: &str,
) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(t) if range.contains(&t) => Ok(t),
        Ok(t) => Err(format!("{t} is not {what}")),
        Err(e) => Err(format!("{text:?} is not a number: {e}")),
    }
}

/// Prints a value as pretty JSON.
pub(crate) fn print_json(v: &impl serde::Serialize) -> CliResult {
    let s = serde_json::to_string_pretty(v).map_err(CliError::failure)?;
    println!("{s}");
    Ok(())
}

/// Formats a table with left-aligned columns.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < width.len() {
                width[i] = width[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&dyn Display>| -> String {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let text = c.to_string();
            let pad = width[i].saturating_sub(text.chars().count());
            s.push_str(&text);
            if i + 1 < cells.len() {
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = line(header.iter().map(|h| h as &dyn Display).collect());
    out.push('\n');
    for r in rows {
        out.push_str(&line(r.iter().map(|c| c as &dyn Display).collect()));
        out.push('\n');
    }
    out
}

#[cfg(all(test, not(feature = "train")))]
mod tests {
    use super::*;

    #[test]
    fn train_in_a_build_without_the_trainer_is_a_usage_error_saying_how_to_get_it() {
        let cli = Cli::try_parse_from(["smartmig", "train", "--out", "x.onnx", "--semantics", "drain"])
            .expect("train's arguments are taken whatever they are");
        let e = run(cli).unwrap_err();
        assert_eq!(e.code(), EXIT_USAGE);
        assert!(e.message().contains("--features train"), "{}", e.message());
    }
}
