//! The `smartmig` command: a thin CLI over the workspace's crates (see README.md, "Crates").

pub use smartmig_core::{config, error, mig};
/// The learned policy, its features and job type: the smartmig-policy crate, shared with
/// `smartmigd`.
pub use smartmig_policy as policy;

pub mod cli;
pub mod docs;
