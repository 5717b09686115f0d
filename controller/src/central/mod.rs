//! The central role (`smartmigd central`): a reconcile loop on the Slurm controller host.
//!
//! Each cycle reads Slurm's GPU jobs and nodes once ([`view`]) and then:
//! 1. moves the re-layout batch in flight one step further ([`transaction`], states in
//!    [`batch`]): drain → Apply on the agents (slurmd keeps running) → Install the new
//!    gres.conf (slurmd stopped when the path needs it) → Slurm refreshed once for the
//!    batch ([`relayout`]) → Start slurmd → resume; every failure has one way back, and
//!    the batch is journaled in `relayout.json` so a restarted central role finishes or
//!    undoes it;
//! 2. between batches, puts right the side a failed way back left behind: the node file,
//!    slurmctld's definitions, a registration slurmctld refused ([`in_line`]);
//! 3. when no batch is in flight and a decision is due, decides a target configuration
//!    per GPU ([`decide`]), keeps the changes that touch only idle instances and pass the
//!    admin's limits ([`plan`], [`guard`]; before Slurm 23.02.6 also the last GPU of a
//!    type routed jobs wait for, [`strand`]), and starts a new batch;
//! 4. re-routes pending jobs whose type vanished ([`reroute`]) and publishes the snapshot
//!    the plugin reads ([`snapshot`]) and the status file.

pub mod batch;
pub mod decide;
#[doc(hidden)]
pub mod fake;
pub mod guard;
mod in_line;
pub mod indices;
pub mod metrics;
mod padding;
pub mod plan;
pub mod reconfigure;
pub mod relayout;
mod reroute;
pub use reroute::RETYPE_SINCE;
pub mod run;
mod snapshot;
pub mod status;
mod strand;
mod transaction;
pub mod view;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use smartmig_core::config::{Mode, Resolved};
use smartmig_core::routing::Router;

use crate::slurm::{parse_gres, read_report, NodeUpdate, SlurmApi, SlurmError};
use batch::{held_reason, Ledger, LedgerError, DRAIN_PREFIX};
use decide::Decider;
use guard::Guard;
pub use plan::{Change, Skipped, Wait};
use relayout::Relayout;
pub use snapshot::SOON_FREE_S;
use status::{DecisionLine, GpuLine, Status};
pub use transaction::{fits_budget, phase_timeout, BudgetError, Untrusted};
use view::View;

pub use smartmig_core::clock::unix_now;

/// What one cycle (or one `--once` run) did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CycleReport {
    /// GPUs whose configuration the policy wanted to change.
    pub wanted: usize,
    /// GPUs changed (or, in dry-run, that would be).
    pub changed: usize,
    /// GPUs left alone because the change touches busy instances.
    pub skipped_busy: usize,
    /// Nodes back in service after a re-layout.
    pub nodes: Vec<String>,
    /// Pending jobs re-routed.
    pub rerouted: usize,
    /// Errors met (also in the status file).
    pub errors: Vec<String>,
}

impl CycleReport {
    fn absorb(&mut self, r: CycleReport) {
        self.changed += r.changed;
        self.skipped_busy += r.skipped_busy;
        self.wanted += r.wanted;
        self.nodes.extend(r.nodes);
        self.rerouted += r.rerouted;
        self.errors.extend(r.errors);
    }
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
    /// Nodes parsed in earlier reads of Slurm's state, reused while unchanged.
    pub(crate) node_cache: view::NodeCache,
    ledger: Ledger,
    guard: Guard,
    /// The profile names of the configured models: the GRES types smartmig manages.
    mig_types: HashSet<String>,
    /// Job ids seen in the last read, and arrivals + completions counted since.
    known_jobs: Option<HashSet<u32>>,
    events: u32,
    /// Whether slurmctld replaces a pending job's GPU request on update
    /// ([`reroute::RETYPE_SINCE`]); before, re-routing is left alone.
    retypes_pending: bool,
    /// Pending jobs already reported as waiting for a vanished type Slurm cannot change.
    stranded: HashSet<u32>,
    /// After a failed load of the node file for nodes slurmctld is left behind on: when
    /// the next may be tried (Unix seconds) and the wait after that one, if it fails too.
    catch_up_retry: Option<(f64, f64)>,
    /// The asks that nodes slurmctld refused register again.
    register: in_line::Asks,
}

