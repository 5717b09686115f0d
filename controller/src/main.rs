//! smartmigd: the MIG repartitioning daemon (central and node roles).
//!
//! Exit codes: 0 success, 1 error (printed once with its causes), 2 bad command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use smartmigd::central::run;

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
        /// Recreate the last layouts on GPUs a reboot left empty, rewrite gres.conf, and
        /// exit (run by smartmigd-node-restore.service before slurmd).
        #[arg(long, conflicts_with_all = ["once", "release"])]
        restore: bool,
        /// Remove smartmig's markers from gres.conf (its lines stay) and its report from
        /// the node's Comment, and exit (before uninstalling).
        #[arg(long, conflicts_with = "once")]
        release: bool,
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
    /// Stop starting re-layouts, cluster-wide, until `smartmigd thaw` (one in flight
    /// finishes or is undone).
    Freeze {
        /// smartmig.toml (for `[controller] state_dir`).
        #[arg(long, default_value = smartmig_core::config::DEFAULT_PATH)]
        config: PathBuf,
        /// Why, shown by `smartmigd status`.
        #[arg(long, default_value = "frozen by an admin")]
        reason: String,
    },
    /// Lift a freeze.
    Thaw {
        /// smartmig.toml.
        #[arg(long, default_value = smartmig_core::config::DEFAULT_PATH)]
        config: PathBuf,
    },
    /// Undo what smartmig set in Slurm (its drains, its Extra/Comment keys), leaving the
    /// layouts as they are; run before uninstalling, after `freeze`.
    Release {
        /// smartmig.toml.
        #[arg(long, default_value = smartmig_core::config::DEFAULT_PATH)]
        config: PathBuf,
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
        /// Count RPCs to slurmctld instead (central role and node agents, in-memory Slurm).
        #[arg(long)]
        rpc: bool,
        /// Cluster sizes for --rpc, in nodes of 8 GPUs.
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        nodes: Vec<usize>,
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

fn node(config: PathBuf, once: bool, restore: bool, release: bool) -> anyhow::Result<()> {
    use smartmigd::node::daemon;
    if restore {
        return daemon::restore(&config);
    }
    if release {
        return daemon::release(&config);
    }
    daemon::run(&config, once)
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

fn bench_rpc(nodes: &[usize]) -> anyhow::Result<()> {
    let show = |c: &run::RpcCounts| {
        c.iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("| nodes (8 GPUs each) | central, per idle cycle | central, one batch of 4 nodes | agents, RPC/s | agents, RPC/s per 100 nodes |");
    println!("|---|---|---|---|---|");
    for &n in nodes {
        let r = run::bench_rpc(n)?;
        let per_cycle: run::RpcCounts = r
            .idle_cycle
            .iter()
            .map(|(k, v)| (*k, v / r.idle_cycles))
            .collect();
        let total: u64 = r.agents.values().sum();
        let rate = total as f64 / r.seconds;
        println!(
            "| {} | {} | {} ({} cycles) | {:.1} ({}) | {:.2} |",
            r.nodes,
            show(&per_cycle),
            show(&r.batch),
            r.batch_cycles,
            rate,
            show(&r.agents),
            rate / (r.nodes as f64 / 100.0)
        );
    }
    Ok(())
}

/// `smartmigd manpages DIR`: section 8, the daemon's manual section.
fn manpages(dir: PathBuf) -> anyhow::Result<()> {
    for page in smartmig_clidoc::write_man_pages(Cli::command(), "8", &dir)? {
        println!("{}", page.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The benchmark's table is its output; its cycles' routine log lines would bury it.
    let level = if matches!(cli.role, Role::Bench { .. }) {
        "warn"
    } else {
        "info"
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level)).init();
    let result = match cli.role {
        Role::Node {
            config,
            once,
            restore,
            release,
        } => node(config, once, restore, release),
        Role::Freeze { config, reason } => run::freeze(&config, &reason, false),
        Role::Thaw { config } => run::freeze(&config, "", true),
        Role::Release { config } => run::release(&config),
        Role::Central {
            config,
            once,
            dry_run,
        } => run::central(&config, once, dry_run),
        Role::Status { config, json } => run::status(&config, json),
        Role::Bench { rpc: true, nodes, .. } => bench_rpc(&nodes),
        Role::Bench {
            gpus,
            jobs,
            cycles,
            fixed,
            ..
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
            ExitCode::FAILURE
        }
    }
}
