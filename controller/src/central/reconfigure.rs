//! Re-layout on Slurm 23.11 and later: rewrite the generated node file, then one
//! `scontrol reconfigure` (`slurm_reconfigure`) for the whole batch; smartmig restarts
//! neither slurmctld nor slurmd.
//!
//! From 23.11 on, a reconfigure makes slurmctld re-execute itself in place (it saves its
//! state; the new process reads it back and takes over the listening sockets) and every
//! slurmd re-read slurm.conf and gres.conf. Measured on Slurm 24.11 with jobs running and a
//! storm of squeue and sbatch (BENCHMARKS.md, "Re-layout paths"): no client RPC failed, the
//! node showed its new types at once, running jobs kept their devices. Two limits, both
//! Slurm's: a change of a node's total GPU count kills the jobs running on it ("gres/gpu
//! count mismatch", as in 22.05), and a reconfigure whose configuration fails to load (a
//! broken slurm.conf, a plugin built for another release) stops slurmctld in 24.11.
//!
//! Slurm shows a node's new types once its slurmd registers again: at once when slurmd runs
//! (it re-executes at the reconfigure and re-reads gres.conf), else when it is started.
//! slurmctld keeps a node's GRES from its saved state until then, so the node agent's part
//! on this path is: apply the layout and write the node's gres.conf before it reports, and
//! leave slurmd running. (A slurmd the agent did stop does no harm: it registers with the
//! new gres.conf when started again.) Like the restart, [`Reconfigure::apply`] returns once
//! slurmctld answers; whether every node registered is for the cycle to check.

use std::path::PathBuf;
use std::time::Duration;

use super::relayout::{rewrite_node_file, wait_answer, Relayout, RelayoutError};
use crate::slurm::SlurmApi;

/// First Slurm release whose reconfigure re-executes slurmctld in place (23.11.0).
pub const RECONFIGURE_SINCE: u32 = 0x17_0b_00;

/// Slurm 23.11 and later: rewrite the `Include`d node file and reconfigure once.
#[derive(Debug, Clone)]
pub struct Reconfigure {
    /// The generated node file.
    pub include: PathBuf,
    /// How long slurmctld may take to answer after the reconfigure.
    pub timeout: Duration,
}

impl Relayout for Reconfigure {
    fn name(&self) -> &str {
        "reconfigure"
    }

    fn apply(&mut self, api: &mut dyn SlurmApi, nodes: &[(String, String)]) -> Result<(), RelayoutError> {
        if nodes.is_empty() {
            return Ok(());
        }
        rewrite_node_file(&self.include, nodes)?;
        log::info!("reconfiguring Slurm for {} node(s)", nodes.len());
        api.reconfigure().map_err(RelayoutError::Reconfigure)?;
        wait_answer(api, self.timeout, "reconfigure")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::central::fake::FakeSlurm;
    use crate::central::relayout::chosen;
    use crate::slurm::SlurmNode;
    use smartmig_core::config::{CentralConfig, RelayoutKind};

    fn setup(tag: &str) -> (PathBuf, Reconfigure, FakeSlurm) {
        let dir = std::env::temp_dir().join(format!("smartmig-reconf-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let include = dir.join("nodes.conf");
        std::fs::write(
            &include,
            "NodeName=a CPUs=4 Gres=gpu:7g.40gb:1\nNodeName=b Gres=gpu:7g.40gb:1\n",
        )
        .unwrap();
        let mut slurm = FakeSlurm::default();
        for n in ["a", "b"] {
            slurm.nodes.push(SlurmNode {
                name: n.into(),
                gres: "gpu:7g.40gb:1(S:0)".into(),
                ..SlurmNode::default()
            });
        }
        let r = Reconfigure {
            include,
            timeout: Duration::from_millis(300),
        };
        (dir, r, slurm)
    }

    #[test]
    fn a_batch_rewrites_the_node_file_and_reconfigures_once() {
        let (dir, mut r, mut slurm) = setup("ok");
        r.apply(&mut slurm, &[("a".into(), "gpu:3g.20gb:2".into())])
            .unwrap();
        assert_eq!(slurm.reconfigures, 1);
        assert_eq!(
            std::fs::read_to_string(&r.include).unwrap(),
            "NodeName=a CPUs=4 Gres=gpu:3g.20gb:2\nNodeName=b Gres=gpu:7g.40gb:1\n"
        );
        r.apply(&mut slurm, &[]).unwrap();
        assert_eq!(slurm.reconfigures, 1, "an empty batch reconfigures nothing");
        let e = r
            .apply(&mut slurm, &[("c".into(), "gpu:1g.5gb:7".into())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("NodeName=c"), "a node the file does not define: {e}");
        assert_eq!(
            slurm.reconfigures, 1,
            "nothing reconfigured for a file left as it was"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_slurmctld_that_does_not_answer_after_the_reconfigure_is_an_error_naming_the_wait() {
        let (dir, mut r, mut slurm) = setup("down");
        slurm.down_after_reconfigure = true;
        let e = r
            .apply(&mut slurm, &[("a".into(), "gpu:3g.20gb:2".into())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("300ms") && e.contains("reconfigure"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn auto_chooses_by_the_release_smartmigd_was_built_against_and_the_admin_can_override() {
        let mut cc = CentralConfig::default();
        assert_eq!(cc.relayout, RelayoutKind::Auto);
        let counts: BTreeMap<u32, &str> = [
            (0x16_05_08, "restart-slurmctld"),
            (0x17_02_07, "restart-slurmctld"),
            (0x17_0b_00, "reconfigure"),
            (0x18_0b_05, "reconfigure"),
        ]
        .into();
        for (version, name) in counts {
            assert_eq!(chosen(&cc, version).name(), name, "{version:x}");
        }
        cc.relayout = RelayoutKind::RestartSlurmctld;
        assert_eq!(chosen(&cc, 0x18_0b_05).name(), "restart-slurmctld");
        cc.relayout = RelayoutKind::Reconfigure;
        assert_eq!(chosen(&cc, 0x16_05_08).name(), "reconfigure");
    }
}
