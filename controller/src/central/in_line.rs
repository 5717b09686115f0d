//! Between batches: the node file, slurmctld and the node agents kept in line. A way back
//! that could not finish (a reload that failed, a registration slurmctld refused) leaves
//! one side behind; each cycle between batches finds it from the view and repairs it
//! before any batch may start, so no node stays out of service for want of a reload.

use super::{gres_of_report, guard, relayout, same_mig_gres, Central, CycleReport, View};
use crate::central::batch::{is_gpu_refusal, HELD_PREFIX};
use crate::channel::Outcome;

/// The wait after a first try that did not repair (each further try doubles it): on the
/// restart path every load restarts slurmctld.
const RETRY_S: f64 = 30.0;
/// The longest wait between two tries.
const RETRY_MAX_S: f64 = 900.0;

/// The most asks that refused nodes register again while they stay refused.
const REGISTER_ASKS: u32 = 4;

/// The asks that nodes slurmctld refused register again.
#[derive(Debug, Default)]
pub(super) struct Asks {
    /// The nodes refused, in the view's order.
    pub(super) nodes: Vec<String>,
    /// Asks made while they stay refused.
    pub(super) made: u32,
    /// When the next may be made (Unix seconds) and the wait after it.
    pub(super) next: Option<(f64, f64)>,
}

/// After a try at `now` with `last` the wait before it (`None`: the first try): when the
/// next may be made and the wait after that one; and the wait until it.
fn next_try(last: Option<(f64, f64)>, now: f64) -> (Option<(f64, f64)>, f64) {
    let wait = last.map_or(RETRY_S, |(_, w)| w);
    (Some((now + wait, (2.0 * wait).min(RETRY_MAX_S))), wait)
}

impl Central {
    /// Whether slurmctld shows each node of `view` (in its order) with the MIG GRES the
    /// node's agent reports: [`Self::agree`] and [`Self::catch_up`] both sort nodes by it.
    pub(super) fn shown_as_reported(&self, view: &View) -> Vec<bool> {
        view.nodes
            .iter()
            .map(|n| same_mig_gres(&n.slurm.gres, &gres_of_report(&n.report.gpus), &self.mig_types))
            .collect()
    }

    /// Brings the node file in line with what slurmctld shows on `view` (a way back that
    /// could not put it back left a failed batch's values there, for slurmctld to load at
    /// its next restart under nodes whose gres.conf say otherwise); false, with the error
    /// reported, when the file cannot be read or written: no batch starts then.
    pub(super) fn agree(&mut self, view: &View, as_reported: &[bool], report: &mut CycleReport) -> bool {
        // Only managed nodes whose agent reports the layouts slurmctld shows: the file is
        // then the one side that differs. Where slurmctld is the side left behind (a
        // reconfigure-path undo whose reload failed, after the file and the nodes went
        // back) the file is right, and a site's other nodes are the admin's.
        let shown: Vec<(String, String)> = view
            .nodes
            .iter()
            .zip(as_reported)
            .filter(|(_, same)| **same)
            .map(|(n, _)| (n.name.clone(), n.slurm.gres.clone()))
            .collect();
        match self.relayout.agree(&shown) {
            Ok(changed) => {
                for d in changed {
                    log::warn!(
                        "node file: {} had Gres={} where slurmctld shows {}; written as slurmctld has it",
                        d.node,
                        d.file,
                        d.slurmctld
                    );
                }
                true
            }
            Err(e) => {
                let e = anyhow::Error::new(e);
                self.fail(
                    report,
                    format!(
                        "no re-layout started: the node file cannot be brought in line with slurmctld: {e:#}"
                    ),
                );
                false
            }
        }
    }

    /// Has Slurm load the node file again for the nodes it is left behind on: slurmctld
    /// shows other MIG GRES than their agents report, and the file has what they report
    /// (a way back whose reload failed: a put-back after a refused Start, a
    /// reconfigure-path undo). Such a node is INVALID or refused at its next registration
    /// until Slurm loads it, and no resume brings it back. A failed load is reported and
    /// tried again after a wait that doubles (a batch's own load loads the same file, so
    /// batches go on); nothing is loaded while smartmig is frozen. With every node shown
    /// as its agent reports, a registration slurmctld refused before is asked again
    /// ([`Self::register_again`]). False when no batch may start this cycle: after a load
    /// (the view is stale), or while the load due would change the GPU count of a node
    /// jobs run on (a batch's load would too).
    pub(super) fn catch_up(
        &mut self,
        view: &View,
        as_reported: &[bool],
        now: f64,
        report: &mut CycleReport,
    ) -> bool {
        let left: Vec<relayout::LeftBehind> = view
            .nodes
            .iter()
            .zip(as_reported)
            .filter(|(n, same)| !**same && n.report.outcome != Outcome::InProgress && n.report.slurmd_running)
            .map(|(n, _)| relayout::LeftBehind {
                node: n.name.clone(),
                reported: gres_of_report(&n.report.gpus),
                shown: n.slurm.gres.clone(),
                busy: !n.running.is_empty(),
            })
            .collect();
        if left.is_empty() {
            self.catch_up_retry = None;
            // Only when no node differs: the ask's reconfigure loads every line.
            return !as_reported.iter().all(|same| *same) || self.register_again(view, now, report);
        }
        if self.catch_up_retry.is_some_and(|(at, _)| now < at) {
            return true;
        }
        let nodes: Vec<&str> = left.iter().map(|l| l.node.as_str()).collect();
        if self.frozen(&format!(
            "slurmctld shows {} with other GRES than their agents report; not loaded again",
            nodes.join(", ")
        )) {
            return true;
        }
        match self.relayout.catch_up(self.api.as_mut(), &left) {
            Ok(loaded) if loaded.is_empty() => true,
            Ok(loaded) => {
                self.catch_up_retry = None;
                // The load asked every slurmd to register: the asks start over, once the
                // answers had time to come.
                self.register = Asks {
                    next: next_try(None, now).0,
                    ..Asks::default()
                };
                log::warn!(
                    "Slurm loaded the node file again: it now has {} as their agents report (the nodes stay drained for the admin)",
                    loaded.join(", ")
                );
                false
            }
            Err(e @ relayout::CatchUpError::Busy { .. }) => {
                self.fail(report, format!("no re-layout started: {e}"));
                false
            }
            Err(e) => {
                let (next, wait) = next_try(self.catch_up_retry, now);
                self.catch_up_retry = next;
                let e = anyhow::Error::new(e);
                self.fail(
                    report,
                    format!("slurmctld is left behind on nodes it shows with other GRES than their agents report: {e:#}; tried again in {wait:.0} s"),
                );
                true
            }
        }
    }