impl Central {
    /// A central role over `api`, deciding with `decider` and refreshing Slurm with
    /// `relayout`; picks up the batch a previous run left in flight.
    pub fn new(
        resolved: Resolved,
        api: Box<dyn SlurmApi>,
        decider: Decider,
        relayout: Box<dyn Relayout>,
        mode: Mode,
    ) -> Result<Central, LedgerError> {
        let router = match Router::from_resolved(&resolved) {
            Ok(r) => Some(r),
            Err(e) => {
                log::error!("re-routing disabled: {e}");
                None
            }
        };
        let state_dir = resolved.config.controller.state_dir.clone();
        let ledger = Ledger::load(&state_dir)?;
        if let Some(b) = &ledger.batch {
            log::warn!(
                "re-layout generation {} was in flight when the central role stopped ({} node(s)); finishing it",
                b.generation,
                b.nodes.len()
            );
        }
        let status = Status {
            mode: mode_name(mode).into(),
            generation: ledger.generation,
            ..Status::default()
        };
        let guard = Guard::new(&state_dir, &resolved.config.controller.central);
        let mig_types = resolved
            .models
            .iter()
            .flat_map(|m| m.model.profiles.iter().map(|p| p.name.clone()))
            .collect();
        Ok(Central {
            resolved,
            api,
            decider,
            relayout,
            router,
            mode,
            status,
            last_config: BTreeMap::new(),
            node_cache: view::NodeCache::default(),
            ledger,
            guard,
            mig_types,
            known_jobs: None,
            events: 0,
            retypes_pending: true,
            stranded: HashSet::new(),
            catch_up_retry: None,
            register: in_line::Asks::default(),
        })
    }

    /// Tells the central role the Slurm release it works with (a `SLURM_VERSION_NUMBER`):
    /// what it may ask of slurmctld depends on it.
    pub fn for_release(&mut self, built_for: u32) {
        self.retypes_pending = built_for >= reroute::RETYPE_SINCE;
    }

    /// The Slurm API (tests inspect the fake through it).
    pub fn api(&mut self) -> &mut dyn SlurmApi {
        self.api.as_mut()
    }

    /// Whether a re-layout batch is in flight.
    pub fn in_flight(&self) -> bool {
        self.ledger.batch.is_some()
    }

    /// Job arrivals and completions seen since the last call (for `policy.decision_events`).
    pub fn take_events(&mut self) -> u32 {
        std::mem::take(&mut self.events)
    }

    /// Where generation `g` is recorded: nodes' `Extra` (desired) and `Comment` (report),
    /// the ledger, the status file.
    fn holders_of(&self, view: &View, g: u64) -> Vec<String> {
        let mut out = Vec::new();
        for n in &view.nodes {
            if n.generation == g {
                out.push(format!("node {}'s Extra", n.name));
            }
            if n.report.generation == g {
                out.push(format!("node {}'s Comment", n.name));
            }
        }
        for (name, n) in &view.others {
            if crate::slurm::read_desired(n)
                .and_then(Result::ok)
                .is_some_and(|d| d.generation == g)
            {
                out.push(format!("node {name}'s Extra"));
            }
        }
        if self.ledger.generation == g {
            out.push("the ledger".into());
        }
        if self.status.generation == g {
            out.push("the status file".into());
        }
        out
    }

    fn fail(&mut self, report: &mut CycleReport, message: String) {
        log::error!("{message}");
        self.status.error(unix_now(), message.clone());
        report.errors.push(message);
    }

    fn read_view(&mut self) -> Result<View, SlurmError> {
        let nodes = self.api.nodes()?;
        let jobs = self.api.jobs()?;
        let ids: HashSet<u32> = jobs.iter().map(|j| j.id).collect();
        if let Some(prev) = &self.known_jobs {
            self.events += (ids.difference(prev).count() + prev.difference(&ids).count()) as u32;
        }
        self.known_jobs = Some(ids);
        Ok(View::build(&self.resolved, nodes, jobs, &mut self.node_cache))
    }

    /// Writes the ledger durably; false (and an error in the report) when it cannot. A
    /// step that goes forward (a batch, an Apply, an Install, Slurm's refresh) runs only
    /// after its write succeeded; the steps back run either way.
    fn save_ledger(&mut self, report: &mut CycleReport) -> bool {
        let dir = self.resolved.config.controller.state_dir.clone();
        match self.ledger.save(&dir) {
            Ok(()) => true,
            Err(e) => {
                self.fail(report, format!("cannot save the re-layout ledger: {e}"));
                false
            }
        }
    }

