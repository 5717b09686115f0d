//! Making Slurm see new layouts, behind a trait: one implementation per path, chosen by
//! `[controller.central] relayout` ([`chosen`]).
//!
//! Both paths start alike: the managed nodes' `NodeName=` lines live in a generated file
//! that slurm.conf `Include`s, and smartmig rewrites their `Gres=` values. Slurm 22.05's
//! verified path (docs/admin-guide.md, "Central role"), here: every changing node's slurmd
//! is stopped (the node agent does it in the Apply phase), slurmctld is restarted once for
//! the whole batch (without `-c`: queue and running jobs survive), then the agents start
//! slurmd again. From Slurm 23.11 on, a reconfigure does it without a restart
//! ([`super::reconfigure`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use smartmig_core::config::{CentralConfig, RelayoutKind};

use super::reconfigure::{Reconfigure, RECONFIGURE_SINCE};
use crate::slurm::{SlurmApi, SlurmError};

/// Why Slurm could not be refreshed.
#[derive(Debug, thiserror::Error)]
pub enum RelayoutError {
    /// The generated node file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The node file has no line for a node.
    #[error("{}: no `NodeName={node}` line (move the node's definition into this file)", path.display())]
    NoNodeLine {
        /// The file.
        path: PathBuf,
        /// The node.
        node: String,
    },
    /// The restart command failed.
    #[error("restart command `{command}` failed: {why}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status or spawn error.
        why: String,
    },
    /// slurmctld did not answer in time after the restart or reconfigure.
    #[error("slurmctld did not answer within {timeout:?} after the {after}: {last}")]
    NoAnswer {
        /// How long it waited.
        timeout: Duration,
        /// What came before (`restart`, `reconfigure`).
        after: &'static str,
        /// The last ping's error.
        last: String,
    },
    /// slurmctld refused the reconfigure.
    #[error("scontrol reconfigure failed: {0}")]
    Reconfigure(SlurmError),
}

/// One way of making Slurm see new layouts.
pub trait Relayout {
    /// Name in logs and the status file.
    fn name(&self) -> &str;
    /// Makes Slurm see each node's new GPU GRES (`(node, "gpu:1g.10gb:3,gpu:3g.40gb:1")`),
    /// all at once.
    fn apply(&mut self, api: &mut dyn SlurmApi, nodes: &[(String, String)]) -> Result<(), RelayoutError>;
}

/// The re-layout `cc.relayout` names; `auto` by the Slurm release smartmigd was built
/// against (`built_for`, a `SLURM_VERSION_NUMBER`): [`Reconfigure`] from 23.11 on, where a
/// reconfigure re-executes slurmctld in place, [`RestartSlurmctld`] before.
pub fn chosen(cc: &CentralConfig, built_for: u32) -> Box<dyn Relayout> {
    let timeout = Duration::from_secs_f64(cc.slurmctld_timeout_s);
    let reconfigure = match cc.relayout {
        RelayoutKind::Auto => built_for >= RECONFIGURE_SINCE,
        RelayoutKind::Reconfigure => true,
        RelayoutKind::RestartSlurmctld => false,
    };
    if reconfigure {
        Box::new(Reconfigure {
            include: cc.nodes_include.clone(),
            timeout,
        })
    } else {
        Box::new(RestartSlurmctld {
            include: cc.nodes_include.clone(),
            command: cc.restart_slurmctld.clone(),
            timeout,
        })
    }
}

/// Sets each node's GPU `Gres=` in the generated node file `include`, atomically.
pub fn rewrite_node_file(include: &Path, nodes: &[(String, String)]) -> Result<(), RelayoutError> {
    let io = |source| RelayoutError::Io {
        path: include.to_path_buf(),
        source,
    };
    let mut text = std::fs::read_to_string(include).map_err(io)?;
    for (node, gres) in nodes {
        text = set_node_gres(&text, node, gres).ok_or_else(|| RelayoutError::NoNodeLine {
            path: include.to_path_buf(),
            node: node.clone(),
        })?;
    }
    write_atomically(include, text.as_bytes()).map_err(io)
}

/// Slurm 22.05: rewrite the `Include`d node file and restart slurmctld once.
#[derive(Debug, Clone)]
pub struct RestartSlurmctld {
    /// The generated node file.
    pub include: PathBuf,
    /// The restart command (program, arguments).
    pub command: Vec<String>,
    /// How long slurmctld may take to answer again.
    pub timeout: Duration,
}

impl Relayout for RestartSlurmctld {
    fn name(&self) -> &str {
        "restart-slurmctld"
    }

