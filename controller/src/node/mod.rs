//! The node role (`smartmigd node`): applies the central role's [`Desired`] layouts to the
//! node's GPUs through a [`GpuBackend`], journaling every driver call, and answers with a
//! [`Report`].

pub mod agent;
pub mod boot;
pub mod daemon;
pub mod gres;
pub mod journal;
pub mod lock;
pub mod metrics;
pub mod slurm_channel;
pub mod spool;

use std::path::{Path, PathBuf};

use crate::channel::{ChannelError, Desired, Report};

pub use agent::{Agent, AgentConfig};
pub use smartmig_gpu::GpuBackend;

/// What the agent reads from its node's record in one go (one RPC on the Slurm carrier).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeRecord {
    /// The central role's desired state, if it wrote one.
    pub desired: Option<Desired>,
    /// The last report on the carrier, if any.
    pub report: Option<Report>,
    /// Slurm's configured GPU GRES of the node (None: unknown).
    pub gres: Option<String>,
    /// Whether the node is drained for a smartmig re-layout (the agent then polls fast).
    pub relayout_drain: bool,
}

/// Reads this node's record and writes its reports.
pub trait NodeChannel {
    /// The node's record now.
    fn read(&mut self) -> Result<NodeRecord, NodeError>;
    /// Slurm's configured GPU GRES of the node alone (None: unknown), readable where the
    /// record's smartmig fields are not.
    fn gres(&mut self) -> Result<Option<String>, NodeError>;
    /// Publishes a report.
    fn write_report(&mut self, report: &Report) -> Result<(), NodeError>;
    /// Removes smartmig's report (`smartmigd node --release`).
    fn clear_report(&mut self) -> Result<(), NodeError>;
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
    /// Another node agent holds the state directory.
    #[error(
        "{}: another node agent{} runs on this state directory; stop it first (two agents would undo each other's re-layouts)",
        path.display(),
        if holder.is_empty() { String::new() } else { format!(" (pid {holder})") }
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The holder's pid, as it wrote it.
        holder: String,
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
    /// The re-layout cannot be done as asked.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Slurm does not know this node (the channel's `[node] name`).
    #[error("Slurm has no node `{0}`")]
    UnknownNode(String),
    /// A configured command failed.
    #[error(transparent)]
    Command(#[from] crate::command::CommandError),
    /// gres.conf cannot be managed as asked.
    #[error(transparent)]
    GresConf(#[from] gres::GresConfError),
    /// A file could not be replaced durably.
    #[error(transparent)]
    Write(#[from] smartmig_core::durable::DurableError),
    /// The node's instances do not fit the padding blocks the central role sent.
    #[error("padding: {0}")]
    Padding(#[from] smartmig_core::mig::padding::OverBlock),
    /// The node's gres.conf lines cannot be written as asked.
    #[error(transparent)]
    Render(#[from] gres::RenderError),
    /// Before slurmd's start, slurmctld's view of a generation installed here is unknown.
    #[error("generation {generation}: installed, not started, and slurmctld's GRES for the node is unknown: {why}; slurmd waits (the agent restores once slurmctld answers)")]
    SlurmctldUnknown {
        /// The generation.
        generation: u64,
        /// Why.
        why: String,
    },
    /// Before slurmd's start, a generation's gres.conf could not be put back.
    #[error("generation {generation}: {why}; slurmd must not start on the generation's gres.conf, which slurmctld does not have")]
    NotPutBack {
        /// The generation.
        generation: u64,
        /// Why.
        why: String,
    },
}

/// Why the agent refuses a re-layout before touching any device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The target names an unknown model, an unreadable layout or one the driver cannot
    /// reach from the current one.
    #[error("GPU {gpu}: {error}")]
    BadTarget {
        /// The GPU index.
        gpu: u32,
        /// What is wrong with the target.
        error: String,
    },
    /// The device is not in the layout the central role planned from.
    #[error(
        "GPU {gpu}: the device has `{found}`{}, the central role saw `{expected}`; nothing changed",
        if *settled { "" } else { " (unsettled)" }
    )]
    NotAsSeen {
        /// The GPU index.
        gpu: u32,
        /// The layout found.
        found: String,
        /// Whether every instance of it is complete.
        settled: bool,
        /// The layout the plan starts from.
        expected: String,
    },
    /// The plan would destroy instances in use.
    #[error(
        "GPU {gpu}: the plan destroys busy instance(s) {}{}",
        instances.join(" "),
        if *before_any_change { "; nothing changed" } else { "" }
    )]
    Busy {
        /// The GPU index.
        gpu: u32,
        /// The busy instances (`4g.20gb@0`).
        instances: Vec<String>,
        /// Whether this was found before any device was touched.
        before_any_change: bool,
    },
}

impl Refusal {
    /// A target that cannot be used on GPU `gpu`, for `error`.
    pub fn bad_target(gpu: u32, error: impl std::fmt::Display) -> NodeError {
        NodeError::Refused(Refusal::BadTarget {
            gpu,
            error: error.to_string(),
        })
    }
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
