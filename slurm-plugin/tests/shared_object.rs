//! Checks the built `libjob_submit_smartmig.so`: its size, its dynamic dependencies (no
//! libslurm, no ONNX Runtime), that slurmctld cannot unmap it, the symbols slurmctld looks
//! up, and the Slurm symbols it expects slurmctld to provide.
//!
//! Builds the release .so first (`cargo build -p smartmig-slurm-plugin --release`), so
//! it checks what gets installed. Needs binutils (`readelf`, `nm`).

use std::path::PathBuf;
use std::process::Command;

/// Largest acceptable file (release keeps line tables for backtraces, most of the file).
const MAX_SO_BYTES: u64 = 16 * 1024 * 1024;
/// Largest acceptable loaded part (text + data + bss): what slurmctld maps.
const MAX_LOADED_BYTES: u64 = 4 * 1024 * 1024;

fn built_so() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new(env!("CARGO"))
        .args(["build", "-p", "smartmig-slurm-plugin", "--release"])
        .current_dir(&manifest)
        .status()
        .expect("run cargo build");
    assert!(status.success(), "release build of the plugin failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../target"));
    let so = target.join("release/libjob_submit_smartmig.so");
    assert!(so.is_file(), "{} not built", so.display());
    so
}

fn tool(cmd: &str, args: &[&str], so: &PathBuf) -> String {
    let out = Command::new(cmd)
        .args(args)
        .arg(so)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} not runnable ({e}); install binutils"));
    assert!(
        out.status.success(),
        "{cmd} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_plugin_is_small_links_no_slurm_or_onnx_and_exports_the_entry_points() {
    let so = built_so();
    let size = std::fs::metadata(&so).unwrap().len();
    assert!(
        size <= MAX_SO_BYTES,
        "{} is {size} bytes (limit {MAX_SO_BYTES})",
        so.display()
    );

    // `size` prints a header line, then: text data bss dec hex filename.
    let sizes = tool("size", &[], &so);
    let loaded: u64 = sizes
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("cannot read `size` output:\n{sizes}"));
    assert!(
        loaded <= MAX_LOADED_BYTES,
        "loaded size {loaded} bytes (limit {MAX_LOADED_BYTES})"
    );

    let dynamic = tool("readelf", &["-d", "--wide"], &so);
    let needed: Vec<&str> = dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next())
        .collect();
    assert!(!needed.is_empty(), "no NEEDED entries parsed from:\n{dynamic}");
    let allowed = [
        "libc.so",
        "libgcc_s.so",
        "libm.so",
        "ld-linux",
        "libpthread.so",
        "libdl.so",
    ];
    for lib in &needed {
        assert!(
            allowed.iter().any(|a| lib.starts_with(a)),
            "unexpected dependency {lib} (all: {needed:?})"
        );
        assert!(!lib.contains("slurm") && !lib.contains("onnxruntime"), "{lib}");
    }

    // slurmctld's dlclose must not unmap a watcher thread left in a hung read (src/watch.rs).
    assert!(
        dynamic
            .lines()
            .any(|l| l.contains("(FLAGS_1)") && l.contains("NODELETE")),
        "not linked -z nodelete:\n{dynamic}"
    );

    let defined = tool("nm", &["-D", "--defined-only"], &so);
    for sym in [
        "plugin_name",
        "plugin_type",
        "plugin_version",
        "init",
        "fini",
        "job_submit",
        "job_modify",
    ] {
        assert!(
            defined.lines().any(|l| l.split_whitespace().last() == Some(sym)),
            "{sym} not exported"
        );
    }
    let undefined = tool("nm", &["-D", "--undefined-only"], &so);
    for sym in [
        "slurm_xstrdup",
        "slurm_xfree",
        "slurm_info",
        "slurm_error",
        "slurm_get_extra_conf_path",
    ] {
        assert!(
            undefined
                .lines()
                .any(|l| l.split_whitespace().last() == Some(sym)),
            "{sym} should be left for slurmctld to resolve"
        );
    }
}
