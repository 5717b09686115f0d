//! From a decision to a batch: which GPUs change (only idle instances are destroyed; on a
//! node with running jobs every busy device keeps its Slurm index and the node keeps its
//! instance count), which wait (a target must persist, the allow-lists, the batch size),
//! and the batch itself.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use smartmig_core::config::Mode;
use smartmig_core::mig::{Instance, Layout, Plan};

use super::batch::{Batch, NodeState, NodeTxn, SlurmStep};
use super::decide::Decision;
use super::indices::Moved;
use super::status::DecisionLine;
use super::view::{NodeView, View};
use super::Central;
use crate::channel::GpuTarget;

/// One GPU that should change, with its plan.
#[derive(Debug, Clone)]
pub struct Change {
    /// Position in `View::gpus`.
    pub gpu: usize,
    /// Target configuration index.
    pub target: usize,
    /// The driver steps.
    pub plan: Plan,
}

/// Why a GPU the policy wants changed is left as it is this cycle.
#[derive(Debug, Clone, PartialEq)]
pub enum Wait {
    /// The change destroys these busy instances.
    Busy(String),
    /// Slurm 22.05 requeues running jobs when their node's GPU count changes.
    CountChange,
    /// A running job's device index would name another device after the change.
    IndexShift(String),
    /// The target has not been chosen often enough in a row yet.
    Persist {
        /// Cycles so far.
        seen: u32,
        /// Cycles needed.
        need: u32,
    },
    /// The node is outside `[controller.central] nodes` / `partitions`.
    NotAllowed,
    /// More nodes want a change than one batch may take.
    BatchFull,
    /// The node is drained by someone else.
    DrainedByOthers,
    /// The node is not in the re-layout path's node file, or similar.
    Unrefreshable(String),
    /// With padding, the node's instances afterwards would not fit its blocks.
    Unpaddable(String),
    /// Before Slurm 23.02.6: the node has the last GPU of a type that jobs the plugin
    /// routed wait for, and Slurm cannot re-route them (`strand`).
    LastOfType {
        /// The type.
        gpu_type: String,
        /// The routed jobs that ask for it.
        jobs: Vec<u32>,
    },
    /// Preempt mode, but the change would stop jobs it may not requeue (Slurm cannot, or
    /// they have run longer than `requeue_max_run_s`): it waits as in drain mode.
    Held {
        /// Which jobs and why: `Slurm cannot requeue job 12, 15: interactive, --no-requeue or federated`.
        jobs: String,
        /// The drain-mode rule that holds the change.
        why: Box<Wait>,
    },
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::Busy(insts) => write!(f, "skip: busy {insts}"),
            Wait::CountChange => write!(f, "skip: the node's GPU count would change under running jobs"),
            Wait::IndexShift(why) => write!(f, "skip: {why}"),
            Wait::Persist { seen, need } => write!(f, "wait: target chosen {seen} of {need} cycles in a row"),
            Wait::NotAllowed => write!(f, "skip: node outside [controller.central] nodes/partitions"),
            Wait::BatchFull => write!(f, "wait: batch full ([controller.central] max_nodes_per_batch)"),
            Wait::DrainedByOthers => write!(f, "skip: node drained by an admin"),
            Wait::Unrefreshable(why) => write!(f, "skip: {why}"),
            Wait::Unpaddable(e) => write!(f, "skip: cannot be padded ({e})"),
            Wait::LastOfType { gpu_type, jobs } => write!(
                f,
                "wait: the last {gpu_type} of the cluster; routed job(s) {} wait for it and Slurm before 23.02.6 cannot re-route them",
                ids(jobs)
            ),
            Wait::Held { jobs, why } => write!(f, "{why} ({jobs})"),
        }
    }
}

/// A GPU left alone this cycle: its position in `View::gpus`, its target, and why.
#[derive(Debug, Clone)]
pub struct Skipped {
    /// Position in `View::gpus`.
    pub gpu: usize,
    /// Target configuration index.
    pub target: usize,
    /// Why.
    pub why: Wait,
}

