//! Moving the batch in flight forward, one cycle at a time: each node's step runs when
//! what it waits for has happened (a report, a deadline), the ledger is saved before
//! every step that changes something outside, and every failure leads to the one way
//! back of the state it happened in ([`super::batch`] has the states).

use std::collections::BTreeMap;
use std::time::Duration;

use smartmig_core::config::Mode;
use smartmig_core::mig::layout::display_instance;
use smartmig_core::mig::{Layout, LayoutError, Plan};

use super::batch::{
    drain_reason, held_reason, is_gpu_refusal, is_ours, still_ours, Batch, Closed, NodeState, NodeTxn,
    SlurmStep,
};
use super::indices::Moved;
use super::view::{GpuView, View};
use super::{unix_now, Central, CycleReport};
use crate::channel::{Desired, Outcome, Phase, Report};
use crate::slurm::{read_desired, read_report, write_desired, JobState, NodeUpdate, SlurmError, SlurmNode};

/// Seconds a node may take to answer `Install`, `Start` or `Revert`: a share of the slurmd
/// budget, within bounds.
pub fn phase_timeout(slurmd_budget_s: f64) -> f64 {
    (slurmd_budget_s / 6.0).clamp(5.0, 60.0)
}

/// Why no re-layout batch may start: slurmd's budget is unknown or too tight.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// Slurm's SlurmdTimeout could not be read.
    #[error("cannot read SlurmdTimeout: {0}")]
    Unread(#[from] SlurmError),
    /// The steps that keep slurmd stopped would not pass before the watchdogs fire.
    #[error(
        "a re-layout may keep slurmd stopped for {need_s:.0} s (answers {answer_s:.0} s ×2, Slurm refresh {refresh_s:.0} s, margin 5 s), \
         more than half of Slurm's SlurmdTimeout ({budget_s:.0} s): lower [controller.central] \
         slurmctld_timeout_s or raise SlurmdTimeout"
    )]
    TooTight {
        /// Seconds the steps may take.
        need_s: f64,
        /// One agent answer's limit.
        answer_s: f64,
        /// Slurm's refresh limit.
        refresh_s: f64,
        /// Half of SlurmdTimeout.
        budget_s: f64,
    },
}

/// Whether a batch fits in the slurmd budget: the node agents' answers to `Install` and
/// `Start`, Slurm's refresh and a margin must all pass before the watchdogs fire.
pub fn fits_budget(slurmd_budget_s: f64, refresh: Duration) -> Result<(), BudgetError> {
    let answer_s = phase_timeout(slurmd_budget_s);
    let need_s = 2.0 * answer_s + refresh.as_secs_f64() + 5.0;
    if need_s <= slurmd_budget_s {
        Ok(())
    } else {
        Err(BudgetError::TooTight {
            need_s,
            answer_s,
            refresh_s: refresh.as_secs_f64(),
            budget_s: slurmd_budget_s,
        })
    }
}

/// Why a target GPU's plan cannot be made from what the GPU has now.
#[derive(Debug, thiserror::Error)]
pub enum PlanProblem {
    /// The GPU is not in this cycle's view (its node's report could not be read).
    #[error("GPU {0} unreadable")]
    Unreadable(u32),
    /// A layout of the target does not parse, or no plan leads from one to the other.
    #[error("GPU {gpu}: {error}")]
    Layout {
        /// The GPU index.
        gpu: u32,
        /// What is wrong.
        error: LayoutError,
    },
    /// The GPU no longer has the layout the batch was planned from.
    #[error("GPU {gpu} changed meanwhile to {now}")]
    Changed {
        /// The GPU index.
        gpu: u32,
        /// Its layout now.
        now: String,
    },
}

/// Why Slurm does not (yet) show a batch's new layouts.
#[derive(Debug, thiserror::Error)]
pub enum NotShown {
    /// A node's record could not be read.
    #[error("cannot read {node} after the refresh: {error}")]
    Unread {
        /// The node.
        node: String,
        /// Slurm's error.
        error: SlurmError,
    },
    /// Slurm shows other GPU GRES than the batch's.
    #[error("Slurm shows {node} with GRES {have}, expected {want}")]
    Differs {
        /// The node.
        node: String,
        /// What Slurm shows.
        have: String,
        /// The batch's.
        want: String,
    },
}

/// Why a node agent's report is not trusted; nothing is written to Slurm from it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Untrusted {
    /// The agent could not read its GPUs or its gres.conf block (never "no GPUs").
    #[error("its agent reports a read error: {0}")]
    Unreadable(#[from] crate::channel::AgentReadError),
    /// The GPUs are not the ones the batch was planned on (one fell off the bus).
    #[error("the agent reports the GPU set {reported:?}, the batch was planned on {planned:?}; nothing is written to Slurm for it")]
    GpuSetChanged {
        /// (index, model) as reported.
        reported: Vec<(u32, String)>,
        /// (index, model) when the batch was planned.
        planned: Vec<(u32, String)>,
    },
}

/// A node in the view and a transaction's targets on it: (position in `View::gpus`, layout).
type TargetsNow<'v> = (&'v super::view::NodeView, Vec<(usize, Layout)>);

impl Central {
    /// Moves every node of `b` as far as it can go this cycle.
    pub(super) fn advance(&mut self, b: &mut Batch, view: &View, report: &mut CycleReport) {
        match &b.slurm {
            // The central role stopped during Slurm's refresh: learn which layouts Slurm has.
            SlurmStep::Refreshing { gres } => {
                let gres = gres.clone();
                self.settle_refresh(b, &gres, report);
            }
            // It stopped while putting Slurm's configuration back: do that again, whatever
            // slurmctld shows now (it may still run with the batch's layouts).
            SlurmStep::Undoing {
                gres,
                error,
                after_revert: false,
                ..
            } => {
                let list: Vec<(String, String)> = gres.clone().into_iter().collect();
                let error = format!("{error} (its undo interrupted, done again)");
                self.refresh_failed(b, &list, error, true, report);
            }
            // Waiting for the reverts (asked again by `step` while not answered); a node
            // not asked yet when the central role stopped is asked now.
            SlurmStep::Undoing {
                gres,
                error,
                after_revert: true,
                ..
            } => {
                let not_asked = gres
                    .keys()
                    .any(|n| b.nodes.get(n).is_some_and(|t| !t.state.reverting_or_closed()));
                if not_asked {
                    let (list, error): (Vec<(String, String)>, String) =
                        (gres.clone().into_iter().collect(), error.clone());
                    self.put_back_and_revert(b, &list, &error, report);
                }
            }
            _ => {}
        }
        let names: Vec<String> = b.nodes.keys().cloned().collect();
        let mut to_apply = Vec::new();
        for node in &names {
            self.step(b, node, view, report, &mut to_apply);
        }
        self.ask_apply(b, view, &mut to_apply, report);
        self.install_gate(b, report);
        self.refresh_gate(b, report);
        for node in &names {
            self.step(b, node, view, report, &mut to_apply);
        }
        self.ask_apply(b, view, &mut to_apply, report);
        self.reload_after_revert(b, report);
        self.save_ledger_with(b, report);
    }

