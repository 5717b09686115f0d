//! Obtains the official ONNX Runtime shared library on a machine that has none.
//!
//! What: `onnxruntime/capi/libonnxruntime.so.<ORT_VERSION>` out of PyPI's `onnxruntime`
//! wheel (Microsoft's official CPU build; it needs only libc and libstdc++).
//! How: `python3 -m pip download --no-deps --only-binary=:all:` for the exact version,
//! the manylinux_2_28 wheel of this CPU architecture, checked against a pinned SHA-256
//! (pip's `--require-hashes`), then the one file is unpacked with Python's `zipfile`.
//! Where: `$XDG_CACHE_HOME/smartmig/onnxruntime/<version>/` (default
//! `~/.cache/smartmig/onnxruntime/<version>/`), or for every user and the daemon (whose
//! systemd units hide home directories) [`SYSTEM_DIR`]. Nothing else is installed or
//! changed.
//! Python: `python3`, or the interpreter named by `SMARTMIG_PYTHON`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use thiserror::Error;

/// The ONNX Runtime release smartmig loads and provisions.
pub const ORT_VERSION: &str = "1.32.0";

/// Size of the wheel download in MB (about; both architectures), for announcements.
pub const WHEEL_MB: u32 = 28;

/// Name of the library file in the cache.
pub fn library_file_name() -> String {
    format!("libonnxruntime.so.{ORT_VERSION}")
}

/// Environment variable naming the Python interpreter used to download the wheel.
pub const PYTHON_ENV: &str = "SMARTMIG_PYTHON";

/// One pinned wheel of `onnxruntime==ORT_VERSION`.
struct Wheel {
    arch: &'static str,
    platform: &'static str,
    sha256: &'static str,
}

/// The wheels we accept, by CPU architecture. Any cp311 wheel carries the same library.
const WHEELS: [Wheel; 2] = [
    Wheel {
        arch: "x86_64",
        platform: "manylinux_2_28_x86_64",
        sha256: "5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d",
    },
    Wheel {
        arch: "aarch64",
        platform: "manylinux_2_28_aarch64",
        sha256: "2303372a85299b6757b0e11e1cbf13e410ddf7e10c37f4b37e99d1c90e7daf7c",
    },
];

/// Why the library could not be provisioned.
#[derive(Debug, Error)]
pub enum ProvisionError {
    /// Neither `XDG_CACHE_HOME` nor `HOME` gives a cache directory.
    #[error("no cache directory: set XDG_CACHE_HOME or HOME")]
    NoCacheDir,
    /// No pinned wheel for this machine.
    #[error("no pinned onnxruntime {ORT_VERSION} wheel for {os}/{arch} (have linux x86_64 and aarch64); install ONNX Runtime yourself and set ORT_DYLIB_PATH")]
    UnsupportedPlatform {
        /// `std::env::consts::OS`.
        os: &'static str,
        /// `std::env::consts::ARCH`.
        arch: &'static str,
    },
    /// A file system step failed.
    #[error("{action} {}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Python could not be started.
    #[error("cannot run `{python}` (install python3 and python3-pip, or set {PYTHON_ENV})")]
    Python {
        /// The interpreter.
        python: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A Python step (pip download or unzip) failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Step {
        /// The command line, abbreviated.
        command: String,
        /// Exit status.
        status: String,
        /// The end of its error output.
        stderr: String,
    },
    /// pip succeeded but left no wheel.
    #[error("pip left no .whl in {}", dir.display())]
    NoWheel {
        /// The download directory.
        dir: PathBuf,
    },
}

/// Where `smartmig policy fetch-runtime --system` puts the library for every user and for
/// smartmigd, whose units run with `ProtectHome=yes` and cannot see a home cache.
pub const SYSTEM_DIR: &str = "/usr/lib/smartmig";

/// The library in [`SYSTEM_DIR`], if it is there.
pub fn system_library() -> Option<PathBuf> {
    library_in(Path::new(SYSTEM_DIR))
}

/// The cache directory for this ONNX Runtime version (not created).
pub fn cache_dir() -> Result<PathBuf, ProvisionError> {
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = nonempty("XDG_CACHE_HOME")
        .filter(|p| p.is_absolute())
        .or_else(|| nonempty("HOME").map(|h| h.join(".cache")))
        .ok_or(ProvisionError::NoCacheDir)?;
    Ok(base.join("smartmig").join("onnxruntime").join(ORT_VERSION))
}

/// The library in the cache, if it is there.
pub fn cached_library() -> Option<PathBuf> {
    library_in(&cache_dir().ok()?)
}

/// `libonnxruntime.so.<ORT_VERSION>` in `dir`, else the last other `libonnxruntime.so*`.
fn library_in(dir: &Path) -> Option<PathBuf> {
    let exact = dir.join(library_file_name());
    if exact.is_file() {
        return Some(exact);
    }
    // A library put there by hand under another libonnxruntime.so* name also counts.
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libonnxruntime.so"))
        })
        .collect();
    found.sort();
    found.pop()
}

/// How much of pip's work a fetch shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Nothing: pip runs with `--quiet`; its error output ends up in the error.
    Quiet,
    /// pip's own lines and download progress bar, on this process's standard error (never
    /// on standard output, which may carry a command's JSON).
    Stderr,
}

