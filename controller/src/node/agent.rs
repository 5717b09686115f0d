//! The node agent: checks, plans, journals and runs re-layouts, installs and reverts the
//! node's gres.conf lines, stops and starts slurmd when asked, restarts slurmd on its own
//! when the central role goes silent for too long (the watchdog), recovers after a crash
//! and restores the node's layouts after a reboot.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use rand::Rng as _;
use smartmig_core::durable;
use smartmig_core::mig::layout::display_instance;
use smartmig_core::mig::{Catalogue, Driver, GpuModel, Layout, Plan, Step};
use smartmig_gpu::{GpuBackend, GpuState};

use super::journal::{Ending, InFlight, Journal, OpenPlan, Record};
use super::{gres, NodeChannel, NodeError, Refusal};
use crate::channel::{device_ref, Desired, GpuActual, GpuTarget, Outcome, Phase, Report, CHANNEL_VERSION};
use crate::command;

/// What the agent needs besides its backend and channel.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The node's Slurm name (gres.conf `NodeName=`).
    pub node: String,
    /// Driver rules.
    pub driver: Driver,
    /// GPU models.
    pub catalogue: Catalogue,
    /// Directory of the journal.
    pub state_dir: PathBuf,
    /// The node's gres.conf.
    pub gres_conf: PathBuf,
    /// Command that stops slurmd.
    pub slurmd_stop: Vec<String>,
    /// Command that starts slurmd.
    pub slurmd_start: Vec<String>,
    /// Seconds between re-announcements of the last report with the current layouts.
    pub announce_interval_s: f64,
    /// Seconds between reads of the record while a re-layout is under way.
    pub poll_interval_s: f64,
    /// Mean seconds between reads of the record otherwise.
    pub idle_poll_interval_s: f64,
}

/// How long a configured slurmd command may run.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(90);

/// One GPU of a re-layout, resolved against the catalogue.
struct Target {
    index: u32,
    model: GpuModel,
    from: Layout,
    to: Layout,
}

/// The node agent.
pub struct Agent {
    cfg: AgentConfig,
    backend: Box<dyn GpuBackend>,
    channel: Box<dyn NodeChannel>,
    journal: Journal,
    /// Held while the agent lives: no second agent on its state directory.
    _lock: super::lock::StateLock,
    /// The last report this agent wrote (or found on the channel at start).
    last: Option<Report>,
    /// When `last` was written (Unix seconds).
    last_at: f64,
    /// Whether the last record read shows a re-layout under way (fast polls).
    busy: bool,
}

pub use smartmig_core::clock::unix_now;

impl Agent {
    /// An agent over a backend and a channel; takes the lock of `state_dir` and opens the
    /// journal there.
    pub fn new(
        cfg: AgentConfig,
        backend: Box<dyn GpuBackend>,
        channel: Box<dyn NodeChannel>,
    ) -> Result<Agent, NodeError> {
        let lock = super::lock::StateLock::take(&cfg.state_dir)?;
        let journal = Journal::open(&cfg.state_dir)?;
        Ok(Agent {
            cfg,
            backend,
            channel,
            journal,
            _lock: lock,
            last: None,
            last_at: 0.0,
            busy: false,
        })
    }

    /// The journal.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Finishes or rolls back a re-layout a previous run left open, and reports it.
    pub fn recover(&mut self) -> Result<Option<Report>, NodeError> {
        match self.reconcile(false)? {
            Some(report) => self.publish(report).map(Some),
            None => Ok(None),
        }
    }

    /// [`Agent::recover`] at boot (`--restore`, before slurmd starts), where a plan left
    /// open is rolled back instead of finished: its generation's gres.conf was not
    /// installed, so slurmd is about to read the lines of the layouts before it, which
    /// slurmctld has too. slurmctld may not answer yet: a report that cannot be published
    /// is logged, not an error, so that the layouts are still restored and slurmd can
    /// start. The central role, without the answer, holds the node at `report_timeout_s`.
    pub fn recover_at_boot(&mut self) -> Result<Option<Report>, NodeError> {
        let Some(report) = self.reconcile(true)? else {
            return Ok(None);
        };
        let generation = report.generation;
        match self.publish(report.clone()) {
            Ok(r) => Ok(Some(r)),
            Err(e) => {
                log::error!(
                    "re-layout {generation}: reconciled, but its report cannot be published ({e}); \
                     the central role holds the node when the answer does not come"
                );
                Ok(Some(report))
            }
        }
    }

    /// Finishes (rolls back, `at_boot`) a re-layout a previous run left open (journal and
    /// devices); its report, not yet published.
    fn reconcile(&mut self, at_boot: bool) -> Result<Option<Report>, NodeError> {
        let Some(OpenPlan {
            generation,
            gpus,
            padding,
            order,
        }) = self.journal.open_plan()
        else {
            return Ok(None);
        };
        log::warn!("re-layout {generation} was interrupted; reconciling the journal with the devices");
        let outcome = match self.resolve(&gpus) {
            Err(e) => {
                self.end(generation, Ending::Failed { error: e.to_string() })?;
                Outcome::Failed { error: e.to_string() }
            }
            Ok(targets) if at_boot => {
                let why = "interrupted before slurmd's start (a reboot): the GPUs go back to the layouts gres.conf and slurmctld have";
                self.roll_back(generation, &targets, why.to_string())?
            }
            Ok(targets) => match self.move_all(&targets, |t| &t.to) {
                Ok(()) => {
                    log::info!("re-layout {generation}: finished the interrupted plan");
                    self.finish(generation, &targets, &padding, &order)?
                }
                Err(e) => {
                    let why = format!("the interrupted re-layout could not be finished: {e}");
                    self.roll_back(generation, &targets, why)?
                }
            },
        };
        Ok(Some(self.report(generation, Phase::Apply, outcome)))
    }