    /// Hands their plans to the agents of the nodes that entered `Applying` in this pass,
    /// after one ledger write for all of them (write-ahead: a restarted central role asks
    /// again; one write per node made a batch of n nodes cost n² of serialising).
    fn ask_apply(&mut self, b: &mut Batch, view: &View, nodes: &mut Vec<String>, report: &mut CycleReport) {
        if nodes.is_empty() {
            return;
        }
        if !self.save_ledger_with(b, report) {
            // Nothing handed out: the nodes go back into service as they are.
            for node in std::mem::take(nodes) {
                let outcome = "skip: the re-layout ledger cannot be written".to_string();
                self.enter(b, &node, NodeState::Resuming { outcome });
            }
            return;
        }
        for node in std::mem::take(nodes) {
            // Without its record now, the next cycle asks again.
            let Some(rec) = self.record(view, &node) else {
                continue;
            };
            let d = self.desired(b, &node, Phase::Apply);
            match self.ask(&rec, &d) {
                Ok(()) => {}
                // The plan may be in the record all the same (the reply was lost): its
                // agent may apply it, so the node goes back through a revert.
                Err(e) if e.may_have_taken_effect() => {
                    let e = format!("cannot tell whether the plan reached the agent: {e}");
                    self.revert(b, &node, &rec, e, false, report)
                }
                Err(e) => {
                    let outcome = format!("skip: cannot hand the plan to the agent: {e}");
                    self.fail(report, format!("gen {} {node}: {outcome}", b.generation));
                    self.enter(b, &node, NodeState::Resuming { outcome })
                }
            }
        }
    }

    fn save_ledger_with(&mut self, b: &Batch, report: &mut CycleReport) -> bool {
        self.ledger.batch = Some(b.clone());
        self.save_ledger(report)
    }

    /// Enters `state` for `node` (the ledger is saved by the caller before acting on it).
    fn enter(&mut self, b: &mut Batch, node: &str, state: NodeState) {
        let t = b.nodes.get_mut(node).expect("a node of the batch");
        log::info!(
            "gen {} {node}: {} -> {}",
            b.generation,
            t.state.name(),
            state.name()
        );
        t.state = state;
        t.since = unix_now();
        self.status.pending_transitions.insert(
            node.to_string(),
            format!("gen {}: {}", b.generation, t.state.name()),
        );
    }

    /// The node's record: from this cycle's view, else read from Slurm.
    fn record(&mut self, view: &View, node: &str) -> Option<SlurmNode> {
        if let Some(n) = view.record(node) {
            return Some(n.clone());
        }
        match self.api.node(node) {
            Ok(n) => n,
            Err(e) => {
                log::warn!("cannot read node {node}: {e}");
                None
            }
        }
    }

    /// Writes `desired` into the node's `Extra` (keeping the site's keys).
    fn ask(&mut self, node: &SlurmNode, desired: &Desired) -> Result<(), SlurmError> {
        write_desired(self.api.as_mut(), node, desired)
    }

    fn desired(&self, b: &Batch, node: &str, phase: Phase) -> Desired {
        let t = &b.nodes[node];
        let mut d = Desired::new(b.generation, phase, t.targets.clone());
        if phase == Phase::Apply {
            d.padding = t.padding.clone();
            d.order = t.order.clone();
        }
        if phase == Phase::Install {
            d.stop_slurmd = self.relayout.stops_slurmd();
            d.slurmd_budget_s = b.slurmd_budget_s;
        }
        d
    }