impl Central {
    /// Decides and plans on `view` without touching anything: the changes a cycle would
    /// make, and the GPUs it leaves alone. Also the decision step of the benchmark.
    pub fn plan(&mut self, view: &View, now: f64) -> (Decision, Vec<Change>, Vec<Skipped>) {
        let decision = self.decider.decide(&self.resolved, view, now);
        let driver = self.resolved.config.gpu.driver;
        let (mut changes, mut skipped) = (Vec::new(), Vec::new());
        // GPUs share few layouts: plan each (model, layout, target) once.
        let mut plans: HashMap<(usize, &Layout, usize), Option<Plan>> = HashMap::new();
        for (g, target) in decision.targets.iter().enumerate() {
            let Some(t) = *target else { continue };
            let gpu = &view.gpus[g];
            if gpu.config == Some(t) {
                continue;
            }
            let rm = &self.resolved.models[gpu.model];
            let plan = plans.entry((gpu.model, &gpu.layout, t)).or_insert_with(|| {
                Plan::between(&rm.model, driver, &gpu.layout, &rm.configurations[t].layout).ok()
            });
            let Some(plan) = plan.clone() else {
                continue;
            };
            let touched: Vec<Instance> = plan.touched(&gpu.busy).copied().collect();
            // Preempt mode requeues the jobs on them, unless it may not.
            let held: Vec<Instance> = match self.mode {
                Mode::Preempt => touched.into_iter().filter(|i| self.held(view, g, i)).collect(),
                _ => touched,
            };
            if held.is_empty() {
                changes.push(Change {
                    gpu: g,
                    target: t,
                    plan,
                });
            } else {
                let why = self.node_wait(view, &gpu.node, Wait::Busy(self.instances(view, g, &held)));
                skipped.push(Skipped {
                    gpu: g,
                    target: t,
                    why,
                });
            }
        }
        let changes = self.node_rules(view, changes, &mut skipped);
        (decision, changes, skipped)
    }

    /// The rules for nodes with running jobs, in drain mode and in preempt mode on nodes
    /// that run a job Slurm cannot requeue: every busy device keeps its Slurm index and the
    /// node keeps its GPU count (preempt mode requeues the jobs instead: `transaction`).
    /// Applied to the planned changes and again to those the limits leave (persistence may
    /// hold back one GPU of a node, and the rest alone may break a rule the whole set kept).
    fn node_rules(&self, view: &View, changes: Vec<Change>, skipped: &mut Vec<Skipped>) -> Vec<Change> {
        let changes = self.keep_paddable(view, changes, skipped);
        let (preempting, ruled): (Vec<Change>, Vec<Change>) = changes
            .into_iter()
            .partition(|c| self.preempts(view, &view.gpus[c.gpu].node));
        let ruled = self.keep_indices(view, ruled, skipped);
        let mut kept = self.keep_count(view, ruled, skipped);
        kept.extend(preempting);
        kept
    }

    /// Whether `node`'s running jobs are requeued for a change without the drain-mode
    /// rules: preempt mode, and it may requeue each of them (a node running one it may not
    /// keeps that job's instance, device index and the node's GPU count as in drain mode).
    pub(super) fn preempts(&self, view: &View, node: &str) -> bool {
        self.mode == Mode::Preempt && view.node(node).is_none_or(|n| !n.holds_any())
    }

    /// Whether busy instance `inst` of GPU `g` runs a job preempt mode may not requeue (an
    /// instance whose jobs Slurm does not name counts as such).
    pub(super) fn held(&self, view: &View, g: usize, inst: &Instance) -> bool {
        let gpu = &view.gpus[g];
        let Some(nv) = view.node(&gpu.node) else {
            return false;
        };
        match gpu.busy.iter().position(|b| b == inst).map(|k| &gpu.jobs[k]) {
            Some(jobs) => jobs.is_empty() || jobs.iter().any(|&j| nv.holds(j)),
            None => false,
        }
    }

