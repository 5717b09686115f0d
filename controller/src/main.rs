//! smartmigd: the MIG repartitioning daemon (central and node roles).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// The central role (on the Slurm controller host): decides layouts.
    Central {
        /// smartmig.toml.
        #[arg(long, default_value = smartmig_core::config::DEFAULT_PATH)]
        config: PathBuf,
    },
}

fn node(config: PathBuf, once: bool) -> anyhow::Result<()> {
    smartmigd::node::daemon::run(&config, once)
}

fn central(_config: PathBuf) -> anyhow::Result<()> {
    anyhow::bail!("the central role is not built yet")
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let result = match cli.role {
        Role::Node { config, once } => node(config, once),
        Role::Central { config } => central(config),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("smartmigd: {e:#}");
            ExitCode::FAILURE
        }
    }
}
