//! smartmig: simulator, trainer and evaluator for SMART-MIG scheduling.

pub use smartmig_core::{error, mig};
