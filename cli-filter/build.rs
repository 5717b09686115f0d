//! Takes `SLURM_VERSION_NUMBER` (the plugin's `plugin_version`) and Slurm's return codes
//! from the installed headers, the same way as the job_submit plugin (slurm-plugin/build.rs).

#[allow(dead_code)] // shared with slurm-plugin/build.rs and controller/build.rs
#[path = "../slurm-plugin/slurm_headers.rs"]
mod slurm_headers;

fn main() {
    slurm_headers::rerun_if_env_changed();
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../slurm-plugin/slurm_headers.rs");
    let include = slurm_headers::include_dir_or_exit();
    let slurm_h = include.join("slurm/slurm.h");
    println!("cargo:rerun-if-changed={}", slurm_h.display());
    // Stops the build on headers older than the oldest supported release.
    slurm_headers::version_or_exit(&include);
    let builder = bindgen::Builder::default()
        .clang_arg(format!("-I{}", include.display()))
        .allowlist_var("SLURM_VERSION_NUMBER|SLURM_SUCCESS|SLURM_ERROR");
    slurm_headers::write_bindings(builder, &slurm_h);
}
