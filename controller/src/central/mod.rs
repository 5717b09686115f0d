//! The central role (`smartmigd central`): a reconcile loop on the Slurm controller host.
//!
//! Each cycle reads Slurm's GPU jobs and nodes, decides a target configuration per GPU
//! ([`decide`]), keeps only transitions that touch idle instances, drains the changing
//! nodes in Slurm (reason `smartmig: repartition gen N`) so no new job lands on an
//! instance about to change, re-checks idleness after the drain, hands the plans to the
//! node agents (Desired in the node's `Extra`), waits for their reports (`Comment`),
//! makes Slurm see the new layouts once for the whole batch ([`relayout`]), lets the
//! agents restart slurmd, resumes the nodes, re-routes pending jobs whose type vanished
//! and publishes the snapshot the plugin reads. An error on one node never stops the
//! loop; each is logged and kept in the status file.

pub mod decide;
#[doc(hidden)]
pub mod fake;
pub mod metrics;
pub mod reconfigure;
pub mod relayout;
pub mod run;
pub mod status;
pub mod view;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use smartmig_core::config::{Mode, Resolved};
use smartmig_core::mig::{Instance, Layout, Plan};
use smartmig_core::routing::{
    Job as RouteJob, Outcome as RouteOutcome, Router, Snapshot, TresStrings, TypeState, SNAPSHOT_VERSION,
};

use crate::channel::{Desired, GpuTarget, Outcome, Phase, CHANNEL_VERSION};
use crate::slurm::{parse_gres, read_desired, read_report, write_desired, NodeUpdate, SlurmApi, SlurmError};
use decide::{Decider, Decision};
use relayout::{write_atomically, Relayout};
use status::{DecisionLine, GpuLine, Status};
use view::View;

/// Horizon of the snapshot's `soon_free`, seconds.
pub const SOON_FREE_S: f64 = 300.0;

/// The drain reason of a re-layout; the prefix marks nodes smartmig drained.
pub const DRAIN_PREFIX: &str = "smartmig: repartition gen ";

/// Unix seconds now.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A GPU left alone because its change destroys busy instances: (GPU, target, the busy
/// instances it would destroy).
pub type Busy = (usize, usize, String);

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

/// What one cycle did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CycleReport {
    /// GPUs whose configuration the policy wanted to change.
    pub wanted: usize,
    /// GPUs changed (or, in dry-run, that would be).
    pub changed: usize,
    /// GPUs left alone because the change touches busy instances.
    pub skipped_busy: usize,
    /// Nodes re-laid out.
    pub nodes: Vec<String>,
    /// Pending jobs re-routed.
    pub rerouted: usize,
    /// Errors met (also in the status file).
    pub errors: Vec<String>,
}

/// The central role's state between cycles.
pub struct Central {
    pub(crate) resolved: Resolved,
    api: Box<dyn SlurmApi>,
    decider: Decider,
    relayout: Box<dyn Relayout>,
    router: Option<Router>,
    mode: Mode,
    /// The status written after each cycle.
    pub status: Status,
    last_config: BTreeMap<String, (f64, String)>,
    poll: Duration,
    /// Nodes parsed in earlier reads of Slurm's state, reused while unchanged.
    pub(crate) node_cache: view::NodeCache,
}

impl Central {
    /// A central role over `api`, deciding with `decider` and refreshing Slurm with `relayout`.
    pub fn new(
        resolved: Resolved,
        api: Box<dyn SlurmApi>,
        decider: Decider,
        relayout: Box<dyn Relayout>,
        mode: Mode,
    ) -> Central {
        let router = match Router::from_resolved(&resolved) {
            Ok(r) => Some(r),
            Err(e) => {
                log::error!("re-routing disabled: {e}");
                None
            }
        };
        let status = Status {
            mode: mode_name(mode).into(),
            ..Status::default()
        };
        Central {
            resolved,
            api,
            decider,
            relayout,
            router,
            mode,
            status,
            last_config: BTreeMap::new(),
            poll: Duration::from_millis(250),
            node_cache: view::NodeCache::default(),
        }
    }