    /// Before slurmd starts (`smartmigd node --restore`, run by systemd before slurmd):
    /// after a reboot (MIG instances do not survive one) brings every GPU whose device is
    /// empty back to the last layout the journal holds; then writes the node's gres.conf
    /// block, taking over this node's MIG lines written outside it (a first start).
    /// Returns the GPUs restored.
    pub fn restore(&mut self) -> Result<Vec<u32>, NodeError> {
        self.settle_in_flight()?;
        let want = self
            .journal
            .layouts()
            .map(<[GpuActual]>::to_vec)
            .unwrap_or_default();
        let mut restored = Vec::new();
        for g in want {
            let model = self
                .cfg
                .catalogue
                .model(&g.model)
                .map_err(|e| Refusal::bad_target(g.index, e))?
                .clone();
            let to = Layout::parse(&model, &g.layout).map_err(|e| Refusal::bad_target(g.index, e))?;
            let st = self.backend.state(g.index, &model)?;
            if st.layout == to || !st.layout.instances().is_empty() {
                // Present, or someone made instances since: never destroyed at start-up.
                continue;
            }
            let target = Target {
                index: g.index,
                from: st.layout.clone(),
                model,
                to,
            };
            self.move_gpu(&target, &target.to)?;
            log::info!("GPU {}: restored {}", g.index, g.layout);
            restored.push(g.index);
        }
        // The padding and device order the file has are the ones slurmctld has: write them
        // again (an order that no longer lists the devices, after a reboot that lost some,
        // gives way to GPU and placement order: no job runs on the node yet).
        let (blocks, order) = match std::fs::read_to_string(&self.cfg.gres_conf) {
            Ok(t) => (
                gres::recorded_blocks(&t, &self.cfg.node)?,
                gres::recorded_order(&t, &self.cfg.node)?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (BTreeMap::new(), Vec::new()),
            Err(e) => return Err(NodeError::io(&self.cfg.gres_conf, e)),
        };
        let lines = match self.render_lines(&blocks, &order) {
            Err(NodeError::Render(e @ gres::RenderError::Order { .. })) => {
                log::warn!("gres.conf: {e}; writing GPU and placement order");
                self.render_lines(&blocks, &[])?
            }
            other => other?,
        };
        self.install_lines(&lines, false)?;
        if let Ok(gpus) = self.actual() {
            self.journal.append(Record::Layouts { gpus })?;
        }
        // systemd starts slurmd once this returns (the restore is ordered before it), on
        // the gres.conf just made to agree with slurmctld: no watchdog is due for a stop
        // that a reboot ended, and a generation installed before is settled (started).
        self.journal.append(Record::Slurmd {
            running: true,
            watchdog: None,
        })?;
        Ok(restored)
    }

    /// Before slurmd starts: a generation between its plan's end and slurmd's start on it
    /// (a reboot took its instances) is made to agree with what slurmctld has, which is
    /// what slurmd is about to register. Installed, it goes forward to its layouts where
    /// slurmctld shows them, else back: the GPUs to the layouts before it, its gres.conf
    /// put back, recorded reverted (the agent then refuses its Start, and the central role
    /// holds the node); while slurmctld cannot be asked the restore fails and slurmd
    /// waits. Only applied, it goes back the same way: its Install would write lines for
    /// instances that are gone.
    fn settle_in_flight(&mut self) -> Result<(), NodeError> {
        let Some(in_flight) = self.journal.in_flight() else {
            return Ok(());
        };
        let (InFlight::Applied(generation) | InFlight::Installed(generation)) = in_flight;
        let targets = self.resolve(&self.journal.plan_of(generation).unwrap_or_default())?;
        // The record's GRES, and whether the central role asks this generation back (it
        // undoes slurmctld only after the nodes' reverts: on the reconfigure path slurmctld
        // may still show the generation).
        let (slurmctld, reverting) = match in_flight {
            InFlight::Applied(_) => (None, false),
            InFlight::Installed(_) => {
                match self.channel.read() {
                    Ok(rec) => {
                        let back = rec
                            .desired
                            .is_some_and(|d| d.generation == generation && d.phase == Phase::Revert);
                        (rec.gres, back)
                    }
                    Err(e) => {
                        log::warn!("generation {generation}: the node's record does not read ({e}); reading its GRES alone");
                        match self.channel.gres() {
                            Ok(gres) => (gres, false),
                            Err(e) => {
                                log::error!("generation {generation}: slurmctld's GRES for the node cannot be read ({e})");
                                (None, false)
                            }
                        }
                    }
                }
            }
        };
        let types = self.mig_types();
        let has_new = match (in_flight, &slurmctld) {
            // Not installed: slurmctld is refreshed only after every node's install.
            (InFlight::Applied(_), _) => false,
            (InFlight::Installed(_), _) if reverting => false,
            (InFlight::Installed(_), Some(gres)) => match mig_counts(gres, &types) {
                Ok(c) => self
                    .journal
                    .staged(generation)
                    .is_some_and(|l| c == staged_counts(l, &types)),
                Err(e) => {
                    return Err(NodeError::SlurmctldUnknown {
                        generation,
                        why: format!("its GRES `{gres}` does not parse ({e})"),
                    })
                }
            },
            // Never taken for the layouts before: slurmctld may have loaded the generation
            // (a power loss after the refresh). slurmd waits; the agent restores once
            // slurmctld answers.
            (InFlight::Installed(_), None) => {
                return Err(NodeError::SlurmctldUnknown {
                    generation,
                    why: "it does not answer".into(),
                })
            }
        };
        if has_new {
            self.move_all(&targets, |t| &t.to)?;
            log::warn!(
                "generation {generation}: installed, not started; slurmctld has its layouts: restored them with its gres.conf"
            );
            return Ok(());
        }
        self.move_all(&targets, |t| &t.from)?;
        if matches!(in_flight, InFlight::Installed(_)) {
            let mut errors = Vec::new();
            if !self.put_gres_conf_back(&mut errors) {
                return Err(NodeError::NotPutBack {
                    generation,
                    why: errors.join("; "),
                });
            }
        }
        self.journal.append(Record::Reverted { generation })?;
        log::warn!(
            "generation {generation}: {} before slurmd's start; slurmctld has {}: the GPUs and gres.conf went back to the layouts before it",
            match in_flight {
                InFlight::Applied(_) => "applied, not installed,",
                InFlight::Installed(_) => "installed, not started,",
            },
            slurmctld.as_deref().unwrap_or("the layouts before it (not yet refreshed)"),
        );
        Ok(())
    }

    /// Removes the markers of the node's gres.conf block (its lines stay as plain
    /// configuration) and smartmig's report from the node's record (`smartmigd node
    /// --release`, before uninstalling).
    pub fn release(&mut self) -> Result<(), NodeError> {
        let path = &self.cfg.gres_conf;
        match std::fs::read_to_string(path) {
            Ok(text) => durable::write(path, gres::release(&text, &self.cfg.node)?.as_bytes())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(NodeError::io(path, e)),
        }
        self.channel.clear_report()
    }

    /// Writes `report` to the channel and remembers it as the last one.
    fn publish(&mut self, report: Report) -> Result<Report, NodeError> {
        self.channel.write_report(&report)?;
        self.last = Some(report.clone());
        self.last_at = report.at;
        Ok(report)
    }

    /// Publishes the node's layouts when it has never reported (generation 0): the central
    /// role manages a node only once it knows its layouts.
    pub fn announce(&mut self) -> Result<Option<Report>, NodeError> {
        if let Some(r) = self.channel.read()?.report {
            self.last_at = unix_now();
            self.last = Some(r);
            return Ok(None);
        }
        let report = self.publish(self.report(0, Phase::Start, Outcome::Done))?;
        if report.read_error.is_none() {
            self.journal.append(Record::Layouts {
                gpus: report.gpus.clone(),
            })?;
        }
        log::info!("announced {} GPU(s) to the central role", report.gpus.len());
        Ok(Some(report))
    }

    /// Reads the desired state and handles it unless it was answered already.
    pub fn poll(&mut self) -> Result<Option<Report>, NodeError> {
        let rec = self.channel.read()?;
        self.handle(rec.desired.clone(), rec.report.as_ref())
    }

    /// One turn of the agent's loop at `now` (Unix seconds): handles the desired state
    /// like [`Agent::poll`]; else runs the slurmd watchdog; else re-announces the last
    /// report with the devices' current layouts if the channel lost it, if a layout
    /// differs from it, or every `announce_interval_s`.
    ///
    /// The watchdog runs even when the record does not read or its desired state cannot
    /// be handled (a site's text where smartmig's message belongs, a journal that cannot
    /// be written): slurmd must not stay stopped past its deadline for either. The error
    /// is returned unless the watchdog acted (it comes back at the next tick).
    pub fn tick(&mut self, now: f64) -> Result<Option<Report>, NodeError> {
        let rec = match self.channel.read() {
            Ok(rec) => rec,
            Err(e) => return self.watchdog_despite(e, now),
        };
        self.busy = rec.relayout_drain;
        match self.handle(rec.desired.clone(), rec.report.as_ref()) {
            Ok(Some(r)) => return Ok(Some(r)),
            Ok(None) => {}
            Err(e) => return self.watchdog_despite(e, now),
        }
        if let Some(r) = self.watchdog(rec.gres.as_deref(), now)? {
            return Ok(Some(r));
        }
        self.journal.compact_if_large()?;
        self.reannounce(rec.report, now)
    }

    /// After `error` stopped a tick: the watchdog's report if it is due and acts (the
    /// error logged), else `error`.
    fn watchdog_despite(&mut self, error: NodeError, now: f64) -> Result<Option<Report>, NodeError> {
        if !self
            .journal
            .slurmd_watchdog()
            .is_some_and(|(_, deadline)| now >= deadline)
        {
            return Err(error);
        }
        let acted = self
            .channel
            .gres()
            .and_then(|gres| self.watchdog(gres.as_deref(), now));
        match acted {
            Ok(Some(r)) => {
                log::error!("{error}; the slurmd watchdog acted all the same");
                Ok(Some(r))
            }
            Ok(None) => Err(error),
            Err(w) => {
                log::error!("slurmd watchdog: {w}");
                Err(error)
            }
        }
    }

    /// How long to wait before the next [`Agent::tick`]: short while a re-layout of this
    /// node is under way, else the idle interval, drawn within ±25% so that the agents of
    /// a large cluster spread their reads of Slurm.
    pub fn poll_delay(&self) -> Duration {
        let under_way = self.busy
            || !self.journal.slurmd_running()
            || self
                .last
                .as_ref()
                .is_some_and(|r| matches!(r.phase, Phase::Apply | Phase::Install) && r.generation > 0);
        let s = if under_way {
            self.cfg.poll_interval_s
        } else {
            self.cfg.idle_poll_interval_s * rand::rng().random_range(0.75..1.25)
        };
        Duration::from_secs_f64(s)
    }

    fn reannounce(&mut self, on_channel: Option<Report>, now: f64) -> Result<Option<Report>, NodeError> {
        let (gpus, gres_order, read_error) = self.observed();
        let why = match &on_channel {
            None => "the node's report is gone",
            Some(r) if r.read_error != read_error => "the GPUs' readability changed",
            Some(r) if read_error.is_none() && r.gpus != gpus => {
                "a device's layout differs from the last report"
            }
            Some(r) if read_error.is_none() && r.gres_order != gres_order => {
                "gres.conf's device order differs from the last report"
            }
            Some(_) if now - self.last_at >= self.cfg.announce_interval_s => "periodic",
            Some(_) => return Ok(None),
        };
        // The channel's report is what the central role sees; without it, the last one
        // this agent wrote keeps the answered generation; else a first announcement.
        let base = on_channel
            .or_else(|| self.last.clone())
            .unwrap_or_else(|| self.report(0, Phase::Start, Outcome::Done));
        let report = self.publish(Report {
            gpus,
            gres_order,
            read_error,
            slurmd_running: self.journal.slurmd_running(),
            at: now,
            ..base
        })?;
        let text = format!(
            "re-announced generation {} {:?} with {} GPU(s): {why}",
            report.generation,
            report.phase,
            report.gpus.len()
        );
        if why == "periodic" {
            log::debug!("{text}");
        } else {
            log::info!("{text}");
        }
        Ok(Some(report))
    }

    /// Handles desired state `d` unless it was answered already (on the channel, or by
    /// this agent when the channel lost its report).
    fn handle(
        &mut self,
        d: Option<Desired>,
        on_channel: Option<&Report>,
    ) -> Result<Option<Report>, NodeError> {
        let Some(d) = d else {
            return Ok(None);
        };
        if on_channel
            .into_iter()
            .chain(&self.last)
            .any(|r| r.answers(d.generation, d.phase))
        {
            return Ok(None);
        }
        log::info!(
            "generation {}: {:?} on {} GPU(s)",
            d.generation,
            d.phase,
            d.gpus.len()
        );
        let outcome = match d.phase {
            // A generation goes back at most once: a central role whose ledger missed the
            // revert (it could not be written), or that asks for Start after the watchdog
            // reverted, must not take the node forward again, to GPUs put back under a
            // gres.conf of the new layouts (or resume it as changed).
            Phase::Apply | Phase::Install | Phase::Start if self.journal.reverted(d.generation) => {
                Outcome::Failed {
                    error: format!(
                        "generation {} was reverted on this node; it does not go forward again",
                        d.generation
                    ),
                }
            }
            Phase::Apply => self.apply(&d)?,
            Phase::Install => self.install(&d)?,
            Phase::Start => self.start_slurmd(d.generation)?,
            Phase::Revert => self.revert(d.generation, &d.gpus)?,
        };
        if let Outcome::Failed { error } = &outcome {
            log::error!("generation {}: {:?} failed: {error}", d.generation, d.phase);
        }
        let report = self.report(d.generation, d.phase, outcome);
        self.publish(report).map(Some)
    }

    fn resolve(&self, gpus: &[GpuTarget]) -> Result<Vec<Target>, NodeError> {
        gpus.iter()
            .map(|g| {
                let bad = |e: &dyn std::fmt::Display| Refusal::bad_target(g.index, e);
                let model = self.cfg.catalogue.model(&g.model).map_err(|e| bad(&e))?.clone();
                let from = Layout::parse(&model, &g.from).map_err(|e| bad(&e))?;
                let to = Layout::parse(&model, &g.to).map_err(|e| bad(&e))?;
                Plan::between(&model, self.cfg.driver, &from, &to).map_err(|e| bad(&e))?;
                Ok(Target {
                    index: g.index,
                    model,
                    from,
                    to,
                })
            })
            .collect()
    }

    /// Checks every GPU before touching any; the error says why nothing was changed.
    fn check(&self, targets: &[Target]) -> Result<bool, NodeError> {
        let mut work = false;
        for t in targets {
            let st = self.backend.state(t.index, &t.model)?;
            if st.is_settled() && st.layout == t.to {
                continue;
            }
            if !st.is_settled() || st.layout != t.from {
                return Err(NodeError::Refused(Refusal::NotAsSeen {
                    gpu: t.index,
                    found: st.layout.display(&t.model).to_string(),
                    settled: st.is_settled(),
                    expected: t.from.display(&t.model).to_string(),
                }));
            }
            let plan = Plan::between(&t.model, self.cfg.driver, &t.from, &t.to)
                .map_err(|e| Refusal::bad_target(t.index, e))?;
            let busy: Vec<String> = plan
                .touched(&st.busy)
                .map(|i| display_instance(&t.model, i))
                .collect();
            if !busy.is_empty() {
                return Err(NodeError::Refused(Refusal::Busy {
                    gpu: t.index,
                    instances: busy,
                    before_any_change: true,
                }));
            }
            work = true;
        }
        Ok(work)
    }

    /// Phase Apply: the GPUs get their target layouts (or stay as they were on any
    /// failure) and the node's new gres.conf lines are staged; slurmd is not touched.
    fn apply(&mut self, d: &Desired) -> Result<Outcome, NodeError> {
        // Block names become device file names and gres.conf lines: only known types.
        let types = self.mig_types();
        if let Some(t) = d.padding.keys().find(|t| !types.contains(*t)) {
            return Ok(Outcome::Failed {
                error: format!("a padding block for `{t}`, not a MIG type of the catalogue; nothing changed"),
            });
        }
        let targets = match self.resolve(&d.gpus) {
            Ok(t) => t,
            Err(e) => return Ok(Outcome::Failed { error: e.to_string() }),
        };
        if let Err(error) = self.check_order(&targets, d) {
            return Ok(Outcome::Failed { error });
        }
        match self.check(&targets) {
            Err(e) => return Ok(Outcome::Failed { error: e.to_string() }),
            Ok(false) => return self.stage(d.generation, &d.padding, &d.order),
            Ok(true) => {}
        }
        if let Err(e) = self.prepare_padding(&targets, &d.padding) {
            return Ok(Outcome::Failed {
                error: format!("{e}; nothing changed"),
            });
        }
        self.journal.append(Record::Begin {
            generation: d.generation,
            gpus: d.gpus.clone(),
            padding: d.padding.clone(),
            order: d.order.clone(),
        })?;
        match self.move_all(&targets, |t| &t.to) {
            Ok(()) => self.finish(d.generation, &targets, &d.padding, &d.order),
            Err(e) => self.roll_back(d.generation, &targets, e.to_string()),
        }
    }

    /// After the GPUs reached `targets`: journals the end and the gres.conf lines of the
    /// devices as they are now, or, when those lines cannot be made, rolls the GPUs back,
    /// so that a failed Apply always leaves the devices gres.conf describes.
    fn finish(
        &mut self,
        generation: u64,
        targets: &[Target],
        padding: &BTreeMap<String, u32>,
        order: &[String],
    ) -> Result<Outcome, NodeError> {
        match self.render_lines(padding, order) {
            Ok(lines) => {
                self.end(generation, Ending::Done)?;
                self.journal.append(Record::Staged { generation, lines })?;
                Ok(Outcome::Done)
            }
            Err(e) => self.roll_back(generation, targets, format!("cannot stage gres.conf: {e}")),
        }
    }

    /// Journals the node's gres.conf lines as the devices are now, padded to `padding`'s
    /// blocks (their device files made) and in `order`, for `Install`, when no GPU had to
    /// change.
    fn stage(
        &mut self,
        generation: u64,
        padding: &BTreeMap<String, u32>,
        order: &[String],
    ) -> Result<Outcome, NodeError> {
        match self.render_lines(padding, order) {
            Ok(lines) => {
                self.journal.append(Record::Staged { generation, lines })?;
                Ok(Outcome::Done)
            }
            Err(e) => Ok(Outcome::Failed {
                error: format!("cannot stage gres.conf: {e}"),
            }),
        }
    }

    /// Phase Install: the staged lines go into gres.conf (the file before is kept), then
    /// slurmd stops if asked, with the watchdog armed.
    fn install(&mut self, d: &Desired) -> Result<Outcome, NodeError> {
        let Some(lines) = self.journal.staged(d.generation).map(str::to_string) else {
            return Ok(Outcome::Failed {
                error: format!(
                    "nothing staged for generation {} (its Apply did not run here)",
                    d.generation
                ),
            });
        };
        // Run again (a crash, or a report that did not reach the channel), the content
        // kept the first time is the one from before the generation: keep it.
        if !self.journal.installed(d.generation) {
            if let Err(e) = durable::keep_previous(&self.cfg.gres_conf) {
                return Ok(Outcome::Failed { error: e.to_string() });
            }
            self.journal.append(Record::Installing {
                generation: d.generation,
            })?;
        }
        if let Err(e) = self.install_lines(&lines, true) {
            return Ok(Outcome::Failed { error: e.to_string() });
        }
        self.journal.append(Record::Installed {
            generation: d.generation,
        })?;
        if !d.stop_slurmd {
            return Ok(Outcome::Done);
        }
        // Armed before the stop: a crash right after it must still find the deadline. Run
        // again, the stop keeps the deadline it was first given.
        if !matches!(self.journal.slurmd_watchdog(), Some((g, _)) if g == d.generation) {
            self.journal.append(Record::Slurmd {
                running: false,
                watchdog: Some((d.generation, unix_now() + d.slurmd_budget_s)),
            })?;
        }
        match command::run(&self.cfg.slurmd_stop, COMMAND_TIMEOUT) {
            Ok(()) => Ok(Outcome::Done),
            // slurmd may run on with the old layout loaded, or have stopped after all (a
            // stop that outlived its timeout): the watchdog stays armed, and the Revert
            // the central role answers with starts it (a start of a running slurmd does
            // nothing, as `systemctl start` does).
            Err(e) => Ok(Outcome::Failed { error: e.to_string() }),
        }
    }

    /// Writes `lines` as the node's block of gres.conf, durably: with `in_place` (a
    /// re-layout, slurmd running, the file before kept by the caller) the rest of the file
    /// stays as it is; without (at start, before slurmd) this node's MIG lines outside the
    /// block are taken over.
    fn install_lines(&self, lines: &str, in_place: bool) -> Result<(), NodeError> {
        let path = &self.cfg.gres_conf;
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(NodeError::io(path, e)),
        };
        let new = gres::merge(&text, &self.cfg.node, lines, &self.mig_types(), !in_place)?;
        durable::write(path, new.as_bytes())?;
        Ok(())
    }