    /// `why` as said for `node`: in preempt mode a drain-mode rule holds a change only
    /// because the node runs jobs it may not requeue, and the message names them.
    fn node_wait(&self, view: &View, node: &str, why: Wait) -> Wait {
        match view.node(node) {
            Some(n) if self.mode == Mode::Preempt && n.holds_any() => Wait::Held {
                jobs: self.held_jobs(n),
                why: Box::new(why),
            },
            _ => why,
        }
    }

    /// The jobs of `nv` preempt mode may not requeue, and why.
    pub(super) fn held_jobs(&self, nv: &NodeView) -> String {
        let mut parts = Vec::new();
        if !nv.unrequeueable.is_empty() {
            parts.push(format!(
                "Slurm cannot requeue job {}: interactive, --no-requeue or federated",
                ids(&nv.unrequeueable)
            ));
        }
        if !nv.long_running.is_empty() {
            let max = self
                .resolved
                .config
                .controller
                .central
                .requeue_max_run_s
                .unwrap_or(0.0);
            parts.push(format!(
                "job {} ran longer than requeue_max_run_s = {max} s",
                ids(&nv.long_running)
            ));
        }
        parts.join("; ")
    }

    /// The planned changes node by node: (GPU position in `View::gpus`, target layout).
    fn after_by_node<'a>(
        &'a self,
        view: &'a View,
        changes: &[Change],
    ) -> BTreeMap<&'a str, Vec<(usize, &'a Layout)>> {
        let mut after: BTreeMap<&str, Vec<(usize, &Layout)>> = BTreeMap::new();
        for c in changes {
            let rm = &self.resolved.models[view.gpus[c.gpu].model];
            after
                .entry(view.gpus[c.gpu].node.as_str())
                .or_default()
                .push((c.gpu, &rm.configurations[c.target].layout));
        }
        after
    }

    /// With padding: keeps the changes of nodes whose instances afterwards fit their blocks
    /// (a GPU kept in a layout outside the configurations can hold more of a type than its
    /// block); the others join `skipped`, since the agent would refuse the re-layout.
    fn keep_paddable(&self, view: &View, changes: Vec<Change>, skipped: &mut Vec<Skipped>) -> Vec<Change> {
        let after = self.after_by_node(view, &changes);
        let over: BTreeMap<&str, String> = after
            .iter()
            .filter_map(|(n, a)| {
                let nv = view.node(n)?;
                let e = self.over_block(view, nv, a, &self.blocks(view, nv))?;
                Some((*n, e.to_string()))
            })
            .collect();
        let mut changes = changes;
        changes.retain(|c| match over.get(view.gpus[c.gpu].node.as_str()) {
            Some(e) => {
                skipped.push(Skipped {
                    gpu: c.gpu,
                    target: c.target,
                    why: Wait::Unpaddable(e.clone()),
                });
                false
            }
            None => true,
        });
        changes
    }

    /// Keeps the changes of nodes without running jobs, and those that keep their node's
    /// GPU count; the others join `skipped`. Slurm 22.05 requeues (or, when it cannot,
    /// kills) a running job when its node's GPU count changes at the restart
    /// (`_validate_node_gres_cnt`; 24.11 too): such changes wait for the node to be idle.
    fn keep_count(&self, view: &View, changes: Vec<Change>, skipped: &mut Vec<Skipped>) -> Vec<Change> {
        let after = self.after_by_node(view, &changes);
        // Slurm compares the node's total GPU count (padding records keep it).
        let blocked: HashSet<&str> = after
            .iter()
            .filter(|(n, a)| {
                view.node(n)
                    .is_some_and(|nv| self.count_changes(view, nv, a, &self.blocks(view, nv)))
            })
            .map(|(n, _)| *n)
            .collect();
        let mut changes = changes;
        changes.retain(|c| {
            let node = view.gpus[c.gpu].node.as_str();
            let keep = !blocked.contains(node);
            if !keep {
                skipped.push(Skipped {
                    gpu: c.gpu,
                    target: c.target,
                    why: self.node_wait(view, node, Wait::CountChange),
                });
            }
            keep
        });
        changes
    }

    /// Drain mode: keeps, node by node and GPU by GPU, only the changes after which every
    /// busy device keeps its Slurm index; the others join `skipped` (preempt mode requeues
    /// the jobs whose index would move instead: `transaction`). Slurm keeps a running
    /// job's device indices (`IDX`) across a re-layout: a change that puts another device
    /// at a busy one's index would let Slurm hand the job's device to the next job of that
    /// type.
    fn keep_indices(&self, view: &View, changes: Vec<Change>, skipped: &mut Vec<Skipped>) -> Vec<Change> {
        let mut by_node: BTreeMap<&str, Vec<Change>> = BTreeMap::new();
        for c in changes {
            by_node.entry(view.gpus[c.gpu].node.as_str()).or_default().push(c);
        }
        let mut kept = Vec::new();
        for (node, changes) in by_node {
            let Some(nv) = view.node(node) else {
                kept.extend(changes);
                continue;
            };
            let mut accepted: Vec<Change> = Vec::new();
            for c in changes {
                accepted.push(c);
                let after: Vec<(usize, &Layout)> = accepted
                    .iter()
                    .map(|c| {
                        let rm = &self.resolved.models[view.gpus[c.gpu].model];
                        (c.gpu, &rm.configurations[c.target].layout)
                    })
                    .collect();
                // Preempt mode requeues the jobs whose index moves, unless it may not.
                let held = |m: &&Moved| {
                    self.mode != Mode::Preempt || m.jobs.is_empty() || m.jobs.iter().any(|&j| nv.holds(j))
                };
                let why = match self.moved(view, nv, &after, &self.blocks(view, nv)) {
                    Ok(moved) => moved.iter().find(held).map(|m| m.to_string()),
                    Err(e) => Some(e.to_string()),
                };
                if let Some(why) = why {
                    let c = accepted.pop().expect("pushed above");
                    skipped.push(Skipped {
                        gpu: c.gpu,
                        target: c.target,
                        why: self.node_wait(view, node, Wait::IndexShift(why)),
                    });
                }
            }
            kept.extend(accepted);
        }
        kept
    }

    /// Applies the limits that hold back changes: allow-lists, persistence, nodes drained
    /// by others, the re-layout path's own check and the batch size. Returns the changes
    /// of the batch, by node; the others join `skipped`.
    pub(super) fn limit(
        &mut self,
        view: &View,
        changes: Vec<Change>,
        skipped: &mut Vec<Skipped>,
    ) -> BTreeMap<String, Vec<Change>> {
        let targets: BTreeMap<String, usize> = changes
            .iter()
            .map(|c| (view.gpus[c.gpu].key(), c.target))
            .collect();
        let streak = self.guard.persist(&targets);
        let need = self.guard.persist_cycles();
        let mut passed = Vec::new();
        for c in changes {
            let gpu = &view.gpus[c.gpu];
            let rec = view.record(&gpu.node);
            let why = if rec.is_some_and(|n| !self.guard.allows(n)) {
                Some(Wait::NotAllowed)
            } else if rec.is_some_and(|n| n.drain || n.down) {
                Some(Wait::DrainedByOthers)
            } else {
                let seen = streak.get(&gpu.key()).copied().unwrap_or(0);
                (seen < need).then_some(Wait::Persist { seen, need })
            };
            match why {
                Some(why) => skipped.push(Skipped {
                    gpu: c.gpu,
                    target: c.target,
                    why,
                }),
                None => passed.push(c),
            }
        }
        let mut by_node: BTreeMap<String, Vec<Change>> = BTreeMap::new();
        for c in self.node_rules(view, passed, skipped) {
            by_node.entry(view.gpus[c.gpu].node.clone()).or_default().push(c);
        }
        let names: Vec<String> = by_node.keys().cloned().collect();
        for node in names {
            if let Err(e) = self.relayout.check(std::slice::from_ref(&node)) {
                let why = Wait::Unrefreshable(e.to_string());
                for c in by_node.remove(&node).unwrap_or_default() {
                    skipped.push(Skipped {
                        gpu: c.gpu,
                        target: c.target,
                        why: why.clone(),
                    });
                }
            }
        }
        self.keep_routed_types(view, &mut by_node, skipped);
        // The nodes with the most GPUs to change go first; the rest wait for a later batch.
        let mut order: Vec<(usize, String)> = by_node.iter().map(|(n, c)| (c.len(), n.clone())).collect();
        order.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        for (_, node) in order.into_iter().skip(self.guard.max_nodes()) {
            for c in by_node.remove(&node).unwrap_or_default() {
                skipped.push(Skipped {
                    gpu: c.gpu,
                    target: c.target,
                    why: Wait::BatchFull,
                });
            }
        }
        by_node
    }

    /// A new batch of `by_node` changes (every node Draining).
    pub(super) fn new_batch(
        &mut self,
        view: &View,
        by_node: BTreeMap<String, Vec<Change>>,
        generation: u64,
        now: f64,
        slurmd_budget_s: f64,
    ) -> Batch {
        let mut nodes = BTreeMap::new();
        for (node, changes) in by_node {
            let nv = view.node(&node).expect("changes are on managed nodes");
            let targets = changes
                .iter()
                .map(|c| {
                    let gpu = &view.gpus[c.gpu];
                    let rm = &self.resolved.models[gpu.model];
                    GpuTarget {
                        index: gpu.index,
                        model: rm.model.name.clone(),
                        from: gpu.layout.display(&rm.model).to_string(),
                        to: rm.configurations[c.target].layout.display(&rm.model).to_string(),
                    }
                })
                .collect();
            let lines = changes
                .iter()
                .map(|c| {
                    let l = self.line(view, c.gpu, c.target, generation, now, String::new());
                    (l.gpu, l.from, l.to)
                })
                .collect();
            let gpu_set = nv
                .report
                .gpus
                .iter()
                .map(|g| (g.index, g.model.clone()))
                .collect();
            nodes.insert(
                node,
                NodeTxn {
                    state: NodeState::Draining,
                    since: now,
                    targets,
                    gpu_set,
                    old_gres: nv.slurm.gres.clone(),
                    lines,
                    padding: self.blocks(view, nv),
                    order: Vec::new(),
                },
            );
        }
        Batch {
            generation,
            started_at: now,
            nodes,
            slurm: SlurmStep::Untouched,
            slurmd_budget_s,
        }
    }

    /// `node/gpu 4g.20gb@0 3g.20gb@4` for instances of GPU `g`.
    pub(super) fn instances(&self, view: &View, g: usize, insts: &[Instance]) -> String {
        let model = &self.resolved.models[view.gpus[g].model].model;
        insts
            .iter()
            .map(|i| smartmig_core::mig::layout::display_instance(model, i))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A decision line for GPU `g` going to configuration `t`.
    pub(super) fn line(
        &self,
        view: &View,
        g: usize,
        t: usize,
        generation: u64,
        at: f64,
        action: String,
    ) -> DecisionLine {
        let gpu = &view.gpus[g];
        let rm = &self.resolved.models[gpu.model];
        DecisionLine {
            at,
            generation,
            gpu: gpu.key(),
            from: gpu.config.map_or_else(
                || gpu.layout.display(&rm.model).to_string(),
                |c| rm.configurations[c].name.clone(),
            ),
            to: rm.configurations[t].name.clone(),
            action,
        }
    }
}

/// `10, 12` for job ids.
pub(super) fn ids(jobs: &[u32]) -> String {
    jobs.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}
