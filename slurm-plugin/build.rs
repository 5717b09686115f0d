//! Generates Rust bindings for the parts of Slurm's public headers the plugin uses.
//!
//! Headers are looked up in `$SLURM_INCLUDE_DIR`, then through pkg-config (`slurm`), then
//! in `/usr/include`; the directory found must contain `slurm/slurm.h`. The header's
//! `SLURM_VERSION_NUMBER` becomes `plugin_version`, and selects the `job_modify` signature:
//! releases from 23.02 on pass an `err_msg` (cfg `slurm_job_modify_err_msg`).

use std::path::Path;

/// First Slurm release whose `job_modify` takes `char **err_msg` (23.02.0).
const JOB_MODIFY_ERR_MSG_SINCE: u64 = 0x17_02_00;

// Shared with controller/build.rs: where the Slurm headers are.
#[path = "slurm_headers.rs"]
mod slurm_headers;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-check-cfg=cfg(slurm_job_modify_err_msg)");
    let include = slurm_headers::include_dir_or_exit();
    let slurm_h = include.join("slurm/slurm.h");
    println!("cargo:rerun-if-changed={}", slurm_h.display());
    let version = read_version(&include.join("slurm/slurm_version.h")).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1);
    });
    if version >= JOB_MODIFY_ERR_MSG_SINCE {
        println!("cargo:rustc-cfg=slurm_job_modify_err_msg");
    }
    let builder = bindgen::Builder::default()
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_type("job_desc_msg_t")
        .allowlist_var("SLURM_VERSION_NUMBER|NO_VAL|INFINITE|SLURM_SUCCESS|SLURM_ERROR")
        .allowlist_var("ESLURM_ACCESS_DENIED|ESLURM_INVALID_GRES|ESLURM_INVALID_TIME_LIMIT")
        .allowlist_type("slurm_err_t")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        // Pulled in by job_desc_msg_t's members; the plugin never looks inside them.
        .opaque_type("list|List|xlist|cron_entry_t|.*_t_cron")
        .derive_default(false);
    slurm_headers::write_bindings(builder, &slurm_h);
}

/// `SLURM_VERSION_NUMBER` from slurm_version.h.
fn read_version(path: &Path) -> Result<u64, String> {
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() == Some("#define") && words.next() == Some("SLURM_VERSION_NUMBER") {
            let v = words.next().unwrap_or("");
            let v = v.trim_start_matches('(').trim_end_matches(')');
            return u64::from_str_radix(v.trim_start_matches("0x"), 16)
                .map_err(|_| format!("{}: SLURM_VERSION_NUMBER `{v}` is not hex", path.display()));
        }
    }
    Err(format!("{}: no SLURM_VERSION_NUMBER", path.display()))
}