    /// Asks every slurmd to read slurm.conf and register again (a reconfigure) when
    /// slurmctld refused the last registration (INVAL) of a node smartmig holds, or
    /// drained over its GPUs, and now shows the GRES its agent reports: slurmctld asks
    /// nothing more of a node it refused, so it stays INVAL and no resume brings it back.
    /// This follows a load of the node file that did not reach the node's slurmd, which
    /// only the reconfigure path leaves running across loads: an admin's slurmctld restart
    /// that loaded a line a failed reload had left behind, while the slurmd kept the
    /// failed batch's definitions and registered with them. Asked only when no line of
    /// the node file has other GPU counts than slurmctld shows and no node is left alone
    /// this cycle (else the reconfigure could change a busy node's GPU count), at most
    /// [`REGISTER_ASKS`] times for the same nodes, after waits that double (the refusal
    /// may have another cause). False after an ask (the view is stale).
    fn register_again(&mut self, view: &View, now: f64, report: &mut CycleReport) -> bool {
        if self.relayout.stops_slurmd() {
            return true;
        }
        let refused: Vec<String> = view
            .nodes
            .iter()
            .filter(|n| {
                n.slurm.invalid_reg
                    && n.slurm
                        .reason
                        .as_deref()
                        .is_some_and(|r| r.starts_with(HELD_PREFIX) || is_gpu_refusal(r))
                    && n.report.slurmd_running
                    && n.report.outcome != Outcome::InProgress
            })
            .map(|n| n.name.clone())
            .collect();
        // A node newly refused, or none left: the asks start over (after the wait a load
        // set, if any). Fewer refused: the others' asks go on.
        if refused.is_empty() || refused.iter().any(|n| !self.register.nodes.contains(n)) {
            let after_load = self.register.next.filter(|_| self.register.made == 0);
            self.register = Asks {
                nodes: refused,
                made: 0,
                next: after_load,
            };
        } else {
            self.register.nodes = refused;
        }
        if self.register.nodes.is_empty() || self.register.next.is_some_and(|(at, _)| now < at) {
            return true;
        }
        let nodes = self.register.nodes.join(", ");
        if self.register.made >= REGISTER_ASKS {
            self.register.next = Some((f64::INFINITY, RETRY_MAX_S));
            self.fail(
                report,
                format!("slurmctld still refuses the registration of {nodes} after {REGISTER_ASKS} asks (reconfigures): see slurmctld.log; no more asked while it refuses them"),
            );
            return true;
        }
        if self.frozen(&format!(
            "slurmctld refused the registration of {nodes}; no new one asked"
        )) {
            return true;
        }
        let (next, wait) = next_try(self.register.next, now);
        self.register.next = next;
        if !view.problems.is_empty() {
            let alone: Vec<&str> = view.problems.iter().map(|(n, _)| n.as_str()).collect();
            log::warn!(
                "slurmctld refused the registration of {nodes}; no new one asked while {} are left alone (tried again in {wait:.0} s)",
                alone.join(", ")
            );
            return true;
        }
        let shown: Vec<(String, String)> = view
            .nodes
            .iter()
            .map(|n| &n.slurm)
            .chain(view.others.values())
            .map(|n| (n.name.clone(), n.gres.clone()))
            .collect();
        match self.relayout.would_change(&shown) {
            Ok(other) if other.is_empty() => {}
            Ok(other) => {
                log::warn!(
                    "slurmctld refused the registration of {nodes}; no new one asked: the reconfigure that asks it would also load other GPU counts for {} (tried again in {wait:.0} s)",
                    other.join(", ")
                );
                return true;
            }
            Err(e) => {
                let e = anyhow::Error::new(e);
                self.fail(
                    report,
                    format!("slurmctld refused the registration of {nodes}; no new one asked: {e:#}; tried again in {wait:.0} s"),
                );
                return true;
            }
        }
        match self.api.reconfigure() {
            Ok(()) => {
                self.register.made += 1;
                log::warn!(
                    "slurmctld shows {nodes} as their agents report, and refused their last registration: \
                     asked every slurmd to register again (a reconfigure; the nodes stay drained for the admin)"
                );
                false
            }
            Err(e) => {
                self.fail(
                    report,
                    format!("slurmctld refused the registration of {nodes}, and the reconfigure that asks a new one failed: {e}; tried again in {wait:.0} s"),
                );
                true
            }
        }
    }

    /// Whether smartmig is frozen (an upgrade of Slurm or smartmig under way, say), which
    /// leaves Slurm alone; if so, logs `what` would have been done.
    fn frozen(&self, what: &str) -> bool {
        let Some(why) = guard::frozen(&self.resolved.config.controller.state_dir) else {
            return false;
        };
        log::warn!("{what}: frozen ({why}), until thawed");
        true
    }
}
