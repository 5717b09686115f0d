//! Parses arbitrary bytes as a controller snapshot.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smartmig_core::routing::Snapshot;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = Snapshot::parse(data) {
        assert!(s.generated_at.is_finite() && s.queue_pressure >= 0.0);
    }
});
