//! `[controller.central]`: settings of the central role (`smartmigd central`).

use std::path::PathBuf;

use serde::Deserialize;

use super::de::positive;

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

/// `[controller.central]`: the reconcile loop on the Slurm controller host.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CentralConfig {
    /// Seconds between reads of Slurm's state (> 0); arrivals and completions seen on
    /// each read count towards `policy.decision_events`.
    #[serde(default = "default_poll", deserialize_with = "positive")]
    pub poll_interval_s: f64,
    /// Seconds to wait for node agents to report on one phase (> 0).
    #[serde(default = "default_report_timeout", deserialize_with = "positive")]
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
    /// Seconds to wait for slurmctld to answer after the restart, or to show the new
    /// layouts after a reconfigure (> 0).
    #[serde(default = "default_ctld_timeout", deserialize_with = "positive")]
    pub slurmctld_timeout_s: f64,
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
        Ok(())
    }
}

fn default_poll() -> f64 {
    5.0
}
fn default_report_timeout() -> f64 {
    120.0
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