/// Returns the cached library, downloading it first when absent (see the module doc).
pub fn fetch_runtime() -> Result<PathBuf, ProvisionError> {
    fetch_runtime_to(&cache_dir()?, Progress::Quiet)
}

/// The library in `dir`, downloading it there first when absent.
pub fn fetch_runtime_to(dir: &Path, progress: Progress) -> Result<PathBuf, ProvisionError> {
    if let Some(p) = library_in(dir) {
        return Ok(p);
    }
    let wheel = WHEELS
        .iter()
        .find(|w| cfg!(target_os = "linux") && w.arch == std::env::consts::ARCH)
        .ok_or(ProvisionError::UnsupportedPlatform {
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
        })?;
    let io = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| ProvisionError::Io { action, path, source }
    };
    std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
    // A private work directory next to the destination: the final rename stays on one
    // file system, and concurrent fetches do not see each other's partial files.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let work = dir.join(format!(".download-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(io("cannot create", &work))?;
    let result = download_into(wheel, &work, dir, progress);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn download_into(
    wheel: &Wheel,
    work: &Path,
    dir: &Path,
    progress: Progress,
) -> Result<PathBuf, ProvisionError> {
    let python = std::env::var_os(PYTHON_ENV)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| OsString::from("python3"));
    let requirements = work.join("requirements.txt");
    std::fs::write(
        &requirements,
        format!("onnxruntime=={ORT_VERSION} --hash=sha256:{}\n", wheel.sha256),
    )
    .map_err(|source| ProvisionError::Io {
        action: "cannot write",
        path: requirements.clone(),
        source,
    })?;
    let mut pip = Command::new(&python);
    pip.args(["-m", "pip", "download", "--disable-pip-version-check"])
        .args(["--no-deps", "--only-binary=:all:", "--require-hashes"])
        .args(["--platform", wheel.platform])
        .args([
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "--abi",
            "cp311",
        ])
        .arg("-r")
        .arg(&requirements)
        .arg("-d")
        .arg(work);
    if progress == Progress::Quiet {
        pip.arg("--quiet");
    }
    log::info!(
        "downloading onnxruntime {ORT_VERSION} ({}) from PyPI",
        wheel.platform
    );
    run(
        &python,
        &mut pip,
        &format!("pip download onnxruntime=={ORT_VERSION}"),
        progress,
    )?;

    let whl = std::fs::read_dir(work)
        .map_err(|source| ProvisionError::Io {
            action: "cannot read",
            path: work.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| ProvisionError::NoWheel {
            dir: work.to_path_buf(),
        })?;

    let member = format!("onnxruntime/capi/{}", library_file_name());
    let unpacked = work.join(library_file_name());
    let mut unzip = Command::new(&python);
    unzip
        .arg("-c")
        .arg("import sys, zipfile; open(sys.argv[3], 'wb').write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))")
        .arg(&whl)
        .arg(&member)
        .arg(&unpacked);
    run(&python, &mut unzip, &format!("unzip {member}"), Progress::Quiet)?;

    let dest = dir.join(library_file_name());
    std::fs::rename(&unpacked, &dest).map_err(|source| ProvisionError::Io {
        action: "cannot move the library to",
        path: dest.clone(),
        source,
    })?;
    log::info!("ONNX Runtime {ORT_VERSION} installed at {}", dest.display());
    Ok(dest)
}

fn run(python: &OsString, cmd: &mut Command, what: &str, progress: Progress) -> Result<(), ProvisionError> {
    let started = |source| ProvisionError::Python {
        python: python.to_string_lossy().into_owned(),
        source,
    };
    if progress == Progress::Stderr {
        // Both of pip's streams to our standard error, so a JSON standard output stays clean.
        use std::os::fd::AsFd;
        let to_stderr = || {
            std::io::stderr()
                .as_fd()
                .try_clone_to_owned()
                .map(std::process::Stdio::from)
        };
        let status = cmd
            .stdout(to_stderr().map_err(started)?)
            .stderr(to_stderr().map_err(started)?)
            .status()
            .map_err(started)?;
        return if status.success() {
            Ok(())
        } else {
            Err(ProvisionError::Step {
                command: what.to_string(),
                status: status.to_string(),
                stderr: "see its output above".into(),
            })
        };
    }
    let out = cmd.output().map_err(started)?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
    Err(ProvisionError::Step {
        command: what.to_string(),
        status: out.status.to_string(),
        stderr: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_dir_is_versioned_under_smartmig() {
        // Only checks the shape, not the environment: the path ends in the pinned version.
        let dir = cache_dir().expect("HOME is set in tests");
        assert!(
            dir.ends_with(Path::new("smartmig/onnxruntime").join(ORT_VERSION)),
            "{}",
            dir.display()
        );
        assert_eq!(library_file_name(), "libonnxruntime.so.1.32.0");
    }

    #[test]
    fn every_pinned_wheel_has_a_full_sha256() {
        for w in &WHEELS {
            assert_eq!(w.sha256.len(), 64, "{}", w.arch);
            assert!(w.sha256.bytes().all(|b| b.is_ascii_hexdigit()), "{}", w.arch);
            assert!(w.platform.ends_with(w.arch));
        }
    }
}