    fn mig_types(&self) -> HashSet<String> {
        self.cfg
            .catalogue
            .models
            .iter()
            .flat_map(|m| m.profiles.iter().map(|p| p.name.clone()))
            .collect()
    }

    /// Phase Start (Slurm has generation `generation`'s layout): slurmd runs again; the
    /// layouts become the ones to restore after a reboot.
    fn start_slurmd(&mut self, generation: u64) -> Result<Outcome, NodeError> {
        if let Err(e) = command::run(&self.cfg.slurmd_start, COMMAND_TIMEOUT) {
            return Ok(Outcome::Failed { error: e.to_string() });
        }
        self.journal.append(Record::Slurmd {
            running: true,
            watchdog: None,
        })?;
        if let Some(gpus) = self.layouts_after(generation) {
            self.journal.append(Record::Layouts { gpus })?;
        }
        Ok(Outcome::Done)
    }

    /// The layouts to restore after a reboot once `generation` is in service: read from
    /// the devices, or, when they cannot be read, the last recorded ones with the
    /// generation's targets over them if its driver calls ended done (a reboot must not
    /// bring back the layouts from before, which gres.conf and slurmctld no longer
    /// describe). None when neither is known: the last record stays.
    fn layouts_after(&self, generation: u64) -> Option<Vec<GpuActual>> {
        let error = match self.actual() {
            Ok(gpus) => return Some(gpus),
            Err(e) => e,
        };
        let targets = match self.journal.ending(generation) {
            Some(Ending::Done) => self.resolve(&self.journal.plan_of(generation).unwrap_or_default()),
            _ => {
                log::error!(
                    "generation {generation}: cannot read the GPUs ({error}) and the re-layout did not end done; the layouts recorded before stay the ones to restore"
                );
                return None;
            }
        };
        let targets = match targets {
            Ok(t) => t,
            Err(e) => {
                log::error!("generation {generation}: cannot read the GPUs ({error}) nor resolve the plan ({e}); the layouts recorded before stay the ones to restore");
                return None;
            }
        };
        let mut gpus = self
            .journal
            .layouts()
            .map(<[GpuActual]>::to_vec)
            .unwrap_or_default();
        for t in targets {
            let g = GpuActual {
                index: t.index,
                model: t.model.key.clone(),
                layout: layout_text(&t.model, &t.to),
            };
            match gpus.iter_mut().find(|r| r.index == t.index) {
                Some(r) => *r = g,
                None => gpus.push(g),
            }
        }
        gpus.sort_by_key(|g| g.index);
        log::warn!(
            "generation {generation}: cannot read the GPUs ({error}); recorded the layouts its plan left as the ones to restore"
        );
        Some(gpus)
    }

