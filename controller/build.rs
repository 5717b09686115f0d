//! Generates Rust bindings for the parts of libslurm's public API the central role and
//! the node agents use (reading jobs and nodes, updating nodes and pending jobs), and
//! links libslurm.
//!
//! Headers are found as for the plugin (`$SLURM_INCLUDE_DIR`, pkg-config, `/usr/include`;
//! Debian: libslurm-dev, which also ships `libslurm.so`).

use std::env;
use std::path::PathBuf;

// The plugin's header lookup, so both crates build against the same Slurm.
#[path = "../slurm-plugin/slurm_headers.rs"]
mod slurm_headers;
use slurm_headers::find_include_dir;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=SLURM_LIB_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    let include = match find_include_dir() {
        Ok(dir) => dir,
        Err(tried) => {
            eprintln!(
                "error: Slurm headers not found (looked for slurm/slurm.h in: {tried}).\n\
                 Install them (Debian: apt-get install libslurm-dev) or set SLURM_INCLUDE_DIR."
            );
            std::process::exit(1);
        }
    };
    let slurm_h = include.join("slurm/slurm.h");
    println!("cargo:rerun-if-changed={}", slurm_h.display());
    if let Ok(dir) = env::var("SLURM_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
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
             slurm_requeue|slurm_ping|slurm_hostlist_create|slurm_hostlist_shift|\
             slurm_hostlist_destroy|slurm_load_node_single|slurm_load_ctl_conf|slurm_free_ctl_conf",
        )
        .allowlist_type(
            "job_info_msg_t|node_info_msg_t|update_node_msg_t|job_desc_msg_t|job_states|node_states|slurm_conf_t",
        )
        .allowlist_var(
            "SLURM_VERSION_NUMBER|NO_VAL|INFINITE|SLURM_SUCCESS|SHOW_ALL|SHOW_DETAIL|SLURM_NO_CHANGE_IN_DATA|ESLURM_INVALID_NODE_NAME|\
             JOB_STATE_BASE|JOB_PENDING|JOB_RUNNING|NODE_RESUME|NODE_STATE_DRAIN|\
             NODE_STATE_BASE|NODE_STATE_DOWN|NODE_STATE_IDLE|NODE_STATE_ALLOCATED|NODE_STATE_MIXED",
        )
        // NODE_RESUME and NODE_STATE_DRAIN are SLURM_BIT(n): let clang evaluate them.
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
