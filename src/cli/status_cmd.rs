//! `smartmig status`: the central role's status file, readable.

use std::path::PathBuf;

use clap::Args;
use smartmig_core::config::{Config, DEFAULT_PATH};
use smartmig_core::status::Status;

use super::{CliError, CliResult};

/// Arguments of `smartmig status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// smartmig.toml (its `[controller] state_dir` holds the status file).
    #[arg(long, default_value = DEFAULT_PATH)]
    config: PathBuf,
    /// Print the status file's JSON.
    #[arg(long)]
    json: bool,
}

/// Prints the status the central role wrote last.
pub fn run(a: StatusArgs) -> CliResult {
    let cfg = Config::from_file(&a.config).map_err(CliError::input)?;
    // A missing status file is no bad input: the central role has not written it (yet).
    let s = Status::read(&cfg.controller.state_dir).map_err(CliError::failure)?;
    if a.json {
        super::print_json(&s)
    } else {
        print!("{}", s.render());
        Ok(())
    }
}