    /// Phase Revert: the GPUs back to `from`, the gres.conf from before the generation,
    /// slurmd running. slurmd is never (re)started while the gres.conf it would read is
    /// not the one put back, which slurmctld has: it stays stopped, the revert fails, and
    /// the armed watchdog runs it again at each tick until the file is back.
    fn revert(&mut self, generation: u64, gpus: &[GpuTarget]) -> Result<Outcome, NodeError> {
        let gpus = if gpus.is_empty() {
            self.journal.plan_of(generation).unwrap_or_default()
        } else {
            gpus.to_vec()
        };
        let installed = self.journal.installed(generation);
        // slurmd runs again after an Install that stopped it (the watchdog started it with
        // the generation's gres.conf), or a restart of it by a revert cut short may have
        // left it running on that file: it must load the gres.conf put back below. Asked
        // again for a generation reverted already (at boot, say) after an Install that
        // stopped it, the central role has just put Slurm's definitions of the node back,
        // which slurmd (started meanwhile, while they held the generation's) must read.
        let restart = (installed || self.journal.reverted(generation))
            && ((self.journal.slurmd_running() && self.journal.stopped_for(generation))
                || self.journal.restart_begun(generation));
        let mut errors = Vec::new();
        match self.resolve(&gpus) {
            Ok(targets) => match self.move_all(&targets, |t| &t.from) {
                // A reboot from now on brings back the layouts the GPUs went back to, not
                // the generation's (which the watchdog may have recorded when it started
                // slurmd).
                Ok(()) => {
                    if let Ok(gpus) = self.actual() {
                        self.journal.append(Record::Layouts { gpus })?;
                    }
                }
                Err(e) => errors.push(format!("GPUs not back to their layouts: {e}")),
            },
            Err(e) => errors.push(e.to_string()),
        }
        let restored = !installed || self.put_gres_conf_back(&mut errors);
        if restart && restored {
            // Armed at once: if the start below fails, the next tick's watchdog tries again.
            if self.journal.slurmd_running() {
                self.journal.append(Record::Slurmd {
                    running: false,
                    watchdog: Some((generation, unix_now())),
                })?;
            }
            if let Err(e) = command::run(&self.cfg.slurmd_stop, COMMAND_TIMEOUT) {
                errors.push(format!("slurmd not restarted with the gres.conf put back: {e}"));
            }
        }
        if !self.journal.slurmd_running() {
            if !restored {
                errors.push("slurmd left stopped: it would read a gres.conf slurmctld does not share".into());
            } else if let Err(e) = self.start_slurmd_only() {
                errors.push(e.to_string());
            }
        }
        // Recorded last, once gres.conf is back and slurmd runs on it: a revert cut short
        // before runs again whole. A journal that cannot be written must not keep slurmd
        // stopped: the revert is recorded at a later run (it restores the same file again).
        if restored {
            if let Err(e) = self.journal.append(Record::Reverted { generation }) {
                errors.push(format!("revert not journaled: {e}"));
            }
        }
        Ok(if errors.is_empty() {
            Outcome::Done
        } else {
            Outcome::Failed {
                error: errors.join("; "),
            }
        })
    }

