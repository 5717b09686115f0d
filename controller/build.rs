//! Generates Rust bindings for the parts of libslurm's public API the central role and
//! the node agents use (reading jobs and nodes, updating nodes and pending jobs,
//! reconfiguring), and links libslurm.
//!
//! The Slurm is found as for the plugin (slurm-plugin/slurm_headers.rs: `$SLURM_PREFIX`,
//! or `$SLURM_INCLUDE_DIR` and `$SLURM_LIB_DIR`, pkg-config, the system's; Debian:
//! libslurm-dev, which also ships `libslurm.so`). The headers' `SLURM_VERSION_NUMBER` is in
//! the bindings (`Libslurm::version`), which choose the re-layout path (`relayout = "auto"`).

use std::env;
use std::path::PathBuf;

// The plugin's lookup, so both crates build against the same Slurm (bindings are written
// here, with this crate's own options).
#[allow(dead_code)]
#[path = "../slurm-plugin/slurm_headers.rs"]
mod slurm_headers;

fn main() {
    slurm_headers::rerun_if_env_changed();
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../slurm-plugin/slurm_headers.rs");
    let include = slurm_headers::include_dir_or_exit();
    let slurm_h = include.join("slurm/slurm.h");
    println!("cargo:rerun-if-changed={}", slurm_h.display());
    slurm_headers::version_or_exit(&include);
    // Up to 23.x the API's error number is read with slurm_get_errno(); later releases set
    // errno itself and dropped the function (cfg `slurm_errno_is_errno`).
    println!("cargo:rustc-check-cfg=cfg(slurm_errno_is_errno)");
    if !slurm_headers::declares(&include, "slurm/slurm_errno.h", "slurm_get_errno") {
        println!("cargo:rustc-cfg=slurm_errno_is_errno");
    }
    match slurm_headers::lib_dir() {
        Ok(Some(dir)) => {
            println!("cargo:rustc-link-search=native={}", dir.display());
            // A Slurm from another system (a root file system of a newer Debian) links
            // against that system's C library, which the linker here cannot check against:
            // it is checked where smartmigd runs, beside that libslurm.
            println!("cargo:rustc-link-arg=-Wl,--allow-shlib-undefined");
        }
        Ok(None) => {}
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
    println!("cargo:rustc-link-lib=dylib=slurm");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header(slurm_h.display().to_string())
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_function(
            "slurm_init|slurm_load_jobs|slurm_free_job_info_msg|slurm_load_node|\
             slurm_free_node_info_msg|slurm_update_node|slurm_init_update_node_msg|\
             slurm_update_job|slurm_init_job_desc_msg|slurm_strerror|slurm_get_errno|\
             slurm_requeue|slurm_ping|slurm_reconfigure|slurm_hostlist_create|slurm_hostlist_shift|\
             slurm_hostlist_destroy|slurm_load_node_single|slurm_load_ctl_conf|slurm_free_ctl_conf",
        )
        .allowlist_type(
            "job_info_msg_t|node_info_msg_t|update_node_msg_t|job_desc_msg_t|job_states|node_states|slurm_conf_t",
        )
        .allowlist_var(
            "SLURM_VERSION_NUMBER|NO_VAL|INFINITE|SLURM_SUCCESS|SHOW_ALL|SHOW_DETAIL|SLURM_NO_CHANGE_IN_DATA|ESLURM_INVALID_NODE_NAME|\
             JOB_STATE_BASE|JOB_PENDING|JOB_RUNNING|MAX_JOB_ID|NODE_RESUME|NODE_STATE_DRAIN|NODE_STATE_INVALID_REG|\
             NODE_STATE_BASE|NODE_STATE_DOWN|NODE_STATE_IDLE|NODE_STATE_ALLOCATED|NODE_STATE_MIXED|\
             NODE_STATE_UNKNOWN|NODE_STATE_NO_RESPOND",
        )
        // NODE_RESUME and the NODE_STATE_ flags are SLURM_BIT(n): let clang evaluate them.
        .clang_macro_fallback()
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .allowlist_type("slurm_err_t")
        .opaque_type("list|List|xlist|cron_entry_t|.*_t_cron|dynamic_plugin_data_t|hostlist|job_resources")
        .derive_default(false)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .unwrap_or_else(|e| {
            eprintln!("error: bindgen failed on {}: {e}", slurm_h.display());
            std::process::exit(1);
        });
    bindings
        .write_to_file(out.join("slurm_bindings.rs"))
        .expect("write bindings to OUT_DIR");
}
