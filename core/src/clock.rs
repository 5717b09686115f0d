//! Wall-clock time as Unix seconds: the form every smartmig file, message and snapshot uses.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix seconds now (0 on a clock set before 1970).
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