    /// Puts back the gres.conf saved before a generation's Install; whether it did (why
    /// not is pushed on `errors`).
    fn put_gres_conf_back(&self, errors: &mut Vec<String>) -> bool {
        match durable::restore_previous(&self.cfg.gres_conf) {
            Ok(true) => true,
            // Install saved it before writing: gone since (removed by hand, or a cleanup),
            // the file would stay the generation's under slurmctld's layout.
            Ok(false) => {
                let saved = durable::previous_path(&self.cfg.gres_conf);
                errors.push(format!(
                    "gres.conf not put back: its saved copy {} is gone",
                    saved.display()
                ));
                false
            }
            Err(e) => {
                errors.push(format!("gres.conf not put back: {e}"));
                false
            }
        }
    }

    /// Starts slurmd (a start of a running slurmd does nothing) and journals it running.
    pub fn start_slurmd_only(&mut self) -> Result<(), NodeError> {
        command::run(&self.cfg.slurmd_start, COMMAND_TIMEOUT)?;
        self.journal.append(Record::Slurmd {
            running: true,
            watchdog: None,
        })
    }

    /// slurmd was stopped for a re-layout and its deadline has passed with no `Start` or
    /// `Revert` from the central role: start it again, with the gres.conf that matches
    /// what slurmctld has (the new lines if slurmctld has the new layout, else everything
    /// reverted). Waits while slurmctld does not answer (it cannot mark the node down then).
    fn watchdog(&mut self, slurm_gres: Option<&str>, now: f64) -> Result<Option<Report>, NodeError> {
        let Some((generation, deadline)) = self.journal.slurmd_watchdog() else {
            return Ok(None);
        };
        if now < deadline {
            return Ok(None);
        }
        let Some(slurm_gres) = slurm_gres else {
            log::warn!("watchdog: slurmd stopped past its deadline and slurmctld's view of the node is unknown; retrying");
            return Ok(None);
        };
        let slurm = match mig_counts(slurm_gres, &self.mig_types()) {
            Ok(c) => c,
            // Never read as "no MIG GPUs", which would revert a node slurmctld has new.
            Err(e) => {
                log::warn!("watchdog: slurmd stopped past its deadline and slurmctld's GRES does not parse ({e}); retrying");
                return Ok(None);
            }
        };
        // From the lines the generation installed, not the devices: the decision must not
        // wait on an NVML that cannot be read while slurmd is down.
        let new = match self.journal.staged(generation) {
            Some(lines) => staged_counts(lines, &self.mig_types()),
            None => self.counts_of(&self.actual()?),
        };
        let (phase, outcome, note) = if slurm == new {
            let note = format!(
                "generation {generation}: slurmd stopped past its deadline; slurmctld has the new layout, started slurmd with it"
            );
            (Phase::Start, self.start_slurmd(generation)?, note)
        } else {
            let note = format!(
                "generation {generation}: slurmd stopped past its deadline; slurmctld has {slurm_gres}, so the node was reverted and slurmd started"
            );
            (Phase::Revert, self.revert(generation, &[])?, note)
        };
        log::warn!("watchdog: {note}");
        let mut report = self.report(generation, phase, outcome);
        report.watchdog = Some(note);
        self.publish(report).map(Some)
    }

