//! The simulator of docs/model.md: scenarios, workloads (generator and traces), the
//! discrete-event engine with its cluster, schedulers and energy model, and the
//! repartition policies it runs (static, time-of-day, ladder, mean-field through ONNX).
//!
//! No solver, trainer or plotting here: the bounds, evaluation and training crates build
//! on this one.

pub mod cluster;
pub mod decision;
pub mod energy;
pub mod engine;
pub mod gate;
pub mod index_rule;
pub mod metrics;
pub mod partition;
pub mod scenario;
pub mod sched;
pub mod workload;

pub use engine::{RunOptions, Simulation};
pub use metrics::{Objective, RunResult, Series};
pub use smartmig_policy::features;

#[cfg(test)]
mod tests;
