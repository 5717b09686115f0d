//! Parses arbitrary `--comment` text as smartmig hints.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smartmig_core::routing::parse_hints;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(h) = parse_hints(text) {
            assert!(h.gpumem_gb.is_none_or(|g| g.is_finite() && g > 0.0));
            assert!(h.due_min.is_none_or(|d| d.is_finite() && d > 0.0));
        }
    }
});