    /// One cycle that may decide and start a new batch.
    pub fn cycle(&mut self) -> CycleReport {
        self.cycle_with(true)
    }

    /// One cycle; a new batch is decided only with `decide` (the batch in flight always
    /// moves on). Slurm read errors end the cycle early (logged, kept in the status).
    pub fn cycle_with(&mut self, decide: bool) -> CycleReport {
        let mut report = CycleReport::default();
        self.status.cycles += 1;
        match self.read_view() {
            Ok(view) => self.tick(view, decide, &mut report),
            Err(e) => self.fail(&mut report, format!("cannot read Slurm's state: {e}")),
        }
        self.status.updated_at = unix_now();
        self.status.frozen = guard::frozen(&self.resolved.config.controller.state_dir);
        let dir = self.resolved.config.controller.state_dir.clone();
        if let Err(e) = self.status.write(&dir) {
            log::error!("cannot write the status file in {}: {e}", dir.display());
        }
        report
    }

    /// `smartmigd central --once`: one deciding cycle, then cycles every `poll` until the
    /// batch it started (or found) is over or `limit` has passed, then one more to publish
    /// what Slurm has afterwards.
    pub fn run_once(&mut self, poll: Duration, limit: Duration) -> CycleReport {
        let start = Instant::now();
        let mut total = self.cycle();
        let moved = self.in_flight();
        while self.in_flight() && start.elapsed() < limit {
            std::thread::sleep(poll);
            let r = self.cycle_with(false);
            total.absorb(r);
        }
        if moved {
            let r = self.cycle_with(false);
            total.absorb(r);
        }
        if self.in_flight() {
            let b = self.ledger.batch.as_ref().map_or(0, |b| b.generation);
            self.fail(
                &mut total,
                format!(
                    "gen {b}: still in flight after {limit:?}; the next run of the central role continues it"
                ),
            );
        }
        total
    }

    fn tick(&mut self, view: View, decide: bool, report: &mut CycleReport) {
        let now = unix_now();
        self.account_time(&view, now);
        for (node, why) in &view.problems {
            let msg = format!("node {node} left alone: {why}");
            self.fail(report, msg);
        }
        let between_batches = self.ledger.batch.is_none();
        // A batch in flight is finished in every mode (dry-run included: its nodes are
        // drained, and only finishing or undoing it puts them back in service).
        if self.mode != Mode::DryRun || self.ledger.batch.is_some() {
            match self.ledger.batch.take() {
                Some(mut b) => {
                    self.advance(&mut b, &view, report);
                    if b.is_closed() {
                        log::info!("gen {}: re-layout over", b.generation);
                        self.ledger.batch = None;
                        self.save_ledger(report);
                    } else {
                        self.ledger.batch = Some(b);
                    }
                }
                None => self.orphans(&view, report),
            }
        }
        // Only on a view read between batches: mid-batch, or just after one closed in
        // this tick, slurmctld's values in the view are not the settled ones.
        let settled = between_batches && self.ledger.batch.is_none() && self.mode != Mode::DryRun;
        // The file in line first: loading it again loads every line.
        let agreed = !settled || {
            let as_reported = self.shown_as_reported(&view);
            self.agree(&view, &as_reported, report) && self.catch_up(&view, &as_reported, now, report)
        };
        if decide && agreed && self.ledger.batch.is_none() {
            self.decide_and_start(&view, now, report);
        }
        // Dry-run touches nothing the plugin or the jobs see.
        if self.mode != Mode::DryRun {
            // Only on a view read between batches: mid-batch a type about to go still
            // looks present, and a job sent there would have to move again, never to less
            // memory than that type's.
            if between_batches && self.ledger.batch.is_none() {
                self.reroute(&view, report);
            }
            self.publish(&view, report);
        }
        self.status.gpus = gpu_lines(&self.resolved, &view);
    }

