//! A channel carrier over a spool directory: `<node>.desired.json` written by the central
//! role, `<node>.report.json` written by the agent, each replaced atomically (write, fsync,
//! rename). The directory is mode 0700 and must belong to the agent's user, so only root
//! (or whoever runs both roles) can steer the node.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{NodeChannel, NodeError};
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

    /// Writes a desired state (the central role's side; also used by tests).
    pub fn write_desired(&self, d: &Desired) -> Result<(), NodeError> {
        write_json(&self.desired_path(), d)
    }

    fn read<T: serde::de::DeserializeOwned + channel::Versioned>(
        path: &Path,
    ) -> Result<Option<T>, NodeError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(Some(channel::parse(&text, &path.display().to_string())?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(NodeError::io(path, e)),
        }
    }
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), NodeError> {
    let text = serde_json::to_vec_pretty(value).map_err(|e| NodeError::Journal {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    smartmig_gpu::simulated::write_atomic(path, &text).map_err(NodeError::Gpu)
}

impl NodeChannel for SpoolChannel {
    fn read_desired(&mut self) -> Result<Option<Desired>, NodeError> {
        Self::read(&self.desired_path())
    }

    fn last_report(&mut self) -> Result<Option<Report>, NodeError> {
        Self::read(&self.report_path())
    }

    fn write_report(&mut self, report: &Report) -> Result<(), NodeError> {
        write_json(&self.report_path(), report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::{Phase, CHANNEL_VERSION};

    #[test]
    fn the_spool_is_created_private_and_a_shared_one_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("spool");
        let mut c = SpoolChannel::open(&dir, "n1").unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert!(c.read_desired().unwrap().is_none());
        let want = Desired {
            smartmig: CHANNEL_VERSION,
            generation: 3,
            phase: Phase::StartSlurmd,
            gpus: vec![],
        };
        c.write_desired(&want).unwrap();
        assert_eq!(c.read_desired().unwrap(), Some(want));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = SpoolChannel::open(&dir, "n1").unwrap_err().to_string();
        assert!(e.contains("0700") && e.contains("755"), "{e}");
    }
}