    fn apply(&mut self, api: &mut dyn SlurmApi, nodes: &[(String, String)]) -> Result<(), RelayoutError> {
        if nodes.is_empty() {
            return Ok(());
        }
        rewrite_node_file(&self.include, nodes)?;
        let shown = self.command.join(" ");
        let (program, args) = self.command.split_first().ok_or_else(|| RelayoutError::Command {
            command: shown.clone(),
            why: "empty command".into(),
        })?;
        log::info!("restarting slurmctld for {} node(s): {shown}", nodes.len());
        let status = Command::new(program)
            .args(args)
            .status()
            .map_err(|e| RelayoutError::Command {
                command: shown.clone(),
                why: e.to_string(),
            })?;
        if !status.success() {
            return Err(RelayoutError::Command {
                command: shown,
                why: status.to_string(),
            });
        }
        wait_answer(api, self.timeout, "restart")
    }
}

/// Waits until slurmctld answers a ping, for at most `timeout` after `after`.
pub fn wait_answer(
    api: &mut dyn SlurmApi,
    timeout: Duration,
    after: &'static str,
) -> Result<(), RelayoutError> {
    let start = Instant::now();
    loop {
        match api.ping() {
            Ok(()) => return Ok(()),
            Err(e) if start.elapsed() >= timeout => {
                return Err(RelayoutError::NoAnswer {
                    timeout,
                    after,
                    last: e.to_string(),
                })
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// `text` with the `Gres=` of node `node`'s line set to `gpu` (its non-GPU GRES kept);
/// None when no line defines exactly this node.
pub fn set_node_gres(text: &str, node: &str, gpu: &str) -> Option<String> {
    let mut found = false;
    let mut out = String::with_capacity(text.len() + gpu.len());
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let mut words: Vec<String> = body.split_whitespace().map(str::to_string).collect();
        let is_node = words
            .first()
            .and_then(|w| w.split_once('='))
            .is_some_and(|(k, v)| k.eq_ignore_ascii_case("NodeName") && v == node);
        if !is_node {
            out.push_str(line);
            continue;
        }
        found = true;
        let gres_at = words.iter().position(|w| {
            w.split_once('=')
                .is_some_and(|(k, _)| k.eq_ignore_ascii_case("Gres"))
        });
        let others: Vec<&str> = gres_at
            .map(|i| words[i].split_once('=').map_or("", |(_, v)| v))
            .unwrap_or("")
            .split(',')
            .filter(|e| !e.is_empty() && !e.starts_with("gpu"))
            .collect();
        let value = std::iter::once(gpu)
            .chain(others)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("Gres={value}");
        match gres_at {
            Some(i) => words[i] = token,
            None => words.push(token),
        }
        out.push_str(&words.join(" "));
        if line.ends_with('\n') {
            out.push('\n');
        }
    }
    found.then_some(out)
}

/// Writes through a temporary file in the same directory and a rename, so readers see
/// the old or the new content, never a mix.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_nodes_gpu_gres_changes_and_other_gres_stay() {
        let text = "# generated\nNodeName=gpu1 CPUs=16 Gres=gpu:7g.40gb:1,license:2\nNodeName=gpu10 Gres=gpu:7g.40gb:1\n";
        let out = set_node_gres(text, "gpu1", "gpu:1g.10gb:3,gpu:3g.40gb:1").unwrap();
        assert_eq!(
            out,
            "# generated\nNodeName=gpu1 CPUs=16 Gres=gpu:1g.10gb:3,gpu:3g.40gb:1,license:2\nNodeName=gpu10 Gres=gpu:7g.40gb:1\n"
        );
        let added = set_node_gres("NodeName=n2 CPUs=2", "n2", "gpu:7g.40gb:1").unwrap();
        assert_eq!(added, "NodeName=n2 CPUs=2 Gres=gpu:7g.40gb:1");
        assert!(set_node_gres(text, "gpu2", "gpu:7g.40gb:1").is_none());
    }

    #[test]
    fn a_missing_node_line_is_an_error_naming_the_file_and_node() {
        let dir = std::env::temp_dir().join(format!("smartmig-relayout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let include = dir.join("nodes.conf");
        std::fs::write(&include, "NodeName=a Gres=gpu:7g.40gb:1\n").unwrap();
        let mut r = RestartSlurmctld {
            include: include.clone(),
            command: vec!["/bin/true".into()],
            timeout: Duration::from_secs(1),
        };
        let mut api = crate::central::fake::FakeSlurm::default();
        let e = r
            .apply(&mut api, &[("b".into(), "gpu:7g.40gb:1".into())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("nodes.conf") && e.contains("NodeName=b"), "{e}");
        r.apply(&mut api, &[("a".into(), "gpu:1g.10gb:7".into())])
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(&include).unwrap(),
            "NodeName=a Gres=gpu:1g.10gb:7\n"
        );
        r.command = vec!["/bin/false".into()];
        let e = r
            .apply(&mut api, &[("a".into(), "gpu:7g.40gb:1".into())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("/bin/false"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
