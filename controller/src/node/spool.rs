//! A channel carrier over a spool directory: `<node>.desired.json` written by the central
//! role, `<node>.report.json` written by the agent, each replaced durably; `<node>.gres`,
//! when present, stands for Slurm's configured GPU GRES of the node. The directory is mode
//! 0700 and must belong to the agent's user, so only root (or whoever runs both roles) can
//! steer the node.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{NodeChannel, NodeError, NodeRecord};
use crate::channel::{self, Desired, Report};

/// The spool-directory carrier for one node.
#[derive(Debug, Clone)]
pub struct SpoolChannel {
    dir: PathBuf,
    node: String,
}

impl SpoolChannel {
    /// Opens (creating, mode 0700) the spool directory; refuses one that others can use.
    pub fn open(dir: &Path, node: &str) -> Result<SpoolChannel, NodeError> {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(|e| NodeError::io(dir, e))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| NodeError::io(dir, e))?;
        }
        let meta = std::fs::metadata(dir).map_err(|e| NodeError::io(dir, e))?;
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        if meta.mode() & 0o077 != 0 || meta.uid() != uid {
            return Err(NodeError::Insecure {
                path: dir.to_path_buf(),
                reason: format!(
                    "mode {:o} owner {}: the spool must be mode 0700 and owned by uid {uid}",
                    meta.mode() & 0o7777,
                    meta.uid()
                ),
            });
        }
        Ok(SpoolChannel {
            dir: dir.to_path_buf(),
            node: node.to_string(),
        })
    }

    /// The desired-state file.
    pub fn desired_path(&self) -> PathBuf {
        self.dir.join(format!("{}.desired.json", self.node))
    }

    /// The report file.
    pub fn report_path(&self) -> PathBuf {
        self.dir.join(format!("{}.report.json", self.node))
    }

    /// The file standing for Slurm's configured GPU GRES of the node.
    pub fn gres_path(&self) -> PathBuf {
        self.dir.join(format!("{}.gres", self.node))
    }

    /// Writes a desired state (the central role's side; also used by tests).
    pub fn write_desired(&self, d: &Desired) -> Result<(), NodeError> {
        write_json(&self.desired_path(), d)
    }

    /// The last report written, if any.
    pub fn last_report(&self) -> Result<Option<Report>, NodeError> {
        read(&self.report_path())
    }
}

fn read<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, NodeError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(channel::parse_message(&text, &path.display().to_string())?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(NodeError::io(path, e)),
    }
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), NodeError> {
    let text = serde_json::to_vec_pretty(value).map_err(|e| NodeError::Journal {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(smartmig_core::durable::write(path, &text)?)
}

impl NodeChannel for SpoolChannel {
    fn read(&mut self) -> Result<NodeRecord, NodeError> {
        let gres = self.gres()?;
        Ok(NodeRecord {
            desired: read(&self.desired_path())?,
            report: read(&self.report_path())?,
            gres,
            relayout_drain: false,
        })
    }

    fn gres(&mut self) -> Result<Option<String>, NodeError> {
        match std::fs::read_to_string(self.gres_path()) {
            Ok(t) => Ok(Some(t.trim().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(NodeError::io(&self.gres_path(), e)),
        }
    }

    fn write_report(&mut self, report: &Report) -> Result<(), NodeError> {
        write_json(&self.report_path(), report)
    }

    fn clear_report(&mut self) -> Result<(), NodeError> {
        match std::fs::remove_file(self.report_path()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(NodeError::io(&self.report_path(), e)),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::Phase;

    #[test]
    fn the_spool_is_created_private_and_a_shared_one_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("spool");
        let mut c = SpoolChannel::open(&dir, "n1").unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(c.read().unwrap(), NodeRecord::default());
        let want = Desired::new(3, Phase::Start, vec![]);
        c.write_desired(&want).unwrap();
        std::fs::write(c.gres_path(), "gpu:7g.40gb:1\n").unwrap();
        let r = c.read().unwrap();
        assert_eq!(
            (r.desired, r.gres.as_deref()),
            (Some(want), Some("gpu:7g.40gb:1"))
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = SpoolChannel::open(&dir, "n1").unwrap_err().to_string();
        assert!(e.contains("0700") && e.contains("755"), "{e}");
    }
}
