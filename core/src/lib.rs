//! smartmig-core: MIG geometry, configuration and job routing.
//!
//! This crate is what the Slurm job_submit plugin links, so it stays small: no ONNX
//! Runtime, tensor library, solver or simulator may enter its dependency graph.

pub mod clock;
pub mod config;
pub mod durable;
pub mod error;
pub mod mig;
pub mod routing;
pub mod status;
pub mod tres;
