//! Build-script support shared by slurm-plugin/build.rs, cli-filter/build.rs and
//! controller/build.rs: which Slurm to build against (its headers, its release, its
//! libslurm), and writing the bindings.
//!
//! `$SLURM_PREFIX` names an installation (`/opt/slurm-24.11`, or `<root>/usr` of a Debian
//! root file system such as scripts/debian-chroot.sh's): headers in `include/`, libslurm in
//! `lib/x86_64-linux-gnu`, `lib64` or `lib`. Without it: `$SLURM_INCLUDE_DIR` /
//! `$SLURM_LIB_DIR`, then pkg-config, then the system's.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment variables that select the Slurm, for `cargo:rerun-if-env-changed`.
pub const ENV: [&str; 3] = ["SLURM_PREFIX", "SLURM_INCLUDE_DIR", "SLURM_LIB_DIR"];

/// Tells cargo to rebuild when any of [`ENV`] changes.
pub fn rerun_if_env_changed() {
    for var in ENV {
        println!("cargo:rerun-if-env-changed={var}");
    }
}

/// The include directory holding `slurm/slurm.h`, or the list of places tried.
pub fn find_include_dir() -> Result<PathBuf, String> {
    let mut tried = Vec::new();
    if let Ok(prefix) = env::var("SLURM_PREFIX") {
        let dir = Path::new(&prefix).join("include");
        if dir.join("slurm/slurm.h").is_file() {
            return Ok(dir);
        }
        // A prefix is an explicit choice: never fall back to another Slurm.
        return Err(format!("$SLURM_PREFIX/include={}", dir.display()));
    }
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

/// The include directory, or the build stops with a message saying what to install or set.
pub fn include_dir_or_exit() -> PathBuf {
    find_include_dir().unwrap_or_else(|tried| {
        eprintln!(
            "error: Slurm headers not found (looked for slurm/slurm.h in: {tried}).\n\
             Install them (Debian: apt-get install libslurm-dev), or set SLURM_PREFIX to the \
             Slurm installation to build against (its include/ holds slurm/slurm.h), or \
             SLURM_INCLUDE_DIR to the directory that contains slurm/slurm.h."
        );
        std::process::exit(1);
    })
}

/// Generates `builder`'s bindings of `slurm_h` into `$OUT_DIR/slurm_bindings.rs`, with
/// the options every user shares; a failure stops the build naming the header.
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

/// The directory of libslurm.so given by `$SLURM_LIB_DIR` or `$SLURM_PREFIX` (None: the
/// linker's default search path), or the list of places tried.
pub fn lib_dir() -> Result<Option<PathBuf>, String> {
    if let Ok(dir) = env::var("SLURM_LIB_DIR") {
        return Ok(Some(PathBuf::from(dir)));
    }
    let Ok(prefix) = env::var("SLURM_PREFIX") else {
        return Ok(None);
    };
    let candidates: Vec<PathBuf> = ["lib/x86_64-linux-gnu", "lib64", "lib"]
        .iter()
        .map(|l| Path::new(&prefix).join(l))
        .collect();
    candidates
        .iter()
        .find(|d| d.join("libslurm.so").exists())
        .cloned()
        .map(Some)
        .ok_or_else(|| {
            let shown: Vec<String> = candidates.iter().map(|d| d.display().to_string()).collect();
            format!("no libslurm.so in $SLURM_PREFIX ({})", shown.join(", "))
        })
}

/// `SLURM_VERSION_NUMBER` of the headers in `include` (from `slurm/slurm_version.h`).
pub fn read_version(include: &Path) -> Result<u32, String> {
    let path = include.join("slurm/slurm_version.h");
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() == Some("#define") && words.next() == Some("SLURM_VERSION_NUMBER") {
            let v = words.next().unwrap_or("");
            let v = v.trim_start_matches('(').trim_end_matches(')');
            return u32::from_str_radix(v.trim_start_matches("0x"), 16)
                .map_err(|_| format!("{}: SLURM_VERSION_NUMBER `{v}` is not hex", path.display()));
        }
    }
    Err(format!("{}: no SLURM_VERSION_NUMBER", path.display()))
}

/// Whether header `name` (relative to `include`) declares function `function`.
pub fn declares(include: &Path, name: &str, function: &str) -> bool {
    let path = include.join(name);
    println!("cargo:rerun-if-changed={}", path.display());
    std::fs::read_to_string(&path).is_ok_and(|text| text.contains(&format!(" {function}(")))
}

/// `major.minor.micro` of a `SLURM_VERSION_NUMBER`.
pub fn version_text(v: u32) -> String {
    format!("{}.{:02}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

/// The oldest release smartmig builds against.
pub const OLDEST: u32 = 0x16_05_00;

/// The release of the headers in `include`, or the build stops with the reason (unreadable,
/// or older than [`OLDEST`]).
pub fn version_or_exit(include: &Path) -> u32 {
    let v = read_version(include).unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(1);
    });
    if v < OLDEST {
        eprintln!(
            "error: Slurm {} in {} is older than {}, the oldest release smartmig supports",
            version_text(v),
            include.display(),
            version_text(OLDEST)
        );
        std::process::exit(1);
    }
    v
}