    /// Decides on `view`; in dry-run records what would happen, else starts a batch when
    /// the limits allow one.
    fn decide_and_start(&mut self, view: &View, now: f64, report: &mut CycleReport) {
        let (decision, changes, mut skipped) = self.plan(view, now);
        for (m, s) in decision.sources.iter().enumerate() {
            let text = match s {
                decide::Source::Onnx { file } => format!("onnx {file}"),
                decide::Source::Fixed { why } => why.clone(),
                decide::Source::Kept { why } => format!("keep current layouts (policy unusable: {why})"),
                decide::Source::None => "none".into(),
            };
            self.status
                .sources
                .insert(self.resolved.models[m].model.key.clone(), text);
        }
        let busy = |s: &Skipped| matches!(s.why, Wait::Busy(_) | Wait::CountChange | Wait::IndexShift(_));
        report.wanted += changes.len() + skipped.iter().filter(|s| busy(s)).count();
        report.skipped_busy += skipped.iter().filter(|s| busy(s)).count();
        // A dry run goes through the same limits, so it shows what a live cycle would do.
        let dry = self.mode == Mode::DryRun;
        let would = |why: String| if dry { format!("would {why}") } else { why };
        let by_node = self.limit(view, changes, &mut skipped);
        let mut lines: Vec<_> = skipped
            .iter()
            .map(|s| self.line(view, s.gpu, s.target, 0, now, would(s.why.to_string())))
            .collect();
        if by_node.is_empty() {
            self.decided(lines);
            return;
        }
        let closed = self
            .guard
            .closed(now, guard::local_time(now), self.ledger.last_batch_at);
        let budget = self.slurmd_budget();
        let blocked = match (closed, &budget) {
            (Some(why), _) => Some(format!("wait: {why}")),
            (None, Err(e)) => {
                self.fail(report, e.to_string());
                Some(format!("skip: {e}"))
            }
            (None, Ok(_)) => None,
        };
        if let Some(why) = blocked {
            for c in by_node.values().flatten() {
                lines.push(self.line(view, c.gpu, c.target, 0, now, would(why.clone())));
            }
            self.decided(lines);
            return;
        }
        if dry {
            for c in by_node.values().flatten() {
                let action = if c.plan.touches(&view.gpus[c.gpu].busy) {
                    "would preempt and apply"
                } else {
                    "would apply"
                };
                lines.push(self.line(view, c.gpu, c.target, 0, now, action.into()));
                report.changed += 1;
            }
            self.decided(lines);
            return;
        }
        self.status.decided(lines);
        let last = view
            .max_generation
            .max(self.ledger.generation)
            .max(self.status.generation);
        let Some(generation) = last.checked_add(1) else {
            let held_by = self.holders_of(view, last).join(", ");
            self.fail(
                report,
                format!(
                    "no re-layout started: generation {last} ({held_by}) leaves no next one; \
                     smartmigd never counts that high, so that record was written by hand"
                ),
            );
            return;
        };
        let budget = budget.unwrap_or_default();
        let mut b = self.new_batch(view, by_node, generation, now, budget);
        log::info!(
            "gen {generation}: re-laying out {} node(s): {:?}",
            b.nodes.len(),
            b.nodes.keys().collect::<Vec<_>>()
        );
        self.ledger.generation = generation;
        self.ledger.last_batch_at = now;
        self.status.generation = generation;
        // Written before the first drain: a crash after it finds the batch.
        self.ledger.batch = Some(b.clone());
        if !self.save_ledger(report) {
            self.ledger.batch = None;
            self.fail(
                report,
                format!("gen {generation}: no re-layout started: its ledger cannot be written"),
            );
            return;
        }
        self.advance(&mut b, view, report);
        self.ledger.batch = (!b.is_closed()).then_some(b);
        self.save_ledger(report);
    }

    /// Records a cycle's decision lines in the status (and, in a dry run, in the log).
    fn decided(&mut self, lines: Vec<DecisionLine>) {
        if self.mode == Mode::DryRun {
            for l in &lines {
                log::info!("dry-run: {} {} -> {}: {}", l.gpu, l.from, l.to, l.action);
            }
        }
        self.status.decided(lines);
    }

    /// Seconds slurmd may stay stopped in a re-layout: half of Slurm's SlurmdTimeout
    /// (300 s when Slurm never marks a silent node down), if a re-layout fits in it.
    fn slurmd_budget(&mut self) -> Result<f64, BudgetError> {
        let timeout = self.api.slurmd_timeout()?;
        let budget = f64::from(if timeout == 0 { 300 } else { timeout }) / 2.0;
        if self.relayout.stops_slurmd() {
            fits_budget(budget, self.relayout.timeout())?;
        }
        Ok(budget)
    }

