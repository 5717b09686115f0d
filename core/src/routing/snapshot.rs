//! The controller's snapshot: a small JSON file the plugin reads to prefer free slices.
//!
//! ```json
//! {"version": 1, "generated_at": 1764480000.0, "soon_free_within_s": 300,
//!  "queue_pressure": 0.4,
//!  "types": {"3g.20gb": {"free": 1, "soon_free": 0}, "1g.5gb": {"free": 0, "soon_free": 2}}}
//! ```
//! The controller writes it atomically (write a temporary file, rename).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The snapshot format version this build reads.
pub const SNAPSHOT_VERSION: u32 = 1;

/// Largest snapshot file the plugin reads; anything larger is refused as garbage.
pub const MAX_SNAPSHOT_BYTES: usize = 1 << 20;

/// Free capacity of one GPU type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeState {
    /// Instances of this type idle now.
    pub free: u32,
    /// Instances busy now whose jobs are expected to end within `soon_free_within_s`.
    pub soon_free: u32,
}

/// What the controller publishes for the plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// Format version; must be [`SNAPSHOT_VERSION`].
    pub version: u32,
    /// When it was written, Unix seconds.
    pub generated_at: f64,
    /// The horizon of `soon_free`, in seconds.
    pub soon_free_within_s: f64,
    /// Pending MIG jobs per MIG instance in the cluster (0: empty queue).
    pub queue_pressure: f64,
    /// Per Slurm GPU type name.
    pub types: BTreeMap<String, TypeState>,
}

/// A snapshot that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Not valid JSON of the expected shape.
    #[error("snapshot is not valid: {0}")]
    Json(#[from] serde_json::Error),
    /// Too large to be a snapshot.
    #[error("snapshot is {0} bytes, more than the {MAX_SNAPSHOT_BYTES} a snapshot may have")]
    TooLarge(usize),
    /// A version this build does not read.
    #[error("snapshot version {0} is not supported (this build reads {SNAPSHOT_VERSION})")]
    Version(u32),
    /// A value out of range.
    #[error("snapshot field `{0}` must be a finite number, zero or more")]
    Range(&'static str),
}

impl Snapshot {
    /// Parses and checks snapshot bytes.
    pub fn parse(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
        if bytes.len() > MAX_SNAPSHOT_BYTES {
            return Err(SnapshotError::TooLarge(bytes.len()));
        }
        let s: Snapshot = serde_json::from_slice(bytes)?;
        if s.version != SNAPSHOT_VERSION {
            return Err(SnapshotError::Version(s.version));
        }
        for (name, v) in [
            ("generated_at", s.generated_at),
            ("soon_free_within_s", s.soon_free_within_s),
            ("queue_pressure", s.queue_pressure),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(SnapshotError::Range(name));
            }
        }
        Ok(s)
    }

    /// Age in seconds at `now` (Unix seconds); negative if written in the future.
    pub fn age_s(&self, now: f64) -> f64 {
        now - self.generated_at
    }

    /// Whether the snapshot may be used at `now`: not older than `max_age_s`, and not from
    /// the future by more than a minute (a clock that jumped makes it untrustworthy).
    pub fn is_fresh(&self, now: f64, max_age_s: f64) -> bool {
        let age = self.age_s(now);
        (-60.0..=max_age_s).contains(&age)
    }

    /// The state of a type (all zero when the snapshot does not list it).
    pub fn state(&self, gpu_type: &str) -> TypeState {
        self.types.get(gpu_type).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"version":1,"generated_at":1000.5,"soon_free_within_s":300,
        "queue_pressure":0.25,"types":{"3g.20gb":{"free":1,"soon_free":2}}}"#;

    #[test]
    fn a_well_formed_snapshot_round_trips() {
        let s = Snapshot::parse(GOOD.as_bytes()).unwrap();
        assert_eq!(
            s.state("3g.20gb"),
            TypeState {
                free: 1,
                soon_free: 2
            }
        );
        assert_eq!(s.state("7g.40gb"), TypeState::default());
        let again = Snapshot::parse(serde_json::to_string(&s).unwrap().as_bytes()).unwrap();
        assert_eq!(again, s);
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        let e = Snapshot::parse(b"\x00\xffnot json").unwrap_err();
        assert!(matches!(e, SnapshotError::Json(_)), "{e}");
        let e = Snapshot::parse(GOOD.replace("\"free\":1", "\"free\":-1").as_bytes()).unwrap_err();
        assert!(matches!(e, SnapshotError::Json(_)), "{e}");
        let e = Snapshot::parse(GOOD.replace("\"version\":1", "\"version\":9").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("version 9"), "{e}");
        let e = Snapshot::parse(GOOD.replace("0.25", "-0.25").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("queue_pressure"), "{e}");
        let e = Snapshot::parse(GOOD.replace("\"types\"", "\"typos\"").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("typos"), "{e}");
    }

    #[test]
    fn huge_files_are_refused_before_parsing() {
        let big = vec![b' '; MAX_SNAPSHOT_BYTES + 1];
        assert!(matches!(Snapshot::parse(&big), Err(SnapshotError::TooLarge(_))));
    }

    #[test]
    fn freshness_bounds_both_ways() {
        let s = Snapshot::parse(GOOD.as_bytes()).unwrap();
        assert!(s.is_fresh(1000.5 + 119.0, 120.0));
        assert!(!s.is_fresh(1000.5 + 121.0, 120.0));
        assert!(s.is_fresh(1000.5 - 30.0, 120.0));
        assert!(!s.is_fresh(1000.5 - 61.0, 120.0));
    }
}
