//! Build-script support shared by slurm-plugin/build.rs and controller/build.rs: finding
//! the installed Slurm headers.

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