    /// Instances per MIG type over `gpus`.
    fn counts_of(&self, gpus: &[GpuActual]) -> BTreeMap<String, u32> {
        let text = crate::central::gres_of_report(gpus);
        // Written by gres_of_report itself: it parses.
        mig_counts(&text, &self.mig_types()).unwrap_or_default()
    }

    /// Brings every target GPU to the layout `goal` picks, settling interrupted instances.
    fn move_all(&mut self, targets: &[Target], goal: impl Fn(&Target) -> &Layout) -> Result<(), NodeError> {
        for t in targets {
            self.move_gpu(t, goal(t))?;
        }
        Ok(())
    }

    fn move_gpu(&mut self, t: &Target, goal: &Layout) -> Result<(), NodeError> {
        let st = self.backend.state(t.index, &t.model)?;
        // A GPU instance without its compute instance: give it one if the goal keeps it,
        // else destroy it (its compute instance is already gone).
        for i in &st.without_compute {
            let step = if goal.contains(i) {
                Step::CreateCompute(*i)
            } else {
                Step::DestroyGpu(*i)
            };
            self.run_step(t, step)?;
        }
        let st = self.backend.state(t.index, &t.model)?;
        let plan = Plan::between(&t.model, self.cfg.driver, &st.layout, goal)
            .map_err(|e| Refusal::bad_target(t.index, e))?;
        if plan.touches(&st.busy) {
            let busy: Vec<String> = plan
                .touched(&st.busy)
                .map(|i| display_instance(&t.model, i))
                .collect();
            return Err(NodeError::Refused(Refusal::Busy {
                gpu: t.index,
                instances: busy,
                before_any_change: false,
            }));
        }
        for step in plan.steps {
            self.run_step(t, step)?;
        }
        Ok(())
    }

