//! smartmigd: repartitions MIG GPUs between Slurm allocations (central and node roles).

pub mod central;
pub mod channel;
pub mod command;
pub mod metrics;
pub mod node;
pub mod slurm;
