//! `[node]`: the smartmigd node agent on a GPU node.

use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

use super::de::seconds;

/// Which GPU backend the node agent drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// The real GPUs, through NVML (`libnvidia-ml.so.1`).
    Nvml,
    /// A simulated node kept in `simulated_dir` (tests, demonstrations).
    Simulated,
}

/// How the node agent receives desired state and sends reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChannelKind {
    /// The node's own Slurm record (`Extra` in, `Comment` out).
    Slurm,
    /// JSON files in `spool_dir` (tests, single-host set-ups).
    Spool,
}

/// `[node]`: the node agent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// The node's Slurm name; empty means the short host name.
    #[serde(default)]
    pub name: String,
    /// GPU backend.
    #[serde(default = "default_backend")]
    pub backend: Backend,
    /// State directory of the simulated backend.
    #[serde(default = "default_simulated_dir")]
    pub simulated_dir: PathBuf,
    /// Channel carrier.
    #[serde(default = "default_channel")]
    pub channel: ChannelKind,
    /// Directory of the spool channel.
    #[serde(default = "default_spool_dir")]
    pub spool_dir: PathBuf,
    /// The node's gres.conf, rewritten after every layout change.
    #[serde(default = "default_gres_conf")]
    pub gres_conf: PathBuf,
    /// Command (program and arguments, no shell) that stops slurmd.
    #[serde(default = "default_stop", deserialize_with = "command")]
    pub slurmd_stop: Vec<String>,
    /// Command that starts slurmd.
    #[serde(default = "default_start", deserialize_with = "command")]
    pub slurmd_start: Vec<String>,
    /// Seconds between reads of the node's record while a re-layout of the node is under
    /// way (fast, so slurmd is never stopped for long).
    #[serde(default = "default_poll", deserialize_with = "seconds")]
    pub poll_interval_s: f64,
    /// Mean seconds between reads of the node's record when nothing is under way (each
    /// read is one RPC to slurmctld; each agent draws ±25% around it so that a thousand
    /// agents do not read at once).
    #[serde(default = "default_idle_poll", deserialize_with = "seconds")]
    pub idle_poll_interval_s: f64,
    /// Seconds between re-announcements of the node's layouts (its last report, with the
    /// devices' current layouts), so the central role recovers a forgotten `Comment`.
    #[serde(default = "default_announce", deserialize_with = "seconds")]
    pub announce_interval_s: f64,
    /// Prometheus metrics address of the agent (GPU power, energy, instances); empty
    /// disables.
    #[serde(default = "default_node_metrics")]
    pub metrics_listen: String,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            name: String::new(),
            backend: default_backend(),
            simulated_dir: default_simulated_dir(),
            channel: default_channel(),
            spool_dir: default_spool_dir(),
            gres_conf: default_gres_conf(),
            slurmd_stop: default_stop(),
            slurmd_start: default_start(),
            poll_interval_s: default_poll(),
            idle_poll_interval_s: default_idle_poll(),
            announce_interval_s: default_announce(),
            metrics_listen: default_node_metrics(),
        }
    }
}

impl NodeConfig {
    /// Cross-field checks: (key, message) of the first problem.
    pub fn check(&self) -> Result<(), (String, String)> {
        let paths = [
            ("simulated_dir", &self.simulated_dir),
            ("spool_dir", &self.spool_dir),
            ("gres_conf", &self.gres_conf),
        ];
        for (key, p) in paths {
            if p.is_relative() {
                return Err((
                    key.into(),
                    format!("must be an absolute path, got `{}`", p.display()),
                ));
            }
        }
        Ok(())
    }
}

/// This host's short name (`/proc/sys/kernel/hostname` up to the first dot): Slurm's
/// default node name, and the node agent's when `[node] name` is empty.
pub fn short_hostname() -> std::io::Result<String> {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname")?;
    Ok(h.trim().split('.').next().unwrap_or_default().to_string())
}

fn default_backend() -> Backend {
    Backend::Nvml
}
fn default_simulated_dir() -> PathBuf {
    PathBuf::from("/var/lib/smartmig/simulated")
}
fn default_channel() -> ChannelKind {
    ChannelKind::Slurm
}
fn default_spool_dir() -> PathBuf {
    PathBuf::from("/var/lib/smartmig/spool")
}
fn default_gres_conf() -> PathBuf {
    PathBuf::from("/etc/slurm/gres.conf")
}
fn default_stop() -> Vec<String> {
    ["systemctl", "stop", "slurmd"].map(String::from).to_vec()
}
fn default_start() -> Vec<String> {
    ["systemctl", "start", "slurmd"].map(String::from).to_vec()
}
fn default_poll() -> f64 {
    2.0
}
fn default_idle_poll() -> f64 {
    120.0
}
fn default_announce() -> f64 {
    3600.0
}
/// Next to the central role's 9817, so both roles can run on one host.
fn default_node_metrics() -> String {
    "127.0.0.1:9818".into()
}

/// A command line as a list: a program and its arguments, the program not empty.
fn command<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v = Vec::<String>::deserialize(d)?;
    match v.first() {
        Some(p) if !p.trim().is_empty() => Ok(v),
        _ => Err(serde::de::Error::custom(
            "must be a program and its arguments, e.g. [\"systemctl\", \"stop\", \"slurmd\"]",
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn node_keys_are_read_and_defaulted() {
        let c = Config::parse(
            "version = 1\n[node]\nbackend = \"simulated\"\nchannel = \"spool\"\nspool_dir = \"/s\"\npoll_interval_s = 0.5\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(c.node.backend, super::Backend::Simulated);
        assert_eq!(c.node.channel, super::ChannelKind::Spool);
        assert_eq!(c.node.spool_dir, std::path::PathBuf::from("/s"));
        assert_eq!(c.node.slurmd_stop, ["systemctl", "stop", "slurmd"]);
        assert_eq!(c.node.poll_interval_s, 0.5);
        assert_eq!(c.node.announce_interval_s, 300.0);
        assert_eq!(c.node.metrics_listen, "127.0.0.1:9818");
    }

    #[test]
    fn bad_node_values_are_named_with_key_and_line() {
        let e = Config::parse("version = 1\n[node]\nbackend = \"cuda\"\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.toml:3:") && e.contains("cuda"), "{e}");
        let e = Config::parse("version = 1\n[node]\n\nslurmd_stop = []\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.toml:4:") && e.contains("program"), "{e}");
        let e = Config::parse("version = 1\n[node]\npoll_interval_s = 0\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.toml:3:") && e.contains("positive"), "{e}");
        let e = Config::parse("version = 1\n[node]\nannounce_interval_s = -1\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.toml:3:") && e.contains("positive"), "{e}");
        let e = Config::parse("version = 1\n[node]\ngres = \"x\"\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.toml:3:") && e.contains("unknown field"), "{e}");
    }
}
