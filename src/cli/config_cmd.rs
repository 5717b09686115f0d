//! `smartmig config ...`.

use std::path::PathBuf;

use clap::Subcommand;
use smartmig_core::config::{periodic_mismatch, Config};

use super::{CliError, CliResult};

/// Config commands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Parse and resolve a smartmig.toml; print a summary or the first error.
    Check {
        /// The file.
        file: PathBuf,
    },
}

/// Runs a config command.
pub fn run(cmd: ConfigCommand) -> CliResult {
    match cmd {
        ConfigCommand::Check { file } => {
            let cfg = Config::from_file(&file).map_err(CliError::input)?;
            let resolved = cfg.resolve(file.parent()).map_err(CliError::input)?;
            let models: Vec<&str> = resolved.models.iter().map(|m| m.model.key.as_str()).collect();
            println!(
                "{}: ok (version {}, GPU models: {}, policy: {}, mode: {})",
                file.display(),
                resolved.config.version.get_ref(),
                models.join(", "),
                resolved.config.policy.kind,
                resolved.config.controller.mode
            );
            // Each model takes the entries that fit it (models may share names): on several,
            // show what each reads.
            if resolved.models.len() > 1 {
                for m in &resolved.models {
                    let names = |l: &[usize]| {
                        let l: Vec<String> = l.iter().map(|&c| m.configurations[c].name.clone()).collect();
                        super::layout_summary(&l)
                    };
                    let mut line = format!("  {}: static_layout {}", m.model.key, names(&m.static_layout));
                    for (e, l) in resolved.config.policy.periodic.iter().zip(&m.periodic) {
                        line.push_str(&format!("; from {} {}", e.at.get_ref(), names(l)));
                    }
                    println!("{line}");
                }
            }
            // Valid, but not what the admin asked for: say so where they look first.
            if let Some(why) = periodic_mismatch(&resolved.config) {
                eprintln!("warning: smartmigd runs policy.static_layout instead of the schedule: {why}");
            }
            Ok(())
        }
    }
}
