//! The status file lives in smartmig-core so that `smartmig status` reads it too.

pub use smartmig_core::status::*;
