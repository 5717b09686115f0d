//! Re-layout on Slurm 23.11 and later: rewrite the generated node file, then one
//! `scontrol reconfigure` (`slurm_reconfigure`) for the whole batch; smartmig restarts
//! neither slurmctld nor slurmd.
//!
//! From 23.11 on, a reconfigure makes slurmctld re-execute itself in place (it saves its
//! state; the new process reads it back and keeps the listening socket) and every slurmd
//! re-read slurm.conf and gres.conf and register again. Measured on Slurm 24.11 with jobs
//! running and a storm of squeue and sbatch (BENCHMARKS.md, "Re-layout paths"): no client
//! call failed, the longest stretch without an answer was as between ordinary calls, the
//! new types were schedulable at the next scheduler pass, running jobs kept running with
//! their device index. Two limits, both Slurm's: a change of a node's total GPU count
//! requeues the jobs running on it ("gres/gpu count mismatch", as in 22.05), and a
//! reconfigure whose configuration fails to load (a broken slurm.conf, a plugin built for
//! another release) stops slurmctld in 24.11.
//!
//! The node agent's part ([`Relayout::stops_slurmd`] is false): install the new layout and
//! gres.conf before it reports, and leave slurmd running. slurmctld keeps a node's GRES from
//! its saved state until that node's slurmd registers again, which the running slurmd does
//! by itself a few milliseconds after the reconfigure (a stopped slurmd would do it only
//! when started). So [`Reconfigure`]'s load waits until slurmctld answers and every node of
//! the batch shows its new GPU GRES.

use std::time::Duration;

use super::relayout::{Loader, NodeFile, RelayoutError};
use super::same_gpu_gres;
use crate::command;
use crate::slurm::SlurmApi;

/// First Slurm release whose reconfigure re-executes slurmctld in place (23.11.0).
pub const RECONFIGURE_SINCE: u32 = 0x17_0b_00;

/// Slurm 23.11 and later: one reconfigure (the node file rewritten before).
#[derive(Debug, Clone, Copy)]
pub struct Reconfigure;

impl Loader for Reconfigure {
    const NAME: &'static str = "reconfigure";
    const STOPS_SLURMD: bool = false;

    /// Reconfigures, then waits until slurmctld shows each node of `nodes` with its GPU
    /// GRES (once the node's slurmd has registered again).
    fn load(
        &self,
        api: &mut dyn SlurmApi,
        file: &NodeFile<'_>,
        nodes: &[(String, String)],
        timeout: Duration,
    ) -> Result<(), RelayoutError> {
        log::info!("reconfiguring Slurm for {} node(s)", nodes.len());
        match api.reconfigure() {
            Ok(()) => {}
            // The reply was lost, maybe not the request: whether Slurm reconfigured shows
            // below, as every node's new GRES; if it did not, the wait times out and the
            // caller undoes the re-layout as after any failed load.
            Err(e) if e.may_have_taken_effect() => {
                log::warn!("reconfigure: {e}; waiting for Slurm to show the new GRES all the same");
            }
            Err(e) => return Err(RelayoutError::Reconfigure(e)),
        }
        let mut last = String::new();
        let shown = command::poll_until(timeout, Duration::from_millis(100), || {
            last.clear();
            for (node, want) in nodes {
                match api.node(node) {
                    Ok(n) => {
                        let have = n.map(|n| n.gres).unwrap_or_default();
                        if !same_gpu_gres(&have, want, file.mig_types) {
                            last = format!("{node} shows GRES {have}, not {want}");
                            return None;
                        }
                    }
                    Err(e) => {
                        last = e.to_string();
                        return None;
                    }
                }
            }
            Some(())
        });
        shown.ok_or(RelayoutError::NoAnswerAfterReconfigure(timeout, last))
    }

