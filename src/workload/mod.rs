//! Jobs: the type, the reference generator and trace readers.

pub mod job;

pub use job::{size_index, Job, JobSet, SLICE_SIZES};
