//! smartmig: simulator, trainer and evaluator for SMART-MIG scheduling.

pub use smartmig_core::{config, error, mig};

pub mod scenario;
pub mod workload;
