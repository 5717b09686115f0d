//! The node role (`smartmigd node`): applies the central role's [`Desired`] layouts to the
//! node's GPUs through a [`GpuBackend`], journaling every driver call, and answers with a
//! [`Report`].

pub mod agent;
pub mod daemon;
pub mod gres;
pub mod journal;
pub mod metrics;
pub mod slurm_channel;
pub mod spool;

use std::path::{Path, PathBuf};

use crate::channel::{ChannelError, Desired, Report};

pub use agent::{Agent, AgentConfig};
pub use smartmig_gpu::GpuBackend;

/// Reads this node's desired state and writes its reports.
pub trait NodeChannel {
    /// The desired state, if the central role wrote one.
    fn read_desired(&mut self) -> Result<Option<Desired>, NodeError>;
    /// The last report this node wrote, if any.
    fn last_report(&mut self) -> Result<Option<Report>, NodeError>;
    /// Publishes a report.
    fn write_report(&mut self, report: &Report) -> Result<(), NodeError>;
    /// The desired state and the last report together (one read of the carrier where the
    /// carrier allows it).
    fn read(&mut self) -> Result<(Option<Desired>, Option<Report>), NodeError> {
        Ok((self.read_desired()?, self.last_report()?))
    }
}

/// Why the node agent could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The journal is damaged.
    #[error("journal {path}: {reason}")]
    Journal {
        /// The journal file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A directory others could write to.
    #[error("{path}: {reason}")]
    Insecure {
        /// The directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A channel message could not be read.
    #[error(transparent)]
    Channel(#[from] ChannelError),
    /// The GPU backend failed.
    #[error(transparent)]
    Gpu(#[from] smartmig_gpu::GpuError),
    /// Slurm (the channel's carrier) failed.
    #[error(transparent)]
    Slurm(#[from] crate::slurm::SlurmError),
    /// The re-layout cannot be done as asked (bad layout, busy instance, wrong device state).
    #[error("{0}")]
    Refused(String),
    /// A configured command failed.
    #[error("command `{command}` failed: {reason}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status and stderr, or the spawn error.
        reason: String,
    },
}

impl NodeError {
    /// An I/O error on a path.
    pub fn io(path: &Path, source: std::io::Error) -> NodeError {
        NodeError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
