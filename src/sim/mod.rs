//! The discrete-event simulator: cluster state, event loop, metrics.

pub mod cluster;
pub mod decision;
pub mod engine;
pub mod gate;
pub use smartmig_policy::features;
pub mod metrics;
pub mod plot;

pub use engine::{RunOptions, Simulation};
pub use metrics::{Objective, RunResult, Series};

#[cfg(test)]
mod tests;
