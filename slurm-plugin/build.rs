//! Generates Rust bindings for the parts of Slurm's public headers the plugin uses, from
//! the Slurm it is built against (see slurm_headers.rs: `$SLURM_PREFIX`,
//! `$SLURM_INCLUDE_DIR`, pkg-config, `/usr/include`).
//!
//! The headers' `SLURM_VERSION_NUMBER` becomes `plugin_version` (slurmctld loads only a
//! plugin of its own release) and `SLURM_BUILT_FOR` (logged at load), and selects the code
//! paths that differ between releases: from 23.02 on, `job_modify` takes an `err_msg`
//! (cfg `slurm_job_modify_err_msg`).

/// First Slurm release whose `job_modify` takes `char **err_msg` (23.02.0).
const JOB_MODIFY_ERR_MSG_SINCE: u32 = 0x17_02_00;

// Shared with controller/build.rs (which uses all of it): which Slurm to build against.
#[allow(dead_code)]
#[path = "slurm_headers.rs"]
mod slurm_headers;

fn main() {
    slurm_headers::rerun_if_env_changed();
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=slurm_headers.rs");
    println!("cargo:rustc-check-cfg=cfg(slurm_job_modify_err_msg)");
    let include = slurm_headers::include_dir_or_exit();
    let slurm_h = include.join("slurm/slurm.h");
    println!("cargo:rerun-if-changed={}", slurm_h.display());
    let version = slurm_headers::version_or_exit(&include);
    if version >= JOB_MODIFY_ERR_MSG_SINCE {
        println!("cargo:rustc-cfg=slurm_job_modify_err_msg");
    }
    // The watcher thread (src/watch.rs) may outlive `fini` when a file read hangs:
    // slurmctld's dlclose must then leave its code mapped.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!(
        "cargo:rustc-env=SLURM_BUILT_FOR={}",
        slurm_headers::version_text(version)
    );
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