    /// One node's step, if what it waits for has happened; a node that enters `Applying`
    /// is added to `to_apply`, for [`Central::ask_apply`].
    fn step(
        &mut self,
        b: &mut Batch,
        node: &str,
        view: &View,
        report: &mut CycleReport,
        to_apply: &mut Vec<String>,
    ) {
        let t = b.nodes[node].clone();
        let now = unix_now();
        let waited = now - t.since;
        let answer_limit = phase_timeout(b.slurmd_budget_s);
        let Some(rec) = self.record(view, node) else {
            // slurmctld does not answer: wait; the agents' watchdogs cover a stopped
            // slurmd. A node Slurm no longer has leaves the batch once the report
            // timeout passes (it would otherwise hold back every later batch).
            if waited > self.report_timeout_s() && matches!(self.api.node(node), Ok(None)) {
                let why = format!(
                    "Slurm no longer has node {node} (in state {}); check its GPUs and gres.conf before it returns",
                    t.state.name()
                );
                self.fail(report, format!("gen {} {node}: {why}", b.generation));
                self.close(b, node, Closed::Gone { why }, report);
            }
            return;
        };
        // (Only from a view read after the state was entered: an older one predates the ask.)
        if let Some(phase) = t.state.asked().filter(|_| view.read_at > t.since) {
            // Asked again until the request is in the node's record (a write may have
            // failed while slurmctld was away, or the central role stopped before it).
            let asked = read_desired(&rec)
                .and_then(Result::ok)
                .is_some_and(|d| d.generation == b.generation && d.phase == phase);
            if !asked {
                let d = self.desired(b, node, phase);
                if let Err(e) = self.ask(&rec, &d) {
                    log::warn!("gen {} {node}: cannot ask for {phase:?} yet: {e}", b.generation);
                }
            }
        }
        let agent = read_report(&rec).and_then(Result::ok);
        let settled = |phase: Phase| agent.as_ref().filter(|r| r.settles(b.generation, phase)).cloned();
        match &t.state {
            NodeState::Draining => {
                if rec.drain && !is_ours(rec.reason.as_deref(), b.generation) {
                    let reason = rec.reason.clone().unwrap_or_default();
                    return self.close(b, node, Closed::LeftDrained { reason }, report);
                }
                let u = NodeUpdate {
                    node: node.to_string(),
                    drain: Some(drain_reason(b.generation)),
                    ..NodeUpdate::default()
                };
                match self.api.update_node(&u) {
                    Ok(()) => self.enter(b, node, NodeState::Drained),
                    // The request may be in Slurm with its reply lost: skipping the node
                    // would leave it drained outside any batch. The drain is asked again
                    // next cycle (asking twice is harmless) until the report timeout.
                    Err(e) if e.may_have_taken_effect() && waited <= self.report_timeout_s() => {
                        log::warn!(
                            "gen {} {node}: the drain may have taken effect ({e}); asking again",
                            b.generation
                        );
                    }
                    Err(e) => {
                        let why = format!("cannot drain {node}: {e}");
                        self.fail(report, why.clone());
                        self.close(b, node, Closed::Skipped { why }, report)
                    }
                }
            }
            NodeState::Drained => {
                // Preempt mode: every job may be requeued (`preempting`), or some may not
                // and keep their instances, indices and the node's GPU count.
                let preempt_mode = self.mode == Mode::Preempt;
                let preempting = self.preempts(view, node);
                if preempt_mode {
                    let held = (!preempting && self.count_changes_now(view, node, &t)).then(|| {
                        let jobs = view.node(node).map(|nv| self.held_jobs(nv)).unwrap_or_default();
                        format!("skip: became busy before the drain (the node's GPU count would change under running jobs; {jobs})")
                    });
                    if let Some(outcome) =
                        held.or_else(|| self.preempt(view, node, &t).err().map(|e| format!("skip: {e}")))
                    {
                        // Its instances stay busy: the change waits for a later plan.
                        report.skipped_busy += t.targets.len();
                        return self.enter(b, node, NodeState::Resuming { outcome });
                    }
                }
                if view.read_at <= t.since {
                    // The view predates the drain: a job may have started in between.
                    return;
                }
                match self.ready_now(view, node, &t, !preempt_mode) {
                    Err(busy) if !preempt_mode || waited > self.report_timeout_s() => {
                        let outcome = format!("skip: became busy before the drain ({busy})");
                        report.skipped_busy += t.targets.len();
                        self.enter(b, node, NodeState::Resuming { outcome })
                    }
                    Err(_) => {} // preempt: the requeued jobs release their instances soon
                    // Drained, with the indices checked on this view: the order that
                    // keeps them goes with the plan (and into the ledger first). Without
                    // it the agent would write GPU order, which may move a job's device.
                    Ok(order) => {
                        if let Some(t) = b.nodes.get_mut(node) {
                            t.order = order;
                        }
                        self.enter(b, node, NodeState::Applying);
                        to_apply.push(node.to_string());
                    }
                }
            }
            NodeState::Applying => match settled(Phase::Apply) {
                Some(r) => match checked(&r, &t) {
                    Err(e) => self.hold(b, node, &rec, format!("after Apply: {e}"), report),
                    Ok(()) => match &r.outcome {
                        Outcome::Done => {
                            match super::padding::mig_gres(&super::report_counts(&r.gpus), &t.padding) {
                                Ok(gres) => self.enter(b, node, NodeState::Applied { gres }),
                                // The agent staged padding for these blocks: it cannot be.
                                Err(e) => {
                                    let e = format!("after Apply: padding: {e}");
                                    self.revert(b, node, &rec, e, false, report)
                                }
                            }
                        }
                        Outcome::Failed { error } => match not_rolled_back(&r, &t) {
                            // Its rollback failed too: the GPUs are in neither layout.
                            Some(stray) => self.hold(
                                b,
                                node,
                                &rec,
                                format!("the agent could not roll back: {error}; {stray}"),
                                report,
                            ),
                            None => {
                                self.fail(
                                    report,
                                    format!("gen {} {node}: the agent rolled back: {error}", b.generation),
                                );
                                let outcome = format!("rolled back: {error}");
                                self.enter(b, node, NodeState::Resuming { outcome })
                            }
                        },
                        Outcome::InProgress => {}
                    },
                },
                None if waited > self.report_timeout_s() => {
                    // Slurm and slurmd were not touched yet: a confirmed revert resumes it.
                    let e = format!("no answer to Apply within {:.0} s", self.report_timeout_s());
                    self.revert(b, node, &rec, e, false, report)
                }
                None => {}
            },
            NodeState::Applied { .. } => {}
            NodeState::Installed { .. } => {
                // Its watchdog went back while the central role was away, before Slurm's
                // refresh: Slurm has the layouts the node went back to, so it is held as
                // it stands, not refreshed (a refresh would give slurmctld layouts the node
                // no longer has, to be put back after).
                if let Some(r) = settled(Phase::Revert) {
                    let mut why = format!(
                        "slurmd watchdog: {}; before Slurm's refresh, which left the node out",
                        r.watchdog.as_deref().unwrap_or("the agent reverted")
                    );
                    if let Outcome::Failed { error } = &r.outcome {
                        why = format!("{why}; the revert failed: {error}");
                    }
                    self.hold(b, node, &rec, why, report)
                }
            }
            NodeState::Installing { gres } => match settled(Phase::Install) {
                Some(r) => match (&r.outcome, checked(&r, &t)) {
                    (_, Err(e)) => self.revert(b, node, &rec, format!("after Install: {e}"), true, report),
                    (Outcome::Done, Ok(())) => {
                        let gres = gres.clone();
                        self.enter(b, node, NodeState::Installed { gres })
                    }
                    (Outcome::Failed { error }, Ok(())) => self.revert(
                        b,
                        node,
                        &rec,
                        format!("installing gres.conf: {error}"),
                        true,
                        report,
                    ),
                    (Outcome::InProgress, _) => {}
                },
                None if waited > answer_limit => {
                    let e = format!("no answer to Install within {answer_limit:.0} s");
                    self.revert(b, node, &rec, e, true, report)
                }
                None => {}
            },
            NodeState::Starting => {
                let start = settled(Phase::Start);
                let refused = start.as_ref().and_then(|r| match &r.outcome {
                    Outcome::Failed { error } => Some((r, error)),
                    _ => None,
                });
                if let Some((r, error)) = refused {
                    // slurmd may run, on what the agent has: not the generation's layouts
                    // (it reverted them at boot, say), which slurmctld has now. Its slurmd
                    // may have read Slurm's definitions while they held the generation's:
                    // the agent's Revert, asked again, restarts it on the ones put back
                    // (the restart path; a reconfigure reloaded it).
                    let why = format!("the agent refused Start: {error}");
                    self.went_back(b, node, rec, r, why, report)
                } else if let Some(r) = start.filter(|r| r.slurmd_running && r.outcome == Outcome::Done) {
                    let outcome = match &r.watchdog {
                        Some(w) => format!("applied (slurmd started by the agent's watchdog: {w})"),
                        None => "applied".to_string(),
                    };
                    report.changed += t.targets.len();
                    self.status.counters.repartitions += t.targets.len() as u64;
                    self.enter(b, node, NodeState::Resuming { outcome });
                } else if let Some(r) = settled(Phase::Revert) {
                    // The watchdog went back while the central role was away, and the
                    // refresh gave slurmctld the generation's layouts all the same.
                    let why = format!(
                        "slurmd watchdog: {}",
                        r.watchdog.as_deref().unwrap_or("the agent reverted")
                    );
                    self.went_back(b, node, rec, &r, why, report)
                } else if waited > answer_limit {
                    let e = format!("slurmd start not confirmed within {answer_limit:.0} s");
                    self.hold(b, node, &rec, e, report)
                }
            }
            NodeState::Reverting { error, hold } => {
                let (error, hold) = (error.clone(), *hold);
                if let Some(r) = settled(Phase::Revert) {
                    let error = match &r.watchdog {
                        Some(_) => format!("slurmd watchdog reverted the node first; {error}"),
                        None => error,
                    };
                    match &r.outcome {
                        Outcome::Failed { error: e } => {
                            self.hold(b, node, &rec, format!("{error}; the revert failed: {e}"), report)
                        }
                        _ if hold => self.hold(b, node, &rec, error, report),
                        _ => {
                            let outcome = format!("rolled back: {error}");
                            self.enter(b, node, NodeState::Resuming { outcome })
                        }
                    }
                } else if waited > self.report_timeout_s() {
                    self.hold(
                        b,
                        node,
                        &rec,
                        format!("{error}; the agent did not confirm the revert"),
                        report,
                    )
                }
            }
            NodeState::Resuming { outcome } => {
                let outcome = outcome.clone();
                self.resume(b, node, &rec, outcome, report)
            }
            NodeState::Holding { reason } => {
                if !rec.drain {
                    let outcome = "resumed by someone else before it could be held".to_string();
                    return self.close(b, node, Closed::Resumed { outcome }, report);
                }
                if !still_ours(rec.reason.as_deref(), b.generation) {
                    let reason = rec.reason.clone().unwrap_or_default();
                    return self.close(b, node, Closed::LeftDrained { reason }, report);
                }
                let reason = reason.clone();
                self.set_held(b, node, reason, report)
            }
            NodeState::Closed(_) => {}
        }
    }

