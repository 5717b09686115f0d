//! `smartmig doctor`: one line per check, with a fix for each problem.
//!
//! Exit code: 0 when every check is ok or skipped, 4 when the worst finding is a
//! warning, 5 when a check failed.

use std::path::PathBuf;

use clap::Args;

use super::{print_json, CliError, CliResult, Format};
use smartmig_doctor::{self as doctor, Status, CHECKS};

/// Exit code when the worst finding is a warning.
pub const EXIT_WARN: u8 = 4;
/// Exit code when a check failed.
pub const EXIT_FAIL: u8 = 5;

/// `doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// slurm.conf (default: $SLURM_CONF, else /etc/slurm/slurm.conf).
    #[arg(long)]
    slurm_conf: Option<PathBuf>,
    /// smartmig.toml (default: beside slurm.conf, else /etc/smartmig/smartmig.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// scontrol to ask for Slurm's version.
    #[arg(long, default_value = "scontrol")]
    scontrol: PathBuf,
    /// Leave a check out, e.g. `--skip nvml` on a host without GPUs (repeatable).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(CHECKS))]
    skip: Vec<String>,
    /// This node's Slurm name, for the gres.conf lines compared with its MIG instances
    /// (default: the short host name).
    #[arg(long)]
    node: Option<String>,
    /// Take the MIG instances from a simulated node (a smartmigd simulated-backend
    /// directory) instead of NVML.
    #[arg(long)]
    simulated: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// Runs `doctor`.
pub fn run(a: DoctorArgs) -> CliResult {
    let slurm_conf = a
        .slurm_conf
        .or_else(|| std::env::var_os("SLURM_CONF").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/etc/slurm/slurm.conf"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let tag = |status: Status| match status {
        Status::Ok => "ok",
        Status::Skip => "skip",
        Status::Warn => "WARN",
        Status::Fail => "FAIL",
    };
    // The table shows each line as soon as its check ends; JSON comes whole at the end.
    let format = a.format;
    let mut print_line = |f: &doctor::Finding| {
        if format == Format::Table {
            match &f.fix {
                Some(fix) if f.status >= Status::Warn => {
                    println!("{:<4}  {:<8}  {} — fix: {fix}", tag(f.status), f.check, f.message)
                }
                _ => println!("{:<4}  {:<8}  {}", tag(f.status), f.check, f.message),
            }
        }
    };
    let findings = doctor::run(
        &doctor::Options {
            slurm_conf,
            config: a.config,
            scontrol: a.scontrol,
            skip: a.skip,
            now,
            node: a.node,
            simulated: a.simulated,
            scontrol_timeout: doctor::SCONTROL_TIMEOUT,
        },
        &mut print_line,
    );
    let worst = doctor::worst(&findings);
    if format == Format::Json {
        print_json(&serde_json::json!({
            "worst": worst,
            "findings": findings,
        }))?;
    }
    match worst {
        Status::Ok | Status::Skip => Ok(()),
        Status::Warn => Err(CliError::exit(EXIT_WARN)),
        Status::Fail => Err(CliError::exit(EXIT_FAIL)),
    }
}