    /// Nodes drained for a re-layout that no batch knows of (the ledger was lost, or an
    /// earlier version drained them): resumed when their agent, slurmd and Slurm agree,
    /// else left drained with a reason saying so.
    fn orphans(&mut self, view: &View, report: &mut CycleReport) {
        let drained: Vec<crate::slurm::SlurmNode> = view
            .nodes
            .iter()
            .map(|n| &n.slurm)
            .chain(view.others.values())
            .filter(|n| n.drain && n.reason.as_deref().is_some_and(|r| r.starts_with(DRAIN_PREFIX)))
            .cloned()
            .collect();
        for n in drained {
            let agrees = read_report(&n).and_then(Result::ok).is_some_and(|r| {
                r.read_error.is_none()
                    && r.slurmd_running
                    && r.outcome != crate::channel::Outcome::InProgress
                    && same_mig_gres(&n.gres, &gres_of_report(&r.gpus), &self.mig_types)
            });
            let update = if agrees {
                log::info!(
                    "{}: drained by an unfinished re-layout; its agent and Slurm agree: resuming",
                    n.name
                );
                NodeUpdate {
                    node: n.name.clone(),
                    resume: true,
                    ..NodeUpdate::default()
                }
            } else {
                let why = "an unfinished re-layout (no record of it in relayout.json) left the node's layout unsure";
                self.fail(report, format!("{}: {why}; it stays drained", n.name));
                NodeUpdate {
                    node: n.name.clone(),
                    drain: Some(held_reason(0, why)),
                    ..NodeUpdate::default()
                }
            };
            if let Err(e) = self.api.update_node(&update) {
                self.fail(report, format!("{}: {e}", n.name));
            }
        }
    }

    /// Adds the time since the last cycle to each GPU's configuration.
    fn account_time(&mut self, view: &View, now: f64) {
        for g in &view.gpus {
            let key = g.key();
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

/// Whether two GRES strings have the same counts of the MIG types in `mig` and of the
/// padding types (order, socket and index annotations, and other GRES aside); an
/// unreadable one counts as different.
pub fn same_gpu_gres(a: &str, b: &str, mig: &HashSet<String>) -> bool {
    same_counts(a, b, |t| {
        mig.contains(t) || smartmig_core::mig::padding::is_pad_type(t)
    })
}

/// Whether two GRES strings have the same counts of every GPU type (what a load of one
/// where Slurm has the other would leave unchanged).
pub fn same_gpus(a: &str, b: &str) -> bool {
    same_counts(a, b, |_| true)
}

/// Whether two GRES strings have the same counts of the MIG types in `mig`, padding aside:
/// for comparing Slurm's record with an agent's report, which carries no padding.
pub fn same_mig_gres(a: &str, b: &str, mig: &HashSet<String>) -> bool {
    same_counts(a, b, |t| mig.contains(t))
}

/// Whether two GRES strings have the same counts of the types `counted` takes.
fn same_counts(a: &str, b: &str, counted: impl Fn(&str) -> bool) -> bool {
    let counts = |t: &str| -> Option<BTreeMap<String, u32>> {
        let mut m = BTreeMap::new();
        for g in parse_gres(t, "GRES").ok()? {
            if counted(&g.gpu_type) {
                *m.entry(g.gpu_type).or_default() += g.count;
            }
        }
        Some(m)
    };
    matches!((counts(a), counts(b)), (Some(x), Some(y)) if x == y)
}

/// Instances per MIG type of a node's reported GPUs.
pub fn report_counts(gpus: &[crate::channel::GpuActual]) -> BTreeMap<String, u32> {
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
}

/// `gpu:1g.10gb:3,gpu:3g.40gb:1` for a node's reported GPUs.
pub fn gres_of_report(gpus: &[crate::channel::GpuActual]) -> String {
    padding::mig_gres(&report_counts(gpus), &BTreeMap::new()).unwrap_or_default()
}

fn gpu_lines(resolved: &Resolved, view: &View) -> Vec<GpuLine> {
    view.gpus
        .iter()
        .map(|g| {
            let rm = &resolved.models[g.model];
            GpuLine {
                gpu: g.key(),
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
