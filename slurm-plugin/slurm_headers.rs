//! Build-script support shared by slurm-plugin/build.rs, cli-filter/build.rs and
//! controller/build.rs: finding the installed Slurm headers, writing the bindings.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The include directory holding `slurm/slurm.h`, or the list of places tried.
pub fn find_include_dir() -> Result<PathBuf, String> {
    let mut tried = Vec::new();
    if let Ok(dir) = env::var("SLURM_INCLUDE_DIR") {
        let dir = PathBuf::from(dir);
        // Accept both the parent of slurm/ and slurm/ itself.
        for d in [
            dir.clone(),
            dir.parent().map(Path::to_path_buf).unwrap_or_default(),
        ] {
            if d.join("slurm/slurm.h").is_file() {
                return Ok(d);
            }
        }
        tried.push(format!("$SLURM_INCLUDE_DIR={}", dir.display()));
    }
    if let Ok(o) = Command::new("pkg-config")
        .args(["--cflags-only-I", "slurm"])
        .output()
    {
        if o.status.success() {
            for flag in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                if let Some(d) = flag.strip_prefix("-I") {
                    let d = PathBuf::from(d);
                    for c in [d.clone(), d.parent().map(Path::to_path_buf).unwrap_or_default()] {
                        if c.join("slurm/slurm.h").is_file() {
                            return Ok(c);
                        }
                    }
                }
            }
        }
        tried.push("pkg-config slurm".into());
    }
    let usr = PathBuf::from("/usr/include");
    if usr.join("slurm/slurm.h").is_file() {
        return Ok(usr);
    }
    tried.push("/usr/include".into());
    Err(tried.join(", "))
}

/// The include directory holding `slurm/slurm.h`; without one the build stops, saying how
/// to get the headers.
#[allow(dead_code)] // controller/build.rs has its own message
pub fn include_dir_or_exit() -> PathBuf {
    find_include_dir().unwrap_or_else(|tried| {
        eprintln!(
            "error: Slurm headers not found (looked for slurm/slurm.h in: {tried}).\n\
             Install them (Debian: apt-get install libslurm-dev) or set SLURM_INCLUDE_DIR \
             to the directory that contains slurm/slurm.h."
        );
        std::process::exit(1);
    })
}

/// Generates `builder`'s bindings of `slurm_h` into `$OUT_DIR/slurm_bindings.rs`, with
/// the options every user shares; a failure stops the build naming the header.
#[allow(dead_code)] // controller/build.rs generates its own
pub fn write_bindings(builder: bindgen::Builder, slurm_h: &Path) {
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    builder
        .header(slurm_h.display().to_string())
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .unwrap_or_else(|e| {
            eprintln!("error: bindgen failed on {}: {e}", slurm_h.display());
            std::process::exit(1);
        })
        .write_to_file(out.join("slurm_bindings.rs"))
        .expect("write bindings to OUT_DIR");
}
