//! Replacing a file so that a crash or a full disk at any moment leaves either the old or
//! the new content, never a mix, and never writes through a link an attacker planted.
//!
//! The new content goes to a temporary file created exclusively (`O_EXCL`, random name,
//! which also refuses to follow a symlink) in the target's directory, takes the target's
//! owner and mode, is fsynced, renamed over the target, and the directory is fsynced so
//! the rename itself survives a power cut. smartmigd writes every file it owns as root
//! this way: the slurm.conf include, gres.conf, snapshots, status and journals' compactions.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A file could not be replaced; the target keeps its old content.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {what}: {source}", path.display())]
pub struct DurableError {
    /// The file that was to be written.
    pub path: PathBuf,
    /// The step that failed (e.g. `create a temporary file`).
    pub what: &'static str,
    /// The I/O error.
    pub source: io::Error,
}

fn fail<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(io::Error) -> DurableError + 'a {
    move |source| DurableError {
        path: path.to_path_buf(),
        what,
        source,
    }
}

/// Mode of a new file when no earlier version gives one.
pub const DEFAULT_MODE: u32 = 0o644;

/// Replaces `path` with `bytes` durably (see the module documentation). An existing
/// target keeps its owner and mode; a new one gets `DEFAULT_MODE`. A symlink at `path` is
/// refused rather than followed or replaced.
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), DurableError> {
    let dir = parent(path);
    let old = match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(DurableError {
                path: path.to_path_buf(),
                what: "check the target",
                source: io::Error::other("it is a symbolic link; refusing to replace it"),
            })
        }
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(fail(path, "read the target's metadata")(e)),
    };
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(fail(path, "create a temporary file"))?;
    let mode = old.as_ref().map_or(DEFAULT_MODE, |m| m.mode() & 0o7777);
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(mode))
        .map_err(fail(path, "set the temporary file's mode"))?;
    if let Some(m) = &old {
        std::os::unix::fs::fchown(tmp.as_file(), Some(m.uid()), Some(m.gid()))
            .map_err(fail(path, "give the temporary file the target's owner"))?;
    }
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(fail(path, "write the temporary file"))?;
    tmp.persist(path)
        .map_err(|e| fail(path, "rename the temporary file over the target")(e.error))?;
    sync_dir(dir).map_err(fail(path, "sync the directory"))
}

/// Where [`replace_keeping_previous`] keeps the content a file had before.
pub fn previous_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".smartmig-prev");
    path.with_file_name(name)
}

/// Like [`write`], first saving the target's current content durably at
/// [`previous_path`] (an absent target counts as empty), so an undo can put it back with
/// [`restore_previous`].
pub fn replace_keeping_previous(path: &Path, bytes: &[u8]) -> Result<(), DurableError> {
    keep_previous(path)?;
    write(path, bytes)
}

/// Saves the target's current content durably at [`previous_path`] (an absent target
/// counts as empty), for [`restore_previous`].
pub fn keep_previous(path: &Path) -> Result<(), DurableError> {
    let old = match fs::read(path) {
        Ok(old) => old,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(fail(path, "read the current content")(e)),
    };
    write(&previous_path(path), &old)
}

/// Puts back the content [`replace_keeping_previous`] saved; Ok(false) when nothing was saved.
pub fn restore_previous(path: &Path) -> Result<bool, DurableError> {
    let prev = previous_path(path);
    match fs::read(&prev) {
        Ok(old) => write(path, &old).map(|()| true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(fail(path, "read the saved previous content")(e)),
    }
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_keeps_its_mode_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nodes.conf");
        fs::write(&p, "old\n").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        write(&p, b"new\n").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "new\n");
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o640);
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["nodes.conf"]);
        write(&dir.path().join("fresh"), b"x").unwrap();
        assert_eq!(
            fs::metadata(dir.path().join("fresh")).unwrap().mode() & 0o7777,
            DEFAULT_MODE
        );
    }

    #[test]
    fn a_symlink_at_the_target_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("shadow");
        fs::write(&victim, "secret\n").unwrap();
        let link = dir.path().join("gres.conf");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = write(&link, b"owned\n").unwrap_err().to_string();
        assert!(e.contains("gres.conf") && e.contains("symbolic link"), "{e}");
        assert_eq!(fs::read_to_string(&victim).unwrap(), "secret\n");
    }

    #[test]
    fn the_previous_content_is_kept_and_can_be_restored() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nodes.conf");
        assert!(!restore_previous(&p).unwrap(), "nothing saved yet");
        fs::write(&p, "v1\n").unwrap();
        replace_keeping_previous(&p, b"v2\n").unwrap();
        assert_eq!(fs::read_to_string(previous_path(&p)).unwrap(), "v1\n");
        assert_eq!(fs::read_to_string(&p).unwrap(), "v2\n");
        assert!(restore_previous(&p).unwrap());
        assert_eq!(fs::read_to_string(&p).unwrap(), "v1\n");
    }

    #[test]
    fn a_failed_write_names_the_file_and_keeps_the_old_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing-dir").join("snapshot.json");
        let e = write(&p, b"{}").unwrap_err();
        assert_eq!(e.what, "create a temporary file");
        assert!(e.to_string().contains("snapshot.json"), "{e}");
    }
}
