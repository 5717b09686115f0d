//! smartmig: simulator, trainer and evaluator for SMART-MIG scheduling.

pub use smartmig_core::{config, error, mig};

pub mod bounds;
pub mod cli;
pub mod docs;
pub mod doctor;
pub mod energy;
pub mod eval;
pub mod partition;
pub mod policy;
pub mod scenario;
pub mod sched;
pub mod sim;
pub mod train;
pub mod workload;
