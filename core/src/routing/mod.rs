//! Slice choice for one job: what the Slurm plugin and the simulator both use.
//!
//! Pure code: no I/O, no Slurm. The plugin turns `job_desc_msg_t` into a [`Job`], calls
//! [`Router::route`] and writes the [`Outcome`] back.

mod choose;
mod classes;
mod config;
mod hints;
mod mark;
mod request;
mod snapshot;

pub use choose::{
    candidates, choose, Availability, Candidate, Choice, Job, Need, Outcome, RouteError, Routed, Router,
};
pub use classes::{builtin_classes, glob_match, speedup_on, JobClass, SIZES};
pub use config::{ClassConfig, OnError, RoutingConfig, RuleConfig};
pub use hints::{parse_hints, HintError, Hints, HINT_PREFIX};
pub use mark::{with_min_gpumem, RoutedFrom, MARK, RETYPE_SINCE};
pub use request::{
    parse_request, rewrite, untype_auto, GpuEntry, GpuRequest, GpuType, RequestError, Spelling, TresField,
    TresStrings, AUTO_TYPE,
};
pub use snapshot::{Snapshot, SnapshotError, TypeState, MAX_SNAPSHOT_BYTES, SNAPSHOT_VERSION};

#[cfg(test)]
mod fuzz_tests;