    fn run_step(&mut self, t: &Target, step: Step) -> Result<(), NodeError> {
        let n = self.journal.next_step();
        let text = step.describe(&t.model);
        self.journal.append(Record::Step {
            n,
            gpu: t.index,
            step: text.clone(),
        })?;
        log::info!("GPU {}: {text}", t.index);
        self.backend.apply(t.index, &t.model, step)?;
        self.journal.append(Record::Done { n })
    }

    fn roll_back(
        &mut self,
        generation: u64,
        targets: &[Target],
        error: String,
    ) -> Result<Outcome, NodeError> {
        log::error!("re-layout {generation}: {error}; rolling back");
        let (ending, error) = match self.move_all(targets, |t| &t.from) {
            Ok(()) => (Ending::RolledBack { error: error.clone() }, error),
            Err(e) => {
                let error = format!("{error}; rolling back failed too: {e}");
                (Ending::Failed { error: error.clone() }, error)
            }
        };
        self.end(generation, ending)?;
        Ok(Outcome::Failed { error })
    }

    fn end(&mut self, generation: u64, ending: Ending) -> Result<(), NodeError> {
        self.journal.append(Record::End { generation, ending })
    }

    /// Every MIG GPU of the node with a catalogue model, with its state.
    fn mig_gpus(&self) -> Result<Vec<(u32, GpuModel, GpuState)>, NodeError> {
        let mut out = Vec::new();
        for g in self.backend.gpus()? {
            let Some(key) = g.model.as_ref().filter(|_| g.mig_enabled) else {
                log::debug!(
                    "GPU {} ({}) is not a MIG GPU smartmig knows; left alone",
                    g.index,
                    g.name
                );
                continue;
            };
            let Ok(model) = self.cfg.catalogue.model(key) else {
                continue;
            };
            let model = model.clone();
            let st = self.backend.state(g.index, &model)?;
            out.push((g.index, model, st));
        }
        Ok(out)
    }