    /// How often to poll for reports (tests shorten it).
    pub fn with_poll(mut self, poll: Duration) -> Central {
        self.poll = poll;
        self
    }

    /// The Slurm API (tests inspect the fake through it).
    pub fn api(&mut self) -> &mut dyn SlurmApi {
        self.api.as_mut()
    }

    fn fail(&mut self, report: &mut CycleReport, message: String) {
        log::error!("{message}");
        self.status.error(unix_now(), message.clone());
        report.errors.push(message);
    }

    fn read_view(&mut self) -> Result<View, SlurmError> {
        let nodes = self.api.nodes()?;
        let jobs = self.api.jobs()?;
        Ok(View::build(&self.resolved, nodes, jobs, &mut self.node_cache))
    }

    /// Runs one cycle; Slurm errors end the cycle early (logged, kept in the status).
    pub fn cycle(&mut self) -> CycleReport {
        let mut report = CycleReport::default();
        self.status.cycles += 1;
        match self.read_view() {
            Ok(view) => self.reconcile(view, &mut report),
            Err(e) => self.fail(&mut report, format!("cannot read Slurm's state: {e}")),
        }
        self.status.updated_at = unix_now();
        let dir = self.resolved.config.controller.state_dir.clone();
        if let Err(e) = self.status.write(&dir) {
            log::error!("cannot write the status file in {}: {e}", dir.display());
        }
        report
    }