    /// Slurm reloads the previous file; the nodes' GRES then follow what their agents put
    /// back, which the caller checks.
    fn load_previous(&self, api: &mut dyn SlurmApi, _: Duration) -> Result<(), RelayoutError> {
        log::info!("reconfiguring Slurm with the previous node definitions");
        api.reconfigure().map_err(RelayoutError::Reconfigure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::central::fake::FakeSlurm;
    use crate::central::relayout::{chosen, Relayout, ViaNodeFile};
    use crate::slurm::SlurmNode;
    use smartmig_core::config::{CentralConfig, RelayoutKind};
    use std::collections::HashSet;

    fn setup(dir: &std::path::Path) -> ViaNodeFile<Reconfigure> {
        let include = dir.join("nodes.conf");
        std::fs::write(
            &include,
            "NodeName=a CPUs=4 Gres=gpu:7g.40gb:1,license:2\nNodeName=b Gres=gpu:7g.40gb:1\n",
        )
        .unwrap();
        ViaNodeFile {
            include,
            timeout: Duration::from_millis(300),
            mig_types: ["7g.40gb", "3g.20gb", "1g.5gb"].map(String::from).into(),
            loader: Reconfigure,
        }
    }

    /// Slurm with node `a` showing `gres` (as its slurmd registered it).
    fn slurm(gres: &str) -> FakeSlurm {
        FakeSlurm {
            nodes: vec![SlurmNode {
                name: "a".into(),
                gres: gres.into(),
                ..SlurmNode::default()
            }],
            ..FakeSlurm::default()
        }
    }

    #[test]
    fn a_batch_rewrites_the_node_file_reconfigures_once_and_undo_puts_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = setup(dir.path());
        let mut slurm = slurm("gpu:3g.20gb:2(S:0),license:2");
        assert!(!r.stops_slurmd(), "slurmd re-reads gres.conf at the reconfigure");
        let batch = [("a".to_string(), "gpu:3g.20gb:2".to_string())];
        r.apply(&mut slurm, &batch).unwrap();
        assert_eq!(slurm.reconfigures, 1);
        assert_eq!(
            std::fs::read_to_string(&r.include).unwrap(),
            "NodeName=a CPUs=4 Gres=gpu:3g.20gb:2,license:2\nNodeName=b Gres=gpu:7g.40gb:1\n"
        );
        r.apply(&mut slurm, &[]).unwrap();
        assert_eq!(slurm.reconfigures, 1, "an empty batch reconfigures nothing");
        assert!(r.undo(&mut slurm, &batch, false).unwrap());
        assert_eq!(slurm.reconfigures, 2, "Slurm reloads the previous file");
        assert!(std::fs::read_to_string(&r.include)
            .unwrap()
            .starts_with("NodeName=a CPUs=4 Gres=gpu:7g.40gb:1"));
        assert!(
            !r.undo(&mut slurm, &batch, false).unwrap(),
            "nothing left to undo"
        );
        assert_eq!(slurm.reconfigures, 2);
        // An undo interrupted after the file was put back: Slurm loads it again.
        assert!(r.undo(&mut slurm, &batch, true).unwrap());
        assert_eq!(slurm.reconfigures, 3);
        let e = r.check(&["c".into()]).unwrap_err().to_string();
        assert!(e.contains("NodeName=c"), "a node the file does not define: {e}");
    }

    #[test]
    fn a_node_that_does_not_show_its_new_gres_in_time_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = setup(dir.path());
        // Its slurmd never registers the new layout.
        let mut slurm = slurm("gpu:7g.40gb:1");
        let e = r
            .apply(&mut slurm, &[("a".into(), "gpu:3g.20gb:2".into())])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("300ms")
                && e.contains("after the reconfigure")
                && e.contains("a shows GRES gpu:7g.40gb:1"),
            "{e}"
        );
    }

    #[test]
    fn auto_chooses_by_the_release_smartmigd_was_built_against_and_the_admin_can_override() {
        let mut cc = CentralConfig::default();
        assert_eq!(cc.relayout, RelayoutKind::Auto);
        let name = |cc: &CentralConfig, v: u32| match chosen(cc, v, HashSet::new()) {
            Ok(r) => r.name().to_string(),
            Err(e) => e.to_string(),
        };
        for (version, expected) in [
            (0x16_05_08, "restart-slurmctld"),
            (0x17_02_07, "restart-slurmctld"),
            (0x17_0b_00, "reconfigure"),
            (0x18_0b_05, "reconfigure"),
        ] {
            assert_eq!(name(&cc, version), expected, "{version:x}");
        }
        // The explicit choice where the release carries it out; refused (at start) where
        // it was measured not to work.
        cc.relayout = RelayoutKind::RestartSlurmctld;
        assert_eq!(name(&cc, 0x16_05_08), "restart-slurmctld");
        let e = name(&cc, 0x18_0b_05);
        assert!(
            e.contains("cannot work with Slurm 24.11.5") && e.contains("saved state"),
            "{e}"
        );
        cc.relayout = RelayoutKind::Reconfigure;
        assert_eq!(name(&cc, 0x18_0b_05), "reconfigure");
        let e = name(&cc, 0x16_05_08);
        assert!(
            e.contains("cannot work with Slurm 22.05.8") && e.contains("INVALID_REG"),
            "{e}"
        );
    }
}
