//! `[controller.central]`: settings of the central role (`smartmigd central`).

use std::path::PathBuf;

use serde::Deserialize;

use super::de::seconds;
use super::de::seconds_or_zero;
use super::hostlist::HostList;
use super::window::Window;

/// How Slurm is made to see new layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RelayoutKind {
    /// By the Slurm release smartmigd was built against: `reconfigure` from 23.11 on,
    /// `restart-slurmctld` before.
    Auto,
    /// Slurm 22.05: rewrite the generated node file, restart slurmctld once per batch,
    /// with every changing node's slurmd stopped meanwhile.
    RestartSlurmctld,
    /// Slurm 23.11 and later: rewrite the generated node file, then one `scontrol
    /// reconfigure` per batch (slurmctld and slurmd re-execute in place; no RPC fails).
    Reconfigure,
}

/// What a job requeued by a re-layout keeps when it runs again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Requeued {
    /// Its progress: the job checkpoints when Slurm requeues it and resumes from the
    /// checkpoint (the paper's model, and the simulator's default).
    #[default]
    Resume,
    /// Nothing: it starts over, as a Slurm job without checkpoints does (the work done is
    /// lost; its energy stays spent).
    Restart,
}

impl Requeued {
    /// The name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Requeued::Resume => "resume",
            Requeued::Restart => "restart",
        }
    }

    /// The value named `s`, if any.
    pub fn parse(s: &str) -> Option<Requeued> {
        [Requeued::Resume, Requeued::Restart]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

/// `[controller.central]`: the reconcile loop on the Slurm controller host.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CentralConfig {
    /// Seconds between reads of Slurm's state (> 0); arrivals and completions seen on
    /// each read count towards `policy.decision_events`.
    #[serde(default = "default_poll", deserialize_with = "seconds")]
    pub poll_interval_s: f64,
    /// Seconds to wait for node agents to report on one phase (> 0).
    #[serde(default = "default_report_timeout", deserialize_with = "seconds")]
    pub report_timeout_s: f64,
    /// Seed of the top-k sampling; unset: drawn at start and logged.
    #[serde(default)]
    pub seed: Option<u64>,
    /// How Slurm learns new layouts.
    #[serde(default = "default_relayout")]
    pub relayout: RelayoutKind,
    /// The generated file holding the managed nodes' `NodeName=` lines, `Include`d by
    /// slurm.conf; smartmig rewrites only their `Gres=` values.
    #[serde(default = "default_nodes_include")]
    pub nodes_include: PathBuf,
    /// Command (program and arguments) that restarts slurmctld without `-c`.
    #[serde(default = "default_restart")]
    pub restart_slurmctld: Vec<String>,
    /// Seconds to wait for slurmctld to answer after the restart or reconfigure (> 0).
    #[serde(default = "default_ctld_timeout", deserialize_with = "seconds")]
    pub slurmctld_timeout_s: f64,
    /// Seconds between the starts of two re-layout batches (each restarts slurmctld on
    /// Slurm 22.05); 0 allows back-to-back batches.
    #[serde(default = "default_min_interval", deserialize_with = "seconds_or_zero")]
    pub min_relayout_interval_s: f64,
    /// Decision cycles in a row that must choose a GPU's new target before it is acted on
    /// (hysteresis against a policy that changes its mind).
    #[serde(default = "default_persist")]
    pub persist_cycles: u32,
    /// The most nodes one batch re-lays out.
    #[serde(default = "default_max_nodes")]
    pub max_nodes_per_batch: u32,
    /// Times of the week in which batches may start (`"Mon-Fri 20:00-06:00"`, local time);
    /// empty: any time.
    #[serde(default)]
    pub maintenance_windows: Vec<String>,
    /// Slurm host lists of the nodes smartmig may re-lay out (`"gpu[001-016]"`); empty: every
    /// node with a smartmig agent.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Only nodes in one of these partitions are re-laid out; empty: any partition.
    #[serde(default)]
    pub partitions: Vec<String>,
    /// Pad each node's MIG types to blocks of fixed size with padding records
    /// (`smartmig_core::mig::padding`), so that a re-layout keeps the node's GPU count and
    /// the other types' device indices and can change a busy node (within a type, gres.conf
    /// keeps each device's position: `smartmig_core::mig::device_order`); the plugin then refuses
    /// untyped GPU requests (they could be given padding) unless it routes them.
    #[serde(default)]
    pub padding: bool,
    /// Preempt mode: the longest a job may have run for smartmigd to requeue it, seconds
    /// (Slurm restarts a requeued job from the beginning unless it checkpoints); a change
    /// that would stop a job running longer waits for it as in drain mode. None: any
    /// requeueable job may be requeued.
    #[serde(default, deserialize_with = "optional_seconds")]
    pub requeue_max_run_s: Option<f64>,
    /// Preempt mode: what this site's jobs keep when Slurm requeues them. A learned policy
    /// validated where requeued jobs resume is refused under `restart` (the default:
    /// Slurm restarts a requeued job unless it checkpoints).
    #[serde(default = "default_requeued")]
    pub requeued: Requeued,
}