    /// Before any device changes: the node's instances once `targets` are reached must fit
    /// `blocks`, and the padding device files they need are made (so that staging cannot
    /// fail on them after the GPUs changed).
    fn prepare_padding(&self, targets: &[Target], blocks: &BTreeMap<String, u32>) -> Result<(), NodeError> {
        if blocks.is_empty() {
            return Ok(());
        }
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for (index, model, st) in self.mig_gpus()? {
            let layout = targets
                .iter()
                .find(|t| t.index == index)
                .map_or(&st.layout, |t| &t.to);
            for i in layout.instances() {
                if let Some(p) = model.profiles.get(i.profile) {
                    *counts.entry(p.name.clone()).or_default() += 1;
                }
            }
        }
        let dir = self.cfg.state_dir.join("pad");
        let padding = gres::Padding {
            blocks,
            dir: &dir,
            order: &[],
        };
        gres::make_padding_files(&padding.devices(&counts)?).map_err(|e| NodeError::io(&dir, e))
    }

    /// With padding, the device order `d` asks for must list the node's devices once the
    /// targets are reached, each once (checked before any device changes); an order
    /// without padding is refused too (only padded blocks are written in one).
    fn check_order(&self, targets: &[Target], d: &Desired) -> Result<(), String> {
        if d.order.is_empty() {
            return Ok(());
        }
        if d.padding.is_empty() {
            return Err("a device order without padding blocks; nothing changed".into());
        }
        let gpus = self.mig_gpus().map_err(|e| e.to_string())?;
        let mut after: Vec<String> = Vec::new();
        for (index, model, st) in &gpus {
            let layout = targets
                .iter()
                .find(|t| t.index == *index)
                .map_or(&st.layout, |t| &t.to);
            after.extend(
                layout
                    .instances()
                    .iter()
                    .map(|i| device_ref(*index, &display_instance(model, i))),
            );
        }
        gres::check_order(&d.order, &after).map_err(|e| format!("{e} afterwards; nothing changed"))
    }

    /// The node's gres.conf lines for the devices as they are now, with padding records
    /// filling `blocks` (none when empty) and the devices in `order` (with blocks; empty:
    /// GPU and placement order); makes the padding device files they name.
    fn render_lines(&self, blocks: &BTreeMap<String, u32>, order: &[String]) -> Result<String, NodeError> {
        let gpus = self.mig_gpus()?;
        let view: Vec<(u32, &GpuModel, &GpuState)> = gpus.iter().map(|(i, m, s)| (*i, m, s)).collect();
        let dir = self.cfg.state_dir.join("pad");
        let padding = gres::Padding {
            blocks,
            dir: &dir,
            order,
        };
        let lines = gres::render(&self.cfg.node, &view, Some(&padding))?;
        if !blocks.is_empty() {
            gres::make_padding_files(&padding.devices(&gres::instance_counts(&view))?)
                .map_err(|e| NodeError::io(&dir, e))?;
        }
        Ok(lines)
    }

    /// Every MIG GPU's actual layout, as reports carry it.
    fn actual(&self) -> Result<Vec<GpuActual>, NodeError> {
        Ok(self
            .mig_gpus()?
            .iter()
            .map(|(index, model, st)| GpuActual {
                index: *index,
                model: model.key.clone(),
                layout: layout_text(model, &st.layout),
            })
            .collect())
    }

    /// A report on `generation`/`phase`; a GPU read that fails is a `read_error`, never an
    /// empty GPU list the central role could take for the truth.
    fn report(&self, generation: u64, phase: Phase, outcome: Outcome) -> Report {
        let (gpus, gres_order, read_error) = self.observed();
        if let Some(e) = &read_error {
            log::error!("cannot read the node for the report: {e}");
        }
        Report {
            version: CHANNEL_VERSION,
            generation,
            phase,
            outcome,
            gpus,
            gres_order,
            read_error,
            slurmd_running: self.journal.slurmd_running(),
            watchdog: None,
            at: unix_now(),
        }
    }

    /// The node as a report describes it: every MIG GPU's layout and the device order of
    /// the installed gres.conf block, or why they cannot be read (then neither is given:
    /// the central role must not place device indices by a guess).
    fn observed(&self) -> (Vec<GpuActual>, Vec<String>, Option<String>) {
        // The file is read for every report rather than remembered from the last install:
        // the order reported must be the installed file's, whoever wrote it last (a revert,
        // a restore, an admin); it is one small file per report.
        let read = self.actual().and_then(|gpus| {
            let order = match std::fs::read_to_string(&self.cfg.gres_conf) {
                Ok(t) => gres::recorded_order(&t, &self.cfg.node)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(NodeError::io(&self.cfg.gres_conf, e)),
            };
            Ok((gpus, order))
        });
        match read {
            Ok((gpus, order)) => (gpus, order, None),
            Err(e) => (Vec::new(), Vec::new(), Some(e.to_string())),
        }
    }
}

/// Devices per MIG type in gres.conf `lines` (a `File=` or `MultipleFiles=` line is one).
fn staged_counts(lines: &str, mig_types: &HashSet<String>) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for line in lines.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let ty = line.split_whitespace().find_map(|w| w.strip_prefix("Type="));
        if let Some(ty) = ty.filter(|t| mig_types.contains(*t)) {
            *out.entry(ty.to_string()).or_default() += 1;
        }
    }
    out
}

/// Instances per MIG type in a GRES string (`gpu:3g.20gb:2(S:0),gpu:a100:1`), counting
/// only the types in `mig_types`.
fn mig_counts(
    gres: &str,
    mig_types: &HashSet<String>,
) -> Result<BTreeMap<String, u32>, crate::slurm::GresError> {
    let mut out = BTreeMap::new();
    for g in crate::slurm::parse_gres(gres, "node Gres")? {
        if mig_types.contains(&g.gpu_type) {
            *out.entry(g.gpu_type).or_default() += g.count;
        }
    }
    Ok(out)
}

/// A layout as reports and the journal write it (an empty GPU: the empty string).
fn layout_text(model: &GpuModel, layout: &Layout) -> String {
    layout.display(model).to_string().replace("(empty)", "")
}

#[cfg(test)]
#[path = "agent_tests.rs"]
mod tests;
