//! Slice choice for one job: what the Slurm plugin and the simulator both use.

mod config;

pub use config::{OnError, RoutingConfig};
