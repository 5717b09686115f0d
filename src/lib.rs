//! smartmig: simulator, trainer and evaluator for SMART-MIG scheduling.

pub use smartmig_core::{config, error, mig};
/// The learned policy, its features and job type: the smartmig-policy crate, shared with
/// `smartmigd`.
pub use smartmig_policy as policy;

pub mod bounds;
pub mod cli;
pub mod docs;
pub mod doctor;
pub mod energy;
pub mod eval;
pub mod partition;
pub mod scenario;
pub mod sched;
pub mod sim;
pub mod train;
pub mod workload;