    /// A node whose agent went back from the generation on its own after Slurm's refresh
    /// was under way (its report `r`): Slurm's definition of it put back
    /// ([`Central::put_node_back`]), its agent asked to revert again unless `r` is a
    /// Revert's already (which answers it), and the node held. The revert is asked whether
    /// or not the reload went through: the include may hold the values put back either
    /// way, and a Revert again is harmless.
    fn went_back(
        &mut self,
        b: &mut Batch,
        node: &str,
        rec: SlurmNode,
        r: &Report,
        why: String,
        report: &mut CycleReport,
    ) {
        let t = b.nodes[node].clone();
        let Some(outcome) = self.put_node_back(node, r, &t) else {
            return self.hold(b, node, &rec, why, report);
        };
        let why = format!("{why}; {}", outcome.unwrap_or_else(|e| e));
        // Read again: the reload may have changed its state.
        let rec = self.api.node(node).ok().flatten().unwrap_or(rec);
        if r.phase != Phase::Revert {
            self.revert(b, node, &rec, why, true, report)
        } else {
            self.hold(b, node, &rec, why, report)
        }
    }

    /// After a refused Start: when the agent's GPUs are back at the generation's `from`
    /// layouts (a reboot before Slurm's refresh went back to what slurmctld had then),
    /// Slurm's definition of the node goes back to them too, since slurmctld now has the
    /// generation's and would refuse slurmd's registration (a node no resume brings
    /// back). What was done, or why it could not be, for the held reason; None when the
    /// GPUs are not (all) back, and the node is held as it stands.
    fn put_node_back(&mut self, node: &str, r: &Report, t: &NodeTxn) -> Option<Result<String, String>> {
        if checked(r, t).is_err() || not_rolled_back(r, t).is_some() {
            return None;
        }
        let gres = match super::padding::mig_gres(&super::report_counts(&r.gpus), &t.padding) {
            Ok(g) => g,
            Err(e) => return Some(Err(format!("its Slurm definition cannot be put back ({e})"))),
        };
        // Already there (put back before a restart of the central role): no reload.
        let shown = self.api.node(node).ok().flatten().map(|n| n.gres);
        if shown.is_some_and(|have| super::same_gpu_gres(&have, &gres, &self.mig_types)) {
            return Some(Ok(format!("Slurm already has the layouts it has ({gres})")));
        }
        let list = [(node.to_string(), gres.clone())];
        Some(match self.relayout.apply(self.api.as_mut(), &list) {
            Ok(()) => Ok(format!(
                "Slurm's definition of the node put back to the layouts it has ({gres})"
            )),
            Err(e) => Err(format!(
                "putting Slurm's definition of the node back to the layouts it has ({gres}) failed: {:#}",
                anyhow::Error::new(e)
            )),
        })
    }

