//! Slurm as the daemon sees it: jobs and nodes read through libslurm's API (bindgen
//! types, never parsed command output), node and job updates, behind [`SlurmApi`] so the
//! central cycle runs unchanged on a synthetic state.

mod carrier;
pub mod faults;
mod ffi;
mod gres;

pub use carrier::{read_desired, read_report, write_desired, write_report};
pub use ffi::Libslurm;
pub use gres::{managed_counts, merge_mig_gres, parse_gres, set_mig_block, GresCount, GresError};

/// `major.minor.micro` of a `SLURM_VERSION_NUMBER` (e.g. [`Libslurm::version`]).
pub fn version_text(v: u32) -> String {
    format!("{}.{:02}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

/// A job's state, as far as smartmig cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Waiting in the queue.
    Pending,
    /// Running (or suspended) on its nodes.
    Running,
    /// Anything else (completing, finished, ...).
    Other,
}

/// One job with a GPU request.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmJob {
    /// Job id.
    pub id: u32,
    /// State.
    pub state: JobState,
    /// `tres_per_node`, `tres_per_job`, `tres_per_task`, `tres_per_socket` (in
    /// [`smartmig_core::routing::TresField`] order).
    pub tres: [Option<String>; 4],
    /// Allocated nodes, expanded (running jobs).
    pub nodes: Vec<String>,
    /// Per allocated node, the GRES it got: `gpu:1g.10gb:1(IDX:0)`.
    pub gres_detail: Vec<String>,
    /// Submission time, Unix seconds.
    pub submit: i64,
    /// Start time, Unix seconds (running jobs).
    pub start: i64,
    /// Time limit in minutes (None: unlimited or unset).
    pub time_limit_min: Option<u32>,
    /// `--time-min` in minutes (None: unset).
    pub time_min_min: Option<u32>,
    /// `--deadline`, Unix seconds.
    pub deadline: Option<i64>,
    /// `--comment`.
    pub comment: Option<String>,
    /// `--job-name`.
    pub name: Option<String>,
    /// The admin comment, where the plugin marks jobs it routed.
    pub admin_comment: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// Partition.
    pub partition: Option<String>,
    /// smartmigd may requeue it: a batch job not submitted with `--no-requeue` (nor under
    /// `JobRequeue=0`), and not of a federation. Interactive `srun`/`salloc` jobs cannot be
    /// requeued.
    pub requeueable: bool,
}

/// One node.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SlurmNode {
    /// Node name.
    pub name: String,
    /// Configured GRES: `gpu:1g.10gb:3,gpu:3g.40gb:1`.
    pub gres: String,
    /// GRES in use: `gpu:1g.10gb:1(IDX:0),gpu:3g.40gb:0(IDX:N/A)`.
    pub gres_used: String,
    /// Whether the node is drained or draining.
    pub drain: bool,
    /// Whether the node is down.
    pub down: bool,
    /// Whether slurmctld refused the node's last registration (INVAL): it asks nothing
    /// more of the node, so only slurmd's start, a reconfigure or a slurmctld restart (which
    /// keeps no refusal) lead to a new one.
    pub invalid_reg: bool,
    /// Whether slurmctld waits to hear from the node's slurmd: UNKNOWN (a restarted
    /// slurmctld's nodes until they register) or not responding (`*` in sinfo; also a
    /// resumed node until it answers the registration its resume asks).
    pub silent: bool,
    /// The drain/down reason.
    pub reason: Option<String>,
    /// `Extra`: the central role's desired state for the node.
    pub extra: Option<String>,
    /// `Comment`: the node agent's report.
    pub comment: Option<String>,
    /// The partitions the node is in.
    pub partitions: Vec<String>,
}

/// A change to one node's record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeUpdate {
    /// Node name.
    pub node: String,
    /// New `Extra` (Some("") clears it).
    pub extra: Option<String>,
    /// New `Comment` (Some("") clears it).
    pub comment: Option<String>,
    /// Drain with this reason.
    pub drain: Option<String>,
    /// Resume (undrain).
    pub resume: bool,
    /// New configured GRES (the in-memory Slurm of the tests; a re-layout path may use it).
    pub gres: Option<String>,
}

/// A change to one pending job.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobUpdate {
    /// Job id.
    pub job: u32,
    /// New text of one tres field (`field` as in [`SlurmJob::tres`]).
    pub tres: Option<(usize, String)>,
    /// New time limit, minutes.
    pub time_limit_min: Option<u32>,
    /// New admin comment (the whole text).
    pub admin_comment: Option<String>,
}

/// A Slurm call that failed, with Slurm's own message.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// An API call returned an error.
    #[error("{call}: {message} (slurm errno {errno})")]
    Call {
        /// What was asked (e.g. `slurm_update_node(gpu1)`).
        call: String,
        /// Slurm's errno.
        errno: i32,
        /// `slurm_strerror` of it.
        message: String,
    },
    /// A value cannot go to Slurm (e.g. it contains a NUL byte).
    #[error("{what}: {why}")]
    Value {
        /// Which value.
        what: String,
        /// Why.
        why: String,
    },
}

impl SlurmError {
    /// Whether slurmctld may have carried out the request all the same: its reply was
    /// lost (a receive error, a timeout after sending), as opposed to a refusal it
    /// answered with (`ESLURM_*`, 2000–4999 in slurm_errno.h) or a connection that never
    /// opened.
    pub fn may_have_taken_effect(&self) -> bool {
        match self {
            SlurmError::Value { .. } => false,
            SlurmError::Call { errno, .. } => {
                // SLURM_COMMUNICATIONS_CONNECTION_ERROR, SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR.
                let never_connected = matches!(*errno, 1000 | 1800) || *errno == libc::ECONNREFUSED;
                !(never_connected || (2000..5000).contains(errno))
            }
        }
    }
}

/// The Slurm operations smartmigd needs.
pub trait SlurmApi {
    /// Pending and running jobs that ask for GPUs.
    fn jobs(&mut self) -> Result<Vec<SlurmJob>, SlurmError>;
    /// Every node (the real API asks slurmctld only for what changed since its last read).
    fn nodes(&mut self) -> Result<Vec<SlurmNode>, SlurmError>;
    /// One node's record (one small RPC; None: Slurm has no such node).
    fn node(&mut self, name: &str) -> Result<Option<SlurmNode>, SlurmError>;
    /// Slurm's `SlurmdTimeout`, seconds (0: never marks a silent node down).
    fn slurmd_timeout(&mut self) -> Result<u32, SlurmError>;
    /// Changes a node's record.
    fn update_node(&mut self, update: &NodeUpdate) -> Result<(), SlurmError>;
    /// Changes a pending job.
    fn update_job(&mut self, update: &JobUpdate) -> Result<(), SlurmError>;
    /// Requeues a job that is still running (or suspended); one that has ended since is
    /// left as it is, and the call succeeds.
    fn requeue(&mut self, job: u32) -> Result<(), SlurmError>;
    /// Whether slurmctld answers.
    fn ping(&mut self) -> Result<(), SlurmError>;
    /// `scontrol reconfigure`: slurmctld and every slurmd re-read their configuration.
    fn reconfigure(&mut self) -> Result<(), SlurmError>;
    /// The implementation itself, for tests that look into an in-memory Slurm.
    #[doc(hidden)]
    fn as_any(&mut self) -> &mut dyn std::any::Any;
}
