//! `[routing]` of smartmig.toml: how the job_submit plugin routes MIG requests.

use serde::Deserialize;

/// What the plugin does when it fails internally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// Accept the job unchanged and log (default: a smartmig bug never blocks submissions).
    #[default]
    Open,
    /// Reject the job with the error.
    Closed,
}

/// `[routing]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingConfig {
    /// Fail open or closed on internal errors.
    #[serde(default)]
    pub on_error: OnError,
    /// Route untyped `gpu:N` requests too.
    #[serde(default)]
    pub route_untyped: bool,
    /// A controller snapshot older than this is ignored (static rule instead).
    #[serde(default = "default_max_age", deserialize_with = "crate::config::positive")]
    pub snapshot_max_age_s: f64,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        RoutingConfig {
            on_error: OnError::Open,
            route_untyped: false,
            snapshot_max_age_s: default_max_age(),
        }
    }
}

fn default_max_age() -> f64 {
    120.0
}

impl RoutingConfig {
    /// Cross-field checks within `[routing]`: `Err((key, message))`.
    pub fn check(&self) -> Result<(), (String, String)> {
        Ok(())
    }
}