    /// Decides and plans on `view` without touching anything: the changes a cycle would
    /// make, and the busy GPUs it would skip. Also the decision step of the benchmark.
    pub fn plan(&mut self, view: &View, now: f64) -> (Decision, Vec<Change>, Vec<Busy>) {
        let decision = self.decider.decide(&self.resolved, view, now);
        let driver = self.resolved.config.gpu.driver;
        let (mut changes, mut busy) = (Vec::new(), Vec::new());
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
            if touched.is_empty() {
                changes.push(Change {
                    gpu: g,
                    target: t,
                    plan,
                });
            } else {
                busy.push((g, t, format!("skip: busy {}", self.instances(view, g, &touched))));
                if self.mode == Mode::Preempt {
                    changes.push(Change {
                        gpu: g,
                        target: t,
                        plan,
                    });
                }
            }
        }
        // Slurm 22.05 kills a running job when its node's GPU count changes at the restart
        // (`_validate_node_gres_cnt`): on nodes with running jobs only count-preserving
        // changes go ahead; the others wait for the node to be idle.
        if self.mode != Mode::Preempt {
            let mut delta: HashMap<&str, i64> = HashMap::new();
            for c in &changes {
                *delta.entry(view.gpus[c.gpu].node.as_str()).or_default() +=
                    c.plan.create.len() as i64 - c.plan.destroy.len() as i64;
            }
            let has_jobs: HashSet<&str> = view
                .gpus
                .iter()
                .filter(|g| !g.busy.is_empty())
                .map(|g| g.node.as_str())
                .collect();
            let blocked: HashSet<String> = delta
                .iter()
                .filter(|(n, d)| **d != 0 && has_jobs.contains(*n))
                .map(|(n, _)| n.to_string())
                .collect();
            changes.retain(|c| {
                let node = &view.gpus[c.gpu].node;
                if blocked.contains(node) {
                    busy.push((
                        c.gpu,
                        c.target,
                        "skip: the node's GPU count would change under running jobs".into(),
                    ));
                    return false;
                }
                true
            });
        }
        (decision, changes, busy)
    }

    fn reconcile(&mut self, mut view: View, report: &mut CycleReport) {
        if self.mode != Mode::DryRun {
            let left = self.leftovers(&view, report);
            if !left.is_empty() {
                let generation = view.max_generation.max(self.status.generation) + 1;
                self.status.generation = generation;
                log::info!(
                    "gen {generation}: finishing the re-layout an earlier cycle left on {:?}",
                    left.keys().collect::<Vec<_>>()
                );
                let back = self.finish(&view, generation, &left, report);
                report.nodes.extend(back);
                view = match self.read_view() {
                    Ok(v) => v,
                    Err(e) => return self.fail(report, format!("cannot re-read Slurm's state: {e}")),
                };
            }
        }
        let now = unix_now();
        self.account_time(&view, now);
        for (node, why) in &view.problems {
            let msg = format!("node {node} left alone: {why}");
            self.fail(report, msg);
        }
        let (decision, changes, busy) = self.plan(&view, now);
        for (m, s) in decision.sources.iter().enumerate() {
            let text = match s {
                decide::Source::Onnx { file } => format!("onnx {file}"),
                decide::Source::Fixed { why } => why.clone(),
                decide::Source::None => "none".into(),
            };
            self.status
                .sources
                .insert(self.resolved.models[m].model.key.clone(), text);
        }
        report.wanted = changes.len() + if self.mode == Mode::Preempt { 0 } else { busy.len() };
        report.skipped_busy = busy.len();
        let generation = view.max_generation.max(self.status.generation) + 1;
        let dry = self.mode == Mode::DryRun;
        let mut lines = Vec::new();
        for (g, t, what) in &busy {
            if self.mode == Mode::Preempt {
                continue;
            }
            let what = what.clone();
            let action = if dry { format!("would {what}") } else { what };
            lines.push(self.line(&view, *g, *t, if dry { 0 } else { generation }, now, action));
        }
        if dry {
            for c in &changes {
                let busy_now = !c
                    .plan
                    .touched(&view.gpus[c.gpu].busy)
                    .collect::<Vec<_>>()
                    .is_empty();
                let action = if busy_now {
                    "would preempt and apply"
                } else {
                    "would apply"
                };
                lines.push(self.line(&view, c.gpu, c.target, 0, now, action.into()));
            }
            report.changed = changes.len();
            for l in &lines {
                log::info!("dry-run: {} {} -> {}: {}", l.gpu, l.from, l.to, l.action);
            }
            self.status.decided(lines);
            self.status.gpus = gpu_lines(&self.resolved, &view);
            return;
        }
        self.status.decided(lines);
        if !changes.is_empty() {
            self.status.generation = generation;
            self.apply(&view, changes, generation, now, report);
        }
        // Re-read: the layouts Slurm has now, for re-routing and the snapshot.
        match self.read_view() {
            Ok(after) => {
                self.reroute(&after, report);
                self.publish(&after, report);
                self.status.gpus = gpu_lines(&self.resolved, &after);
            }
            Err(e) => self.fail(report, format!("cannot re-read Slurm's state: {e}")),
        }
    }

    fn instances(&self, view: &View, g: usize, insts: &[Instance]) -> String {
        let model = &self.resolved.models[view.gpus[g].model].model;
        insts
            .iter()
            .map(|i| smartmig_core::mig::layout::display_instance(model, i))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn line(
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
            gpu: format!("{}/{}", gpu.node, gpu.index),
            from: gpu.config.map_or_else(
                || gpu.layout.display(&rm.model).to_string(),
                |c| rm.configurations[c].name.clone(),
            ),
            to: rm.configurations[t].name.clone(),
            action,
        }
    }

    /// Drain, re-check, Apply, re-layout, StartSlurmd, resume.
    fn apply(
        &mut self,
        view: &View,
        changes: Vec<Change>,
        generation: u64,
        now: f64,
        report: &mut CycleReport,
    ) {
        let reason = format!("{DRAIN_PREFIX}{generation}");
        // Nodes drained by someone else are left alone.
        let mut by_node: BTreeMap<String, Vec<Change>> = BTreeMap::new();
        let node_index: HashMap<&str, usize> = view
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        for c in changes {
            let node = &view.gpus[c.gpu].node;
            let nv = node_index.get(node.as_str()).map(|&i| &view.nodes[i]);
            let foreign = nv.is_some_and(|n| {
                n.slurm.drain && !n.slurm.reason.as_deref().unwrap_or("").starts_with(DRAIN_PREFIX)
            });
            if foreign {
                let l = self.line(
                    view,
                    c.gpu,
                    c.target,
                    generation,
                    now,
                    "skip: node drained by an admin".into(),
                );
                self.status.decided(vec![l]);
                continue;
            }
            by_node.entry(node.clone()).or_default().push(c);
        }
        if by_node.is_empty() {
            return;
        }
        // 1. Keep new jobs off the changing instances: drain the nodes.
        let mut drained = Vec::new();
        for node in by_node.keys() {
            self.status
                .pending_transitions
                .insert(node.clone(), format!("gen {generation}: drain"));
            let u = NodeUpdate {
                node: node.clone(),
                drain: Some(reason.clone()),
                ..NodeUpdate::default()
            };
            match self.api.update_node(&u) {
                Ok(()) => drained.push(node.clone()),
                Err(e) => self.fail(report, format!("cannot drain {node}: {e}")),
            }
        }
        let drained_set: HashSet<&String> = drained.iter().collect();
        by_node.retain(|n, _| drained_set.contains(n));
        // 2. Preempt mode: requeue the jobs on instances about to change.
        if self.mode == Mode::Preempt {
            let mut jobs = BTreeSet::new();
            for c in by_node.values().flatten() {
                let gpu = &view.gpus[c.gpu];
                for (b, js) in gpu.busy.iter().zip(&gpu.jobs) {
                    if c.plan.destroy.contains(b) {
                        jobs.extend(js.iter().copied());
                    }
                }
            }
            for j in jobs {
                match self.api.requeue(j) {
                    Ok(()) => log::info!("gen {generation}: requeued job {j}"),
                    Err(e) => self.fail(report, format!("cannot requeue job {j}: {e}")),
                }
            }
        }
        // 3. A job may have started between the decision and the drain: re-check.
        let deadline = Instant::now() + self.report_timeout();
        let mut fresh = match self.read_view() {
            Ok(v) => v,
            Err(e) => {
                self.fail(report, format!("cannot re-read after draining: {e}"));
                self.resume(&drained, report);
                return;
            }
        };
        if self.mode == Mode::Preempt {
            // Requeued jobs release their instances shortly; wait for that, bounded.
            while Instant::now() < deadline
                && by_node
                    .values()
                    .flatten()
                    .any(|c| touches_now(&fresh, &fresh.gpu_index(), view, c))
            {
                std::thread::sleep(self.poll);
                if let Ok(v) = self.read_view() {
                    fresh = v;
                }
            }
        }
        let mut lines = Vec::new();
        let fresh_index = fresh.gpu_index();
        for changes in by_node.values_mut() {
            changes.retain(|c| {
                let busy = touches_now(&fresh, &fresh_index, view, c);
                if busy {
                    lines.push(self.line(
                        view,
                        c.gpu,
                        c.target,
                        generation,
                        now,
                        "skip: became busy before the drain".into(),
                    ));
                    report.skipped_busy += 1;
                }
                !busy
            });
        }
        self.status.decided(lines);
        let idle_nodes: Vec<String> = by_node
            .iter()
            .filter(|(_, c)| c.is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        self.resume(&idle_nodes, report);
        by_node.retain(|_, c| !c.is_empty());
        // 4. Hand the plans to the agents.
        let mut asked = Vec::new();
        for (node, changes) in &by_node {
            let gpus = changes
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
            let d = Desired {
                smartmig: CHANNEL_VERSION,
                generation,
                phase: Phase::Apply,
                gpus,
            };
            self.status
                .pending_transitions
                .insert(node.clone(), format!("gen {generation}: apply"));
            match write_desired(self.api.as_mut(), node, &d) {
                Ok(()) => asked.push(node.clone()),
                Err(e) => self.fail(report, format!("cannot hand gen {generation} to {node}: {e}")),
            }
        }
        let asked_set: HashSet<&String> = asked.iter().collect();
        let failed_handoff: Vec<String> = by_node
            .keys()
            .filter(|n| !asked_set.contains(n))
            .cloned()
            .collect();
        self.resume(&failed_handoff, report);
        let answers = self.wait_reports(&asked, generation, Phase::Apply, report);
        let mut lines = Vec::new();
        for node in &asked {
            let Some(rep) = answers.get(node) else {
                self.fail(
                    report,
                    format!("gen {generation}: no report from {node}; it stays drained"),
                );
                continue;
            };
            let outcome = match &rep.outcome {
                Outcome::Done => "applied".to_string(),
                Outcome::Failed { error } => {
                    self.fail(report, format!("gen {generation}: {node} failed: {error}"));
                    format!("failed: {error}")
                }
                Outcome::InProgress => "in progress".into(),
            };
            for c in &by_node[node] {
                lines.push(self.line(view, c.gpu, c.target, generation, now, outcome.clone()));
                if matches!(rep.outcome, Outcome::Done) {
                    report.changed += 1;
                    *self.status.counters.entry("repartitions".into()).or_default() += 1;
                }
            }
        }
        self.status.decided(lines);
        let back = self.finish(view, generation, &answers, report);
        report.nodes.extend(back);
    }

    /// Steps 5 and 6 for the nodes whose agents answered (`answers`): Slurm learns the
    /// layouts they report, done or failed (a failed agent restores a valid layout and
    /// reports it; only changed layouts need the restart), slurmd is started again where
    /// the agent stopped it or the layout changed, and the nodes are resumed. Returns the
    /// nodes back in service.
    fn finish(
        &mut self,
        view: &View,
        generation: u64,
        answers: &BTreeMap<String, crate::channel::Report>,
        report: &mut CycleReport,
    ) -> Vec<String> {
        let configured: HashMap<&str, &str> = view
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.slurm.gres.as_str()))
            .collect();
        let mut gres = Vec::new();
        // Nodes whose slurmd must be started: stopped by the agent, or told a new layout.
        let mut restart: Vec<String> = Vec::new();
        for (node, rep) in answers {
            let new = gres_of_report(&rep.gpus);
            let changed = !same_gpu_gres(configured.get(node.as_str()).copied().unwrap_or(""), &new);
            if changed {
                gres.push((node.clone(), new));
            }
            if changed || !rep.slurmd_running {
                restart.push(node.clone());
            }
        }
        if !gres.is_empty() {
            for (n, _) in &gres {
                self.status
                    .pending_transitions
                    .insert(n.clone(), format!("gen {generation}: relayout"));
            }
            if let Err(e) = self.relayout.apply(self.api.as_mut(), &gres) {
                let msg = format!(
                    "gen {generation}: {} failed: {}",
                    self.relayout.name(),
                    decide::error_chain(&e)
                );
                self.fail(report, msg);
            }
        }
        for node in &restart {
            self.status
                .pending_transitions
                .insert(node.clone(), format!("gen {generation}: start slurmd"));
            let d = Desired {
                smartmig: CHANNEL_VERSION,
                generation,
                phase: Phase::StartSlurmd,
                gpus: Vec::new(),
            };
            if let Err(e) = write_desired(self.api.as_mut(), node, &d) {
                self.fail(report, format!("cannot ask {node} to start slurmd: {e}"));
            }
        }
        let started = self.wait_reports(&restart, generation, Phase::StartSlurmd, report);
        let back: Vec<String> = answers
            .keys()
            .filter(|n| !restart.contains(n) || started.contains_key(*n))
            .cloned()
            .collect();
        for n in restart.iter().filter(|n| !started.contains_key(*n)) {
            self.fail(
                report,
                format!("gen {generation}: {n} did not confirm slurmd; it stays drained"),
            );
        }
        self.resume(&back, report);
        back
    }

    /// Nodes an earlier cycle drained and left (its agent answered after the report
    /// timeout, slurmctld was unreachable, the central role stopped mid-cycle): each
    /// whose agent has answered its last desired state, with that answer. The others are
    /// errors, and stay drained.
    fn leftovers(
        &mut self,
        view: &View,
        report: &mut CycleReport,
    ) -> BTreeMap<String, crate::channel::Report> {
        let mut out = BTreeMap::new();
        for nv in &view.nodes {
            let ours = nv.slurm.drain
                && nv
                    .slurm
                    .reason
                    .as_deref()
                    .is_some_and(|r| r.starts_with(DRAIN_PREFIX));
            if !ours {
                continue;
            }
            let r = &nv.report;
            let answered = match read_desired(&nv.slurm) {
                Some(Ok(d)) => r.answers(d.generation, d.phase) && !matches!(r.outcome, Outcome::InProgress),
                // Drained, but never handed a plan: its report is current.
                None => true,
                Some(Err(_)) => false,
            };
            if answered {
                out.insert(nv.name.clone(), r.clone());
            } else {
                let msg = format!(
                    "{}: drained by smartmig, its agent has not answered gen {}; it stays drained",
                    nv.name, nv.generation
                );
                self.fail(report, msg);
            }
        }
        out
    }

    fn report_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.resolved.config.controller.central.report_timeout_s)
    }

    /// Waits (bounded) for each node's report on `generation`/`phase` to be final.
    fn wait_reports(
        &mut self,
        nodes: &[String],
        generation: u64,
        phase: Phase,
        report: &mut CycleReport,
    ) -> BTreeMap<String, crate::channel::Report> {
        let mut got = BTreeMap::new();
        let wanted: HashSet<&str> = nodes.iter().map(String::as_str).collect();
        let deadline = Instant::now() + self.report_timeout();
        while got.len() < nodes.len() {
            match self.api.nodes() {
                Ok(all) => {
                    for n in all.iter().filter(|n| wanted.contains(n.name.as_str())) {
                        if got.contains_key(&n.name) {
                            continue;
                        }
                        if let Some(Ok(r)) = read_report(n) {
                            let final_ = !matches!(r.outcome, Outcome::InProgress);
                            let slurmd_ok = phase != Phase::StartSlurmd || r.slurmd_running;
                            if r.generation == generation && r.phase == phase && final_ && slurmd_ok {
                                got.insert(n.name.clone(), r);
                            }
                        }
                    }
                }
                // slurmctld may be restarting; keep asking until the deadline.
                Err(e) => log::debug!("waiting for reports: {e}"),
            }
            if got.len() == nodes.len() || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(self.poll);
        }
        if got.len() < nodes.len() {
            let missing: Vec<&String> = nodes.iter().filter(|n| !got.contains_key(*n)).collect();
            log::warn!(
                "gen {generation} {phase:?}: no report within {:?} from {missing:?}",
                self.report_timeout()
            );
            let _ = report;
        }
        got
    }

    fn resume(&mut self, nodes: &[String], report: &mut CycleReport) {
        let mut refused = Vec::new();
        for node in nodes {
            let u = NodeUpdate {
                node: node.clone(),
                resume: true,
                ..NodeUpdate::default()
            };
            match self.api.update_node(&u) {
                Ok(()) => {
                    self.status.pending_transitions.remove(node);
                }
                Err(e) => refused.push((node, e)),
            }
        }
        if refused.is_empty() {
            return;
        }
        // slurmctld 22.05 clears the drain flag and then refuses a node whose base state
        // is still UNKNOWN (restarted slurmctld, slurmd not yet registered): what counts is
        // whether the node is still drained. One read of the nodes answers for all.
        let undrained: HashSet<String> = self
            .api
            .nodes()
            .map(|all| all.into_iter().filter(|n| !n.drain).map(|n| n.name).collect())
            .unwrap_or_default();
        for (node, e) in refused {
            if undrained.contains(node) {
                log::info!("resume {node}: slurmctld answered `{e}`, but the node is no longer drained");
                self.status.pending_transitions.remove(node);
            } else {
                self.fail(report, format!("cannot resume {node}: {e}"));
            }
        }
    }

    /// Pending jobs asking for a type no managed GPU has any more get a new type through
    /// the same routing as at submission (the `job_modify` path of the plugin).
    fn reroute(&mut self, view: &View, report: &mut CycleReport) {
        let Some(router) = &self.router else { return };
        let present: HashSet<String> = view.type_counts(&self.resolved).into_keys().collect();
        if present.is_empty() {
            return;
        }
        let known: HashSet<&str> = self
            .resolved
            .models
            .iter()
            .flat_map(|m| m.model.profiles.iter().map(|p| p.name.as_str()))
            .collect();
        let snapshot = self.snapshot(view, unix_now());
        let mut updates = Vec::new();
        for j in &view.pending {
            let vanished = j.tres.iter().flatten().any(|t| {
                parse_gres(t, "job")
                    .unwrap_or_default()
                    .iter()
                    .any(|g| known.contains(g.gpu_type.as_str()) && !present.contains(&g.gpu_type))
            });
            if !vanished {
                continue;
            }
            // Ask routing as if the job had asked for `gpu:mig`.
            let auto: Vec<Option<String>> = j
                .tres
                .iter()
                .map(|t| t.as_ref().map(|t| to_auto(t, &known)))
                .collect();
            let strs = TresStrings([
                auto[0].as_deref(),
                auto[1].as_deref(),
                auto[2].as_deref(),
                auto[3].as_deref(),
            ]);
            let job = RouteJob {
                tres: strs,
                name: j.name.as_deref(),
                account: j.account.as_deref(),
                partition: j.partition.as_deref(),
                comment: j.comment.as_deref(),
                time_limit_min: j.time_limit_min,
                deadline: j.deadline,
                now: unix_now() as i64,
            };
            match router.route(&job, Some(&snapshot)) {
                Ok(RouteOutcome::Routed(r)) => {
                    for (field, value) in r.tres {
                        updates.push((j.id, field as usize, value, r.gpu_type.clone()));
                    }
                }
                Ok(RouteOutcome::Unchanged(why)) => log::debug!("job {}: not re-routed: {why}", j.id),
                Err(e) => log::warn!("job {}: cannot re-route: {e}", j.id),
            }
        }
        for (job, field, value, ty) in updates {
            match self.api.update_job_tres(job, field, &value) {
                Ok(()) => {
                    log::info!("job {job}: its GPU type vanished; re-routed to {ty}");
                    report.rerouted += 1;
                    *self.status.counters.entry("reroutes".into()).or_default() += 1;
                }
                Err(e) => self.fail(report, format!("cannot re-route job {job}: {e}")),
            }
        }
    }

    /// The snapshot of `view` at `now`.
    pub fn snapshot(&self, view: &View, now: f64) -> Snapshot {
        let mut types: BTreeMap<String, TypeState> = BTreeMap::new();
        let mut instances = 0u32;
        let ends: BTreeMap<u32, f64> = view
            .running
            .iter()
            .map(|j| {
                (
                    j.id,
                    j.time_limit_min
                        .map_or(f64::INFINITY, |t| j.start as f64 + f64::from(t) * 60.0),
                )
            })
            .collect();
        let drained: HashSet<&str> = view
            .nodes
            .iter()
            .filter(|n| n.slurm.drain || n.slurm.down)
            .map(|n| n.name.as_str())
            .collect();
        for g in &view.gpus {
            let model = &self.resolved.models[g.model].model;
            for i in g.layout.instances() {
                instances += 1;
                let e = types.entry(model.profiles[i.profile].name.clone()).or_default();
                if drained.contains(g.node.as_str()) {
                    continue;
                }
                match g.busy.iter().position(|b| b == i) {
                    None => e.free += 1,
                    Some(p) => {
                        let soon = g.jobs[p]
                            .iter()
                            .all(|j| ends.get(j).is_some_and(|end| end - now <= SOON_FREE_S));
                        if soon && !g.jobs[p].is_empty() {
                            e.soon_free += 1;
                        }
                    }
                }
            }
        }
        Snapshot {
            version: SNAPSHOT_VERSION,
            generated_at: now,
            soon_free_within_s: SOON_FREE_S,
            queue_pressure: view.pending.len() as f64 / f64::from(instances.max(1)),
            types,
        }
    }

    fn publish(&mut self, view: &View, report: &mut CycleReport) {
        let snap = self.snapshot(view, unix_now());
        let path = self.resolved.config.controller.snapshot_path.clone();
        let result = serde_json::to_vec(&snap)
            .map_err(std::io::Error::other)
            .and_then(|json| {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                write_atomically(&path, &json)
            });
        if let Err(e) = result {
            self.fail(
                report,
                format!("cannot publish the snapshot {}: {e}", path.display()),
            );
        }
    }

    /// Adds the time since the last cycle to each GPU's configuration.
    fn account_time(&mut self, view: &View, now: f64) {
        for g in &view.gpus {
            let key = format!("{}/{}", g.node, g.index);
            let rm = &self.resolved.models[g.model];
            let name = g
                .config
                .map_or("other".to_string(), |c| rm.configurations[c].name.clone());
            if let Some((since, was)) = self.last_config.insert(key, (now, name)) {
                *self.status.seconds_in_configuration.entry(was).or_default() += (now - since).max(0.0);
            }
        }
    }
}