    /// For each target GPU of `t` in this cycle's view: the plan from what it has now,
    /// or why there is none (the GPU is gone or changed meanwhile).
    fn plans_now<'v>(
        &self,
        view: &'v View,
        node: &str,
        t: &NodeTxn,
    ) -> Vec<Result<(&'v GpuView, Plan), PlanProblem>> {
        let driver = self.resolved.config.gpu.driver;
        t.targets
            .iter()
            .map(|target| {
                let gpu = target.index;
                let g = view.gpu(node, gpu).ok_or(PlanProblem::Unreadable(gpu))?;
                let m = &self.resolved.models[g.model].model;
                let bad = |error| PlanProblem::Layout { gpu, error };
                let from = Layout::parse(m, &target.from).map_err(bad)?;
                let to = Layout::parse(m, &target.to).map_err(bad)?;
                if g.layout != from {
                    return Err(PlanProblem::Changed {
                        gpu,
                        now: g.layout.display(m).to_string(),
                    });
                }
                let plan = Plan::between(m, driver, &from, &to).map_err(bad)?;
                Ok((g, plan))
            })
            .collect()
    }

    /// The busy devices whose Slurm index `t`'s targets would move, as the node is in
    /// `view` (a job may have started on a kept instance since the plan).
    fn moved_now(&self, view: &View, node: &str, t: &NodeTxn) -> Result<Vec<Moved>, String> {
        let (nv, after) = self.targets_now(view, node, t)?;
        let after: Vec<(usize, &Layout)> = after.iter().map(|(p, l)| (*p, l)).collect();
        self.moved(view, nv, &after, &t.padding)
            .map_err(|e| e.to_string())
    }

    /// Node `node` in `view` and `t`'s targets on it: (position in `View::gpus`, layout).
    fn targets_now<'v>(&self, view: &'v View, node: &str, t: &NodeTxn) -> Result<TargetsNow<'v>, String> {
        let nv = view
            .node(node)
            .ok_or_else(|| format!("{node} is not managed now"))?;
        let mut after = Vec::new();
        for target in &t.targets {
            let pos = nv
                .gpus
                .iter()
                .copied()
                .find(|&p| view.gpus[p].index == target.index)
                .ok_or_else(|| PlanProblem::Unreadable(target.index).to_string())?;
            let m = &self.resolved.models[view.gpus[pos].model].model;
            let to = Layout::parse(m, &target.to).map_err(|error| {
                PlanProblem::Layout {
                    gpu: target.index,
                    error,
                }
                .to_string()
            })?;
            after.push((pos, to));
        }
        Ok((nv, after))
    }

    /// Whether `t`'s plans can run now, as the node is in `view`: the order of its devices
    /// within each type once they ran, as its gres.conf is to list them
    /// ([`Central::order_refs`]; empty without padding), or why not: busy instances they
    /// destroy, busy devices whose Slurm index they would move, GPUs changed, an order
    /// that cannot be read, and with `check_count` a GPU count change under running jobs.
    /// Preempt mode checks the count before it requeues, so only drain mode asks for it.
    fn ready_now(
        &self,
        view: &View,
        node: &str,
        t: &NodeTxn,
        check_count: bool,
    ) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        match self.moved_now(view, node, t) {
            Ok(moved) => out.extend(moved.iter().map(Moved::to_string)),
            Err(e) => out.push(e),
        }
        for p in self.plans_now(view, node, t) {
            match p {
                Err(e) => out.push(e.to_string()),
                Ok((g, plan)) => {
                    let m = &self.resolved.models[g.model].model;
                    let busy: Vec<String> = plan.touched(&g.busy).map(|i| display_instance(m, i)).collect();
                    if !busy.is_empty() {
                        out.push(format!("GPU {}: busy {}", g.index, busy.join(" ")));
                    }
                }
            }
        }
        if check_count && self.count_changes_now(view, node, t) {
            out.push("the node's GPU count would change under running jobs".into());
        }
        if !out.is_empty() {
            return Err(out.join(", "));
        }
        // The node must not enter Applying with GPU order in place of this one.
        let (nv, after) = self.targets_now(view, node, t)?;
        let after: Vec<(usize, &Layout)> = after.iter().map(|(p, l)| (*p, l)).collect();
        self.order_refs(view, nv, &after, &t.padding)
            .map_err(|e| format!("cannot order its devices ({e})"))
    }

    /// Whether `t`'s plans change the node's GPU count under running jobs.
    fn count_changes_now(&self, view: &View, node: &str, t: &NodeTxn) -> bool {
        self.targets_now(view, node, t).is_ok_and(|(nv, after)| {
            let after: Vec<(usize, &Layout)> = after.iter().map(|(p, l)| (*p, l)).collect();
            self.count_changes(view, nv, &after, &t.padding)
        })
    }

    /// In preempt mode, requeues the jobs on the instances a node's plans destroy and on
    /// the devices whose Slurm index they would move (the node then waits until Slurm has
    /// them off it: `ready_now`). Requeues none when one of them may not be (Slurm cannot
    /// requeue it, or it ran longer than `requeue_max_run_s`: it started or aged since the
    /// plan), and stops at the first job Slurm refuses: the change cannot go ahead while
    /// it runs.
    fn preempt(&mut self, view: &View, node: &str, t: &NodeTxn) -> Result<(), String> {
        // A plan that cannot be made now refuses the change (`ready_now`): found here,
        // before any job is requeued for it.
        let mut jobs = std::collections::BTreeSet::new();
        for p in self.plans_now(view, node, t) {
            let (g, plan) = p.map_err(|e| e.to_string())?;
            for (b, js) in g.busy.iter().zip(&g.jobs) {
                if plan.destroy.contains(b) {
                    jobs.extend(js.iter().copied());
                }
            }
        }
        for m in self.moved_now(view, node, t)? {
            jobs.extend(m.jobs.iter().copied());
        }
        if let Some(nv) = view.node(node).filter(|nv| jobs.iter().any(|&j| nv.holds(j))) {
            return Err(format!("became busy before the drain ({})", self.held_jobs(nv)));
        }
        for j in jobs {
            match self.api.requeue(j) {
                // (A job that ended since is left ended: the requeue is for running jobs.)
                Ok(()) => log::info!("{node}: requeued job {j}"),
                // Slurm shows the job off its node: the requeue took effect though its
                // reply was lost, or the job ended before it; either way its instances
                // are free, and the jobs requeued before it were not preempted for
                // nothing.
                Err(e) if self.off_node(j, node) => {
                    log::warn!("{node}: job {j} requeued or ended (Slurm shows it off the node; the requeue call said: {e})");
                }
                Err(e) => return Err(format!("cannot requeue job {j}: {e}")),
            }
        }
        Ok(())
    }

    /// Whether Slurm, asked now, shows job `j` no longer running on `node`.
    fn off_node(&mut self, j: u32, node: &str) -> bool {
        self.api.jobs().is_ok_and(|jobs| {
            !jobs
                .iter()
                .any(|x| x.id == j && x.state == JobState::Running && x.nodes.iter().any(|n| n == node))
        })
    }

    /// Every node of the batch has applied (or is out of it): ask them to install gres.conf.
    /// A node still applying long after the first of the batch finished is reverted
    /// (and resumed) so that it does not keep the others drained: it waits for a later batch.
    fn install_gate(&mut self, b: &mut Batch, report: &mut CycleReport) {
        let applied = b.in_state(|s| matches!(s, NodeState::Applied { .. }));
        let first_done = applied
            .iter()
            .map(|n| b.nodes[n].since)
            .fold(f64::INFINITY, f64::min);
        let grace = 2.0 * phase_timeout(b.slurmd_budget_s);
        if unix_now() - first_done > grace {
            for node in b.in_state(|s| matches!(s, NodeState::Applying)) {
                if let Ok(Some(rec)) = self.api.node(&node) {
                    let e =
                        format!("still applying {grace:.0} s after the first node of the batch was ready");
                    self.revert(b, &node, &rec, e, false, report);
                }
            }
        }
        let waiting =
            b.in_state(|s| matches!(s, NodeState::Draining | NodeState::Drained | NodeState::Applying));
        if !waiting.is_empty() || applied.is_empty() {
            return;
        }
        for node in &applied {
            let NodeState::Applied { gres } = b.nodes[node].state.clone() else {
                continue;
            };
            self.enter(b, node, NodeState::Installing { gres });
        }
        if !self.save_ledger_with(b, report) {
            self.revert_unrecorded(b, &applied, report);
            return;
        }
        for node in &applied {
            let d = self.desired(b, node, Phase::Install);
            let rec = match self.api.node(node) {
                Ok(Some(r)) => r,
                Ok(None) | Err(_) => continue, // retried through the Install timeout → Revert
            };
            if let Err(e) = self.ask(&rec, &d) {
                self.revert(
                    b,
                    node,
                    &rec,
                    format!("cannot ask for Install: {e}"),
                    true,
                    report,
                );
            }
        }
    }

    /// Every installing node has answered: refresh Slurm once for the installed ones;
    /// on failure put Slurm's configuration back and revert them.
    fn refresh_gate(&mut self, b: &mut Batch, report: &mut CycleReport) {
        if b.slurm != SlurmStep::Untouched {
            return;
        }
        if !b
            .in_state(|s| matches!(s, NodeState::Installing { .. }))
            .is_empty()
        {
            return;
        }
        let gres: BTreeMap<String, String> = b
            .nodes
            .iter()
            .filter_map(|(n, t)| match &t.state {
                NodeState::Installed { gres } => Some((n.clone(), gres.clone())),
                _ => None,
            })
            .collect();
        if gres.is_empty() {
            return;
        }
        b.slurm = SlurmStep::Refreshing { gres: gres.clone() };
        if !self.save_ledger_with(b, report) {
            b.slurm = SlurmStep::Untouched;
            let nodes: Vec<String> = gres.into_keys().collect();
            self.revert_unrecorded(b, &nodes, report);
            return;
        }
        let list: Vec<(String, String)> = gres.clone().into_iter().collect();
        let result = self
            .relayout
            .apply(self.api.as_mut(), &list)
            .map_err(|e| format!("{:#}", anyhow::Error::new(e)))
            .and_then(|()| self.slurm_has(&gres).map_err(|e| e.to_string()));
        match result {
            Ok(()) => self.refreshed(b, report),
            Err(e) => {
                let error = format!("{} failed: {e}", self.relayout.name());
                self.refresh_failed(b, &list, error, false, report)
            }
        }
    }

    /// After a restart of the central role mid-refresh: Slurm has the new layouts, or
    /// what was done is undone.
    fn settle_refresh(&mut self, b: &mut Batch, gres: &BTreeMap<String, String>, report: &mut CycleReport) {
        let list: Vec<(String, String)> = gres.clone().into_iter().collect();
        match self.slurm_has(gres) {
            Ok(()) => {
                log::info!(
                    "gen {}: Slurm has the batch's layouts (refresh finished before a restart)",
                    b.generation
                );
                self.refreshed(b, report)
            }
            Err(e) => self.refresh_failed(b, &list, format!("refresh interrupted: {e}"), false, report),
        }
    }

    /// Whether Slurm's record of any node shows the batch's new GPU GRES (true when a
    /// record cannot be read: it may).
    fn slurm_shows_any(&mut self, gres: &BTreeMap<String, String>) -> bool {
        gres.iter().any(|(node, want)| match self.api.node(node) {
            Ok(Some(n)) => super::same_gpu_gres(&n.gres, want, &self.mig_types),
            Ok(None) => false,
            Err(_) => true,
        })
    }

    /// Whether Slurm's node records carry the batch's new GPU GRES.
    fn slurm_has(&mut self, gres: &BTreeMap<String, String>) -> Result<(), NotShown> {
        for (node, want) in gres {
            let have = self
                .api
                .node(node)
                .map_err(|error| NotShown::Unread {
                    node: node.clone(),
                    error,
                })?
                .map(|n| n.gres)
                .unwrap_or_default();
            if !super::same_gpu_gres(&have, want, &self.mig_types) {
                return Err(NotShown::Differs {
                    node: node.clone(),
                    have,
                    want: want.clone(),
                });
            }
        }
        Ok(())
    }

    fn refreshed(&mut self, b: &mut Batch, report: &mut CycleReport) {
        b.slurm = SlurmStep::Refreshed;
        let installed = b.in_state(|s| matches!(s, NodeState::Installed { .. }));
        for node in &installed {
            self.enter(b, node, NodeState::Starting);
        }
        self.save_ledger_with(b, report);
        for node in &installed {
            let d = self.desired(b, node, Phase::Start);
            if let Ok(Some(rec)) = self.api.node(node) {
                if let Err(e) = self.ask(&rec, &d) {
                    // Left to the Start timeout, then held; the watchdog starts slurmd.
                    self.fail(
                        report,
                        format!("gen {} {node}: cannot ask for Start: {e}", b.generation),
                    );
                }
            }
        }
    }

    /// Puts Slurm's configuration back (with `reload`, has Slurm load it even if it was
    /// put back already) and reverts and holds the batch's nodes.
    fn refresh_failed(
        &mut self,
        b: &mut Batch,
        list: &[(String, String)],
        error: String,
        reload: bool,
        report: &mut CycleReport,
    ) {
        self.fail(report, format!("gen {}: {error}", b.generation));
        // Written ahead: a restart during the undo does it again instead of taking a
        // slurmctld that still shows the batch's layouts for a refresh that worked.
        let after_revert = !self.relayout.stops_slurmd();
        b.slurm = SlurmStep::Undoing {
            gres: list.iter().cloned().collect(),
            error: error.clone(),
            after_revert,
            put_back: false,
        };
        self.save_ledger_with(b, report);
        if after_revert {
            return self.put_back_and_revert(b, list, &error, report);
        }
        let error = match self.relayout.undo(self.api.as_mut(), list, reload) {
            Ok(true) => format!("{error}; Slurm's previous node definitions restored"),
            Ok(false) => error,
            Err(e) => {
                let msg = format!(
                    "{error}; restoring Slurm's previous node definitions failed too: {:#}; \
                     the agent's watchdog starts slurmd with the gres.conf slurmctld has",
                    anyhow::Error::new(e)
                );
                self.fail(report, format!("gen {}: {msg}", b.generation));
                // Which definitions slurmctld loaded is not known here: reverting every
                // node's gres.conf could set the two sides apart. Each node is held as it
                // stands; its agent's watchdog, at its deadline, starts slurmd with the
                // gres.conf that matches what slurmctld shows then.
                b.slurm = SlurmStep::Restored { error: msg.clone() };
                for (node, _) in list {
                    self.hold_as_it_stands(b, node, &msg, report);
                }
                return;
            }
        };
        b.slurm = SlurmStep::Restored { error: error.clone() };
        for (node, _) in list {
            self.revert_node(b, node, error.clone(), true, report);
        }
    }

    /// Holds `node` drained without asking its agent for anything more.
    fn hold_as_it_stands(&mut self, b: &mut Batch, node: &str, why: &str, report: &mut CycleReport) {
        if b.nodes.get(node).is_none_or(|t| t.state.reverting_or_closed()) {
            return;
        }
        match self.api.node(node) {
            Ok(Some(rec)) => self.hold(b, node, &rec, why.to_string(), report),
            _ => self.enter(
                b,
                node,
                NodeState::Holding {
                    reason: held_reason(b.generation, why),
                },
            ),
        }
    }

    /// [`Central::revert`] for `node`, read from Slurm; a node whose record cannot be read
    /// enters `Reverting` unasked (the next cycle's step asks what is not in its record).
    fn revert_node(
        &mut self,
        b: &mut Batch,
        node: &str,
        error: String,
        hold: bool,
        report: &mut CycleReport,
    ) {
        match self.api.node(node) {
            Ok(Some(rec)) => self.revert(b, node, &rec, error, hold, report),
            _ => self.enter(b, node, NodeState::Reverting { error, hold }),
        }
    }

    /// The reconfigure path's undo, first half: the include put back (Slurm does not load
    /// it yet) and the nodes not yet reverting asked to revert and stay held.
    fn put_back_and_revert(
        &mut self,
        b: &mut Batch,
        list: &[(String, String)],
        error: &str,
        report: &mut CycleReport,
    ) {
        let put = match self.relayout.put_back(list) {
            Ok(put) => put,
            Err(e) => {
                let why = format!(
                    "{error}; putting Slurm's previous node definitions back failed too: {:#}; \
                     Slurm loads the batch's layouts again with the nodes' gres.conf",
                    anyhow::Error::new(e)
                );
                self.fail(report, format!("gen {}: {why}", b.generation));
                // The include still holds the batch's values (it is replaced whole or not
                // at all), as the nodes' gres.conf do: reverting them would set the two
                // sides apart at the reload. Each node is held as it stands, and Slurm
                // loads the new values again with them.
                if let SlurmStep::Undoing { put_back, error, .. } = &mut b.slurm {
                    *put_back = true;
                    error.clone_from(&why);
                }
                for (node, _) in list {
                    self.hold_as_it_stands(b, node, &why, report);
                }
                return;
            }
        };
        if let SlurmStep::Undoing { put_back, .. } = &mut b.slurm {
            *put_back |= put;
        }
        for (node, _) in list {
            if b.nodes.get(node).is_none_or(|t| t.state.reverting_or_closed()) {
                continue;
            }
            self.revert_node(b, node, error.to_string(), true, report);
        }
    }

    /// The reconfigure path's undo, second half: once no node of the refresh is still
    /// reverting (each put its gres.conf back, or was held without an answer), Slurm
    /// loads the include put back, and the running slurmds the restored gres.conf.
    fn reload_after_revert(&mut self, b: &mut Batch, report: &mut CycleReport) {
        let SlurmStep::Undoing {
            gres,
            error,
            after_revert: true,
            put_back,
        } = &b.slurm
        else {
            return;
        };
        let reverting = gres
            .keys()
            .any(|n| b.nodes.get(n).is_some_and(|t| !t.state.is_closed()));
        if reverting {
            return;
        }
        let (gres, error, put_back) = (gres.clone(), error.clone(), *put_back);
        // Nothing to load when the include never held the batch's values and slurmctld
        // shows none of them (the include could not even be written): Slurm is as it was.
        if !put_back && !self.slurm_shows_any(&gres) {
            b.slurm = SlurmStep::Restored { error };
            return;
        }
        let error = match self.relayout.reload(self.api.as_mut()) {
            // The file put back (the previous definitions), or the batch's where putting
            // them back failed (the error says so).
            Ok(()) => format!("{error}; Slurm loaded the node definitions file again"),
            Err(e) => {
                // Held either way; the admin needs to know which Slurm has.
                let what = if e.may_have_taken_effect() {
                    "whether Slurm loaded its previous node definitions is unknown"
                } else {
                    "Slurm did not load its previous node definitions"
                };
                let msg = format!("{error}; {what}: {:#}", anyhow::Error::new(e));
                self.fail(report, format!("gen {}: {msg}", b.generation));
                msg
            }
        };
        log::info!("gen {}: {error}", b.generation);
        b.slurm = SlurmStep::Restored { error };
    }

    /// The ledger could not record the step `nodes` were about to take: they go back
    /// (their agents put the GPUs, gres.conf and slurmd as they were) and into service.
    fn revert_unrecorded(&mut self, b: &mut Batch, nodes: &[String], report: &mut CycleReport) {
        for node in nodes {
            let error = "the re-layout ledger cannot be written".to_string();
            self.revert_node(b, node, error, false, report);
        }
    }

    /// Asks `node` to go back to where the generation began; with `hold` it stays drained
    /// afterwards.
    fn revert(
        &mut self,
        b: &mut Batch,
        node: &str,
        rec: &SlurmNode,
        error: String,
        hold: bool,
        report: &mut CycleReport,
    ) {
        self.fail(
            report,
            format!("gen {} {node}: {error}; reverting the node", b.generation),
        );
        self.enter(b, node, NodeState::Reverting { error, hold });
        self.save_ledger_with(b, report);
        let d = self.desired(b, node, Phase::Revert);
        if let Err(e) = self.ask(rec, &d) {
            log::error!(
                "gen {} {node}: cannot ask for Revert: {e} (retried until the timeout)",
                b.generation
            );
        }
    }

    /// Leaves `node` drained with a reason naming `why` (unless someone else drained it).
    fn hold(&mut self, b: &mut Batch, node: &str, rec: &SlurmNode, why: String, report: &mut CycleReport) {
        // The held reason takes the place of slurmctld's refusal: keep what it said, first
        // (a held reason is cut short).
        let why = match rec.reason.as_deref() {
            Some(r) if rec.drain && is_gpu_refusal(r) && !why.contains(r) => {
                format!("slurmctld: {r}; {why}")
            }
            _ => why,
        };
        self.fail(
            report,
            format!("gen {} {node}: {why}; the node stays drained", b.generation),
        );
        if rec.drain && !still_ours(rec.reason.as_deref(), b.generation) {
            let reason = rec.reason.clone().unwrap_or_default();
            return self.close(b, node, Closed::LeftDrained { reason }, report);
        }
        self.set_held(b, node, held_reason(b.generation, &why), report);
    }

    /// Sets the held reason on `node` and closes it; while slurmctld refuses the update
    /// the node stays `Holding` (still drained for the generation, which a later central
    /// role would take for an unfinished re-layout and might resume) and it is tried
    /// again each cycle.
    fn set_held(&mut self, b: &mut Batch, node: &str, reason: String, report: &mut CycleReport) {
        let u = NodeUpdate {
            node: node.to_string(),
            drain: Some(reason.clone()),
            ..NodeUpdate::default()
        };
        match self.api.update_node(&u) {
            Ok(()) => self.close(b, node, Closed::Held { reason }, report),
            Err(e) => {
                self.fail(
                    report,
                    format!(
                        "gen {} {node}: cannot set the drain reason `{reason}`: {e}; trying again",
                        b.generation
                    ),
                );
                if !matches!(b.nodes[node].state, NodeState::Holding { .. }) {
                    self.enter(b, node, NodeState::Holding { reason });
                }
            }
        }
    }

    /// Resumes `node` if it is still drained for this generation (never a drain someone
    /// else set meanwhile): with the generation's reason, or with slurmctld's GPU refusal
    /// in its place once slurmctld takes the node's registration again.
    fn resume(
        &mut self,
        b: &mut Batch,
        node: &str,
        rec: &SlurmNode,
        outcome: String,
        report: &mut CycleReport,
    ) {
        if !rec.drain {
            return self.close(b, node, Closed::Resumed { outcome }, report);
        }
        if !still_ours(rec.reason.as_deref(), b.generation) {
            let reason = rec.reason.clone().unwrap_or_default();
            log::info!("{node}: drained by someone else meanwhile ({reason}); left drained");
            return self.close(b, node, Closed::LeftDrained { reason }, report);
        }
        let waited = unix_now() - b.nodes[node].since;
        // slurmctld's GPU refusal in place of the generation's reason (24.11): a
        // registration slurmd sent before Slurm's refresh reached it, with the layouts the
        // node had. slurmd sends it before the reconfigure's re-exec (which waits for its
        // calls to end), so the reconfigured slurmd's registration, taken, follows it.
        let refusal = !is_ours(rec.reason.as_deref(), b.generation);
        // Not taken since: INVAL (slurmctld refuses a resume then), or, after a refusal,
        // not heard from (a restart of slurmctld keeps no INVAL) or down. Held once the
        // wait is over, for an admin (and the registration asks between batches).
        if rec.invalid_reg || (refusal && (rec.silent || rec.down)) {
            if waited <= self.report_timeout_s() {
                log::info!("{node}: slurmctld has not taken a registration of the node yet; checking again next cycle");
                return;
            }
            let reason = rec.reason.as_deref().unwrap_or_default();
            let why = if !refusal {
                "slurmctld refuses the node's registration (INVAL; see slurmctld.log)".to_string()
            } else if rec.invalid_reg {
                format!("slurmctld refuses the node's registration: {reason}")
            } else {
                format!("slurmctld refused the node's registration ({reason}) and has not taken one since")
            };
            return self.hold(b, node, rec, why, report);
        }
        if refusal {
            log::warn!(
                "{node}: slurmctld refused a registration during the re-layout ({}): one its slurmd sent before Slurm's refresh reached it; it has taken one since, so the node resumes",
                rec.reason.as_deref().unwrap_or_default()
            );
        }
        let u = NodeUpdate {
            node: node.to_string(),
            resume: true,
            ..NodeUpdate::default()
        };
        match self.api.update_node(&u) {
            Ok(()) => self.close(b, node, Closed::Resumed { outcome }, report),
            // slurmctld 22.05 clears the drain flag and then refuses a node whose state is
            // still UNKNOWN (slurmd not registered yet): the next cycle reads it again. A
            // refusal that lasts is an error an admin sees (the batch waits for it).
            Err(e) if waited > self.report_timeout_s() => self.fail(
                report,
                format!(
                    "gen {} {node}: resume refused: {e}; trying again each cycle",
                    b.generation
                ),
            ),
            Err(e) => log::info!("resume {node}: slurmctld answered `{e}`; checking again next cycle"),
        }
    }

    fn close(&mut self, b: &mut Batch, node: &str, how: Closed, report: &mut CycleReport) {
        if let Closed::Resumed { .. } = how {
            report.nodes.push(node.to_string());
        }
        let outcome = match &how {
            Closed::Resumed { outcome } => outcome.clone(),
            Closed::Held { reason } => format!("failed: {reason}"),
            Closed::LeftDrained { reason } => format!("left drained by someone else ({reason})"),
            Closed::Skipped { why } => format!("skip: {why}"),
            Closed::Gone { why } => format!("failed: {why}"),
        };
        let lines = b.nodes[node].lines.clone();
        let now = unix_now();
        self.status.decided(
            lines
                .into_iter()
                .map(|(gpu, from, to)| super::status::DecisionLine {
                    at: now,
                    generation: b.generation,
                    gpu,
                    from,
                    to,
                    action: outcome.clone(),
                })
                .collect(),
        );
        self.enter(b, node, NodeState::Closed(how));
        self.status.pending_transitions.remove(node);
    }

    fn report_timeout_s(&self) -> f64 {
        self.resolved.config.controller.central.report_timeout_s
    }
}

/// The target GPUs a report shows outside their `from` layouts, in words (None: all back).
fn not_rolled_back(r: &Report, t: &NodeTxn) -> Option<String> {
    let stray: Vec<String> = t
        .targets
        .iter()
        .filter_map(|g| {
            let now = r
                .gpus
                .iter()
                .find(|a| a.index == g.index)
                .map(|a| a.layout.as_str());
            (now != Some(g.from.as_str())).then(|| {
                format!(
                    "GPU {} has `{}`, not `{}`",
                    g.index,
                    now.unwrap_or("nothing"),
                    g.from
                )
            })
        })
        .collect();
    (!stray.is_empty()).then(|| stray.join(", "))
}

/// Whether a report can be trusted for `t`: GPUs readable, the same GPU set as planned.
fn checked(r: &Report, t: &NodeTxn) -> Result<(), Untrusted> {
    let reported = r.gpu_set().map_err(Untrusted::Unreadable)?;
    let mut planned = t.gpu_set.clone();
    planned.sort();
    if reported != planned {
        return Err(Untrusted::GpuSetChanged { reported, planned });
    }
    Ok(())
}
