//! One node agent per state directory: two agents on one node would each journal their
//! own driver calls and undo each other's re-layouts, so the second one refuses to start.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

use super::NodeError;

/// The lock file's name inside `[controller] state_dir`.
pub const LOCK_FILE: &str = "node-agent.lock";

/// An exclusive hold on a state directory, released when dropped (or when the process
/// dies: the kernel drops the lock with the file).
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

impl StateLock {
    /// Takes the lock of `state_dir` without waiting; fails with [`NodeError::Locked`],
    /// naming the holder's pid, when another process has it.
    pub fn take(state_dir: &Path) -> Result<StateLock, NodeError> {
        std::fs::create_dir_all(state_dir).map_err(|e| NodeError::io(state_dir, e))?;
        let path = state_dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| NodeError::io(&path, e))?;
        // flock(2), not fcntl: the lock belongs to this open file, so a second open in the
        // same process (a test, a restore inside a running agent) is refused too.
        // SAFETY: the descriptor is valid while `file` lives; flock touches no memory.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(NodeError::io(&path, e));
            }
            let mut holder = String::new();
            // The pid is for the message only: an unreadable one still refuses.
            let _ = file.read_to_string(&mut holder);
            return Err(NodeError::Locked {
                path,
                holder: holder.trim().to_string(),
            });
        }
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "{}", std::process::id()))
            .map_err(|e| NodeError::io(&path, e))?;
        Ok(StateLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_agent_on_a_state_dir_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = StateLock::take(dir.path()).unwrap();
        let err = StateLock::take(dir.path()).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, NodeError::Locked { .. }), "{msg}");
        assert!(msg.contains(&std::process::id().to_string()), "{msg}");
        assert!(msg.contains(LOCK_FILE), "{msg}");
        drop(first);
        StateLock::take(dir.path()).unwrap();
    }
}
