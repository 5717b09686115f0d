//! A stand-in for `libnvidia-ml.so.1` in tests: the NVML functions smartmig calls (and
//! nvml-wrapper's start-up calls), with NVIDIA's documented MIG semantics, over fake GPUs
//! whose state lives in files under the directory `$SMARTMIG_NVML_TEST_ROOT` names.
//!
//! Built as a cdylib, it is loaded through nvml-wrapper's dlopen exactly like the real
//! library (`[node] nvml_library` in smartmig.toml), so smartmig's NVML backend runs
//! unchanged; built as an rlib, it gives tests [`TestNode`] to set up GPUs, start
//! "processes" on instances and inject errors ([`Faults`]): any call can fail once or
//! always with any NVML error, and the process can be aborted after a number of changes
//! (a kill between two driver calls).
//!
//! What it models: MIG mode (current and pending), GPU-instance profiles and their
//! possible placements per product ([`tables`]), create with placement (overlap, count
//! and compute-slice limits, the pre-R510 4g+3g rule), compute instances, destroy with
//! `NVML_ERROR_IN_USE` for instances in use, running processes per instance, the
//! capability minors file and device files, power and energy counters.

mod ffi;
pub mod ops;
pub mod state;
pub mod tables;

pub use ffi::code_of;
pub use state::{ErrorFault, Faults, GpuSetup, Node, StateError, TestNode, ROOT_ENV};

/// The file name of the built library.
pub const LIBRARY_FILE: &str = "libsmartmig_nvml_testlib.so";

/// The built library for tests: `$SMARTMIG_NVML_TESTLIB` if set, else built here with
/// `cargo build -p smartmig-nvml-testlib` (the test profile's target dir; fast when up to
/// date: `cargo test` builds the crate but writes no cdylib).
pub fn library() -> std::path::PathBuf {
    static SO: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    SO.get_or_init(|| {
        if let Some(p) = std::env::var_os("SMARTMIG_NVML_TESTLIB") {
            return p.into();
        }
        let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let root = crate_dir.parent().unwrap_or(crate_dir);
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "smartmig-nvml-testlib"])
            .current_dir(root)
            .status()
            .expect("run cargo build for the NVML test library");
        assert!(status.success(), "building the NVML test library failed");
        let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), Into::into);
        let so = target.join("debug").join(LIBRARY_FILE);
        assert!(so.is_file(), "{} missing after the build", so.display());
        so
    })
    .clone()
}