/// [`seconds_or_zero`] for a key that may be absent.
fn optional_seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    seconds_or_zero(d).map(Some)
}

impl Default for CentralConfig {
    fn default() -> Self {
        CentralConfig {
            poll_interval_s: default_poll(),
            report_timeout_s: default_report_timeout(),
            seed: None,
            relayout: default_relayout(),
            nodes_include: default_nodes_include(),
            restart_slurmctld: default_restart(),
            slurmctld_timeout_s: default_ctld_timeout(),
            min_relayout_interval_s: default_min_interval(),
            persist_cycles: default_persist(),
            max_nodes_per_batch: default_max_nodes(),
            maintenance_windows: Vec::new(),
            nodes: Vec::new(),
            partitions: Vec::new(),
            padding: false,
            requeue_max_run_s: None,
            requeued: default_requeued(),
        }
    }
}

impl CentralConfig {
    /// Cross-field checks: (key, message) of the first problem.
    pub fn check(&self) -> Result<(), (String, String)> {
        if self.restart_slurmctld.first().is_none_or(|p| p.trim().is_empty()) {
            return Err((
                "restart_slurmctld".into(),
                "must name a program (e.g. [\"systemctl\", \"restart\", \"slurmctld\"])".into(),
            ));
        }
        if self.nodes_include.as_os_str().is_empty() || self.nodes_include.is_relative() {
            return Err((
                "nodes_include".into(),
                format!("must be an absolute path, got `{}`", self.nodes_include.display()),
            ));
        }
        if self.persist_cycles == 0 {
            return Err(("persist_cycles".into(), "must be 1 or more".into()));
        }
        if self.max_nodes_per_batch == 0 {
            return Err(("max_nodes_per_batch".into(), "must be 1 or more".into()));
        }
        for w in &self.maintenance_windows {
            Window::parse(w).map_err(|e| ("maintenance_windows".to_string(), e))?;
        }
        if !self.nodes.is_empty() {
            HostList::parse(&self.nodes.join(",")).map_err(|e| ("nodes".to_string(), e))?;
        }
        Ok(())
    }

    /// The maintenance windows (checked by [`CentralConfig::check`]).
    pub fn windows(&self) -> Vec<Window> {
        self.maintenance_windows
            .iter()
            .filter_map(|w| Window::parse(w).ok())
            .collect()
    }

    /// The node allow-list (None: every node).
    pub fn node_list(&self) -> Option<HostList> {
        if self.nodes.is_empty() {
            return None;
        }
        HostList::parse(&self.nodes.join(",")).ok()
    }
}

fn default_poll() -> f64 {
    5.0
}
fn default_report_timeout() -> f64 {
    // Idle node agents read their record every ~2 minutes (node.idle_poll_interval_s).
    300.0
}
fn default_relayout() -> RelayoutKind {
    RelayoutKind::Auto
}
fn default_nodes_include() -> PathBuf {
    PathBuf::from("/etc/slurm/smartmig-nodes.conf")
}
fn default_restart() -> Vec<String> {
    ["systemctl", "restart", "slurmctld"].map(String::from).to_vec()
}
fn default_ctld_timeout() -> f64 {
    60.0
}
fn default_min_interval() -> f64 {
    900.0
}
fn default_persist() -> u32 {
    2
}
fn default_max_nodes() -> u32 {
    4
}
fn default_requeued() -> Requeued {
    Requeued::Restart
}
