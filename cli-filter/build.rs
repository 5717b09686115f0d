//! Takes `SLURM_VERSION_NUMBER` (the plugin's `plugin_version`) and Slurm's return codes
//! from the installed headers, the same way as the job_submit plugin (slurm-plugin/build.rs).

use std::env;
use std::path::PathBuf;

#[path = "../slurm-plugin/slurm_headers.rs"]
mod slurm_headers;
use slurm_headers::find_include_dir;

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-changed=build.rs");
    let include = find_include_dir().unwrap_or_else(|tried| {
        eprintln!(
            "error: Slurm headers not found (looked for slurm/slurm.h in: {tried}).\n\
             Install them (Debian: apt-get install libslurm-dev) or set SLURM_INCLUDE_DIR \
             to the directory that contains slurm/slurm.h."
        );
        std::process::exit(1);
    });
    let slurm_h = include.join("slurm/slurm.h");
    println!("cargo:rerun-if-changed={}", slurm_h.display());
    println!(
        "cargo:rerun-if-changed={}",
        include.join("slurm/slurm_version.h").display()
    );
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header(slurm_h.display().to_string())
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_var("SLURM_VERSION_NUMBER|SLURM_SUCCESS|SLURM_ERROR")
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
