//! Which boot the node's layouts were last restored on (`smartmigd node --restore`, or the
//! agent itself when that restore failed): slurmd may start once they were, this boot.
//!
//! The restore unit is `RequiredBy=slurmd.service`, so every start of slurmd runs it again
//! while it is not active (it failed at boot). It then finds the running agent's lock; with
//! this mark it can tell that the agent restored the layouts since, and let slurmd start.

use std::path::{Path, PathBuf};

use smartmig_core::durable;

use super::NodeError;

/// The mark's file name inside `[controller] state_dir`.
pub const RESTORED_FILE: &str = "restored-boot";

/// The kernel's id of the running boot (a new one at every boot).
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// The running boot's id; None where the kernel does not give one.
pub fn current() -> Option<String> {
    std::fs::read_to_string(BOOT_ID)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(RESTORED_FILE)
}

/// Whether the layouts were restored on boot `boot`.
pub fn restored_on(state_dir: &Path, boot: &str) -> bool {
    std::fs::read_to_string(path(state_dir)).is_ok_and(|t| t.trim() == boot)
}

/// Whether the layouts were ever restored here (on any boot).
pub fn restored_before(state_dir: &Path) -> bool {
    path(state_dir).exists()
}

/// Records that the layouts were restored on boot `boot`.
pub fn mark_restored_on(state_dir: &Path, boot: &str) -> Result<(), NodeError> {
    durable::write(&path(state_dir), format!("{boot}\n").as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restore_counts_for_the_boot_it_was_made_on_only() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!restored_on(dir.path(), "boot-a") && !restored_before(dir.path()));
        mark_restored_on(dir.path(), "boot-a").unwrap();
        assert!(restored_before(dir.path()));
        assert!(restored_on(dir.path(), "boot-a"));
        assert!(!restored_on(dir.path(), "boot-b"), "a reboot since");
        assert!(current().is_some_and(|b| !b.is_empty()), "Linux gives a boot id");
    }
}