/// Whether change `c` (planned on `old`) destroys an instance that is busy in `fresh`.
fn touches_now(fresh: &View, index: &HashMap<(&str, u32), usize>, old: &View, c: &Change) -> bool {
    let g = &old.gpus[c.gpu];
    index
        .get(&(g.node.as_str(), g.index))
        .map(|&i| &fresh.gpus[i])
        .is_none_or(|f| f.layout != g.layout || c.plan.touches(&f.busy))
}

/// Whether two GRES strings have the same GPU counts per type (order, socket and index
/// annotations aside); an unreadable one counts as different.
fn same_gpu_gres(a: &str, b: &str) -> bool {
    let counts = |t: &str| -> Option<BTreeMap<String, u32>> {
        let mut m = BTreeMap::new();
        for g in parse_gres(t, "GRES").ok()? {
            *m.entry(g.gpu_type).or_default() += g.count;
        }
        Some(m)
    };
    matches!((counts(a), counts(b)), (Some(x), Some(y)) if x == y)
}

/// `gpu:1g.10gb:3,gpu:3g.40gb:1` for a node's reported GPUs.
pub fn gres_of_report(gpus: &[crate::channel::GpuActual]) -> String {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for g in gpus {
        for part in g
            .layout
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|p| !p.is_empty())
        {
            let name = part.split('@').next().unwrap_or(part);
            *counts.entry(name.to_string()).or_default() += 1;
        }
    }
    counts
        .iter()
        .map(|(t, n)| format!("gpu:{t}:{n}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A tres string with every known concrete GPU type replaced by `mig`.
fn to_auto(tres: &str, known: &HashSet<&str>) -> String {
    tres.split(',')
        .map(|e| {
            let parts: Vec<&str> = e.split(':').collect();
            match parts.as_slice() {
                [p, "gpu", t, rest @ ..] if known.contains(t) => std::iter::once(*p)
                    .chain(["gpu", "mig"])
                    .chain(rest.iter().copied())
                    .collect::<Vec<_>>()
                    .join(":"),
                ["gpu", t, rest @ ..] if known.contains(t) => ["gpu", "mig"]
                    .into_iter()
                    .chain(rest.iter().copied())
                    .collect::<Vec<_>>()
                    .join(":"),
                _ => e.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn gpu_lines(resolved: &Resolved, view: &View) -> Vec<GpuLine> {
    view.gpus
        .iter()
        .map(|g| {
            let rm = &resolved.models[g.model];
            GpuLine {
                gpu: format!("{}/{}", g.node, g.index),
                model: rm.model.key.clone(),
                layout: g.layout.display(&rm.model).to_string(),
                configuration: g.config.map(|c| rm.configurations[c].name.clone()),
                busy: g.busy.len(),
            }
        })
        .collect()
}

/// `dry-run`, `drain` or `preempt`.
pub fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::DryRun => "dry-run",
        Mode::Drain => "drain",
        Mode::Preempt => "preempt",
    }
}

#[cfg(test)]
mod tests;
