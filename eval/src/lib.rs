//! Evaluation: run policies on identical job streams and compare them on the paper's
//! objective; search the best static layout and the best time-of-day schedule; replay a
//! site's sacct history; draw the figures (SVG).
//!
//! Seeds: evaluation days use seeds `EVAL_SEED_BASE + i`; searches (tune-static,
//! training) use seeds below it, so they never share a job stream.

pub mod compare;
pub mod periodic;
pub mod plot;
pub mod replay;
pub mod replay_html;
pub mod tune;

/// First seed of evaluation days.
pub const EVAL_SEED_BASE: u64 = 1_000_000;
/// First seed of training/search days.
pub const TRAIN_SEED_BASE: u64 = 1;
/// First seed of the days training validates on (model selection): above every training
/// day, below every evaluation day.
pub const VALIDATION_SEED_BASE: u64 = 500_000;
