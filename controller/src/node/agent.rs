//! The node agent: checks, plans, journals and runs re-layouts, and recovers after a crash.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use smartmig_core::mig::layout::display_instance;
use smartmig_core::mig::{Catalogue, Driver, GpuModel, Layout, Plan, Step};
use smartmig_gpu::{GpuBackend, GpuState};

use super::journal::{Journal, Record};
use super::{gres, NodeChannel, NodeError};
use crate::channel::{Desired, GpuActual, GpuTarget, Outcome, Phase, Report, CHANNEL_VERSION};

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
}

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
    /// The last report this agent wrote (or found on the channel at start).
    last: Option<Report>,
    /// When `last` was written (Unix seconds).
    last_at: f64,
}

/// Unix seconds now.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Agent {
    /// An agent over a backend and a channel; opens the journal in `state_dir`.
    pub fn new(
        cfg: AgentConfig,
        backend: Box<dyn GpuBackend>,
        channel: Box<dyn NodeChannel>,
    ) -> Result<Agent, NodeError> {
        let journal = Journal::open(&cfg.state_dir)?;
        Ok(Agent {
            cfg,
            backend,
            channel,
            journal,
            last: None,
            last_at: 0.0,
        })
    }

    /// The journal.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Finishes or rolls back a re-layout a previous run left open, and reports it.
    pub fn recover(&mut self) -> Result<Option<Report>, NodeError> {
        let Some((generation, gpus)) = self.journal.open_plan() else {
            return Ok(None);
        };
        log::warn!("re-layout {generation} was interrupted; reconciling the journal with the devices");
        let outcome = match self.resolve(&gpus) {
            Err(e) => {
                self.end(generation, format!("failed: {e}"))?;
                Outcome::Failed { error: e.to_string() }
            }
            Ok(targets) => match self.move_all(&targets, |t| &t.to) {
                Ok(()) => {
                    log::info!("re-layout {generation}: finished the interrupted plan");
                    self.finish_apply(generation)?
                }
                Err(e) => {
                    let why = format!("the interrupted re-layout could not be finished: {e}");
                    self.roll_back(generation, &targets, why)?
                }
            },
        };
        let report = self.report(generation, Phase::Apply, outcome);
        self.publish(report).map(Some)
    }

    /// Writes `report` to the channel and remembers it as the last one.
    fn publish(&mut self, report: Report) -> Result<Report, NodeError> {
        self.channel.write_report(&report)?;
        self.last = Some(report.clone());
        self.last_at = report.at;
        Ok(report)
    }

    /// Publishes the node's layouts when it has never reported (generation 0, a finished
    /// StartSlurmd): the central role manages a node only once it knows its layouts.
    pub fn announce(&mut self) -> Result<Option<Report>, NodeError> {
        if let Some(r) = self.channel.last_report()? {
            self.last_at = unix_now();
            self.last = Some(r);
            return Ok(None);
        }
        let report = self.publish(self.report(0, Phase::StartSlurmd, Outcome::Done))?;
        log::info!("announced {} GPU(s) to the central role", report.gpus.len());
        Ok(Some(report))
    }

    /// Reads the desired state and handles it unless it was answered already.
    pub fn poll(&mut self) -> Result<Option<Report>, NodeError> {
        let (desired, on_channel) = self.channel.read()?;
        self.handle(desired, on_channel.as_ref())
    }

    /// One turn of the agent's loop at `now` (Unix seconds): handles the desired state
    /// like [`Agent::poll`]; when there is nothing to do, re-announces the last report with
    /// the devices' current layouts if the channel lost it, if a layout differs from it,
    /// or every `announce_interval_s`.
    pub fn tick(&mut self, now: f64) -> Result<Option<Report>, NodeError> {
        let (desired, on_channel) = self.channel.read()?;
        if let Some(r) = self.handle(desired, on_channel.as_ref())? {
            return Ok(Some(r));
        }
        self.reannounce(on_channel, now)
    }

    fn reannounce(&mut self, on_channel: Option<Report>, now: f64) -> Result<Option<Report>, NodeError> {
        let gpus = self.actual()?;
        let why = match &on_channel {
            None => "the node's report is gone",
            Some(r) if r.gpus != gpus => "a device's layout differs from the last report",
            Some(_) if now - self.last_at >= self.cfg.announce_interval_s => "periodic",
            Some(_) => return Ok(None),
        };
        // The channel's report is what the central role sees; without it, the last one
        // this agent wrote keeps the answered generation; else a first announcement.
        let base = on_channel
            .or_else(|| self.last.clone())
            .unwrap_or_else(|| self.report(0, Phase::StartSlurmd, Outcome::Done));
        let report = self.publish(Report {
            gpus,
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
            Phase::Apply => self.apply(&d)?,
            Phase::StartSlurmd => match run(&self.cfg.slurmd_start) {
                Ok(()) => {
                    self.journal.append(Record::Slurmd { running: true })?;
                    Outcome::Done
                }
                Err(e) => Outcome::Failed { error: e.to_string() },
            },
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
                let bad = |e: String| NodeError::Refused(format!("GPU {}: {e}", g.index));
                let model = self
                    .cfg
                    .catalogue
                    .model(&g.model)
                    .map_err(|e| bad(e.to_string()))?
                    .clone();
                let from = Layout::parse(&model, &g.from).map_err(|e| bad(e.to_string()))?;
                let to = Layout::parse(&model, &g.to).map_err(|e| bad(e.to_string()))?;
                Plan::between(&model, self.cfg.driver, &from, &to).map_err(|e| bad(e.to_string()))?;
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
                return Err(NodeError::Refused(format!(
                    "GPU {}: the device has `{}`{}, the central role saw `{}`; nothing changed",
                    t.index,
                    st.layout.display(&t.model),
                    if st.is_settled() { "" } else { " (unsettled)" },
                    t.from.display(&t.model)
                )));
            }
            let plan = Plan::between(&t.model, self.cfg.driver, &t.from, &t.to)
                .map_err(|e| NodeError::Refused(format!("GPU {}: {e}", t.index)))?;
            let busy: Vec<String> = plan
                .touched(&st.busy)
                .map(|i| display_instance(&t.model, i))
                .collect();
            if !busy.is_empty() {
                return Err(NodeError::Refused(format!(
                    "GPU {}: the plan destroys busy instance(s) {}; nothing changed",
                    t.index,
                    busy.join(" ")
                )));
            }
            work = true;
        }
        Ok(work)
    }

    fn apply(&mut self, d: &Desired) -> Result<Outcome, NodeError> {
        let targets = match self.resolve(&d.gpus) {
            Ok(t) => t,
            Err(e) => return Ok(Outcome::Failed { error: e.to_string() }),
        };
        match self.check(&targets) {
            Err(NodeError::Refused(e)) => return Ok(Outcome::Failed { error: e }),
            Err(e) => return Ok(Outcome::Failed { error: e.to_string() }),
            Ok(false) => return self.finish_apply(d.generation),
            Ok(true) => {}
        }
        self.journal.append(Record::Begin {
            generation: d.generation,
            gpus: d.gpus.clone(),
        })?;
        match self.move_all(&targets, |t| &t.to) {
            Ok(()) => self.finish_apply(d.generation),
            Err(e) => self.roll_back(d.generation, &targets, e.to_string()),
        }
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
            .map_err(|e| NodeError::Refused(format!("GPU {}: {e}", t.index)))?;
        if plan.touches(&st.busy) {
            let busy: Vec<String> = plan
                .touched(&st.busy)
                .map(|i| display_instance(&t.model, i))
                .collect();
            return Err(NodeError::Refused(format!(
                "GPU {}: the plan destroys busy instance(s) {}",
                t.index,
                busy.join(" ")
            )));
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
        let mut error = error;
        let result = match self.move_all(targets, |t| &t.from) {
            Ok(()) => format!("rolled-back: {error}"),
            Err(e) => {
                error = format!("{error}; rolling back failed too: {e}");
                format!("failed: {error}")
            }
        };
        if let Err(e) = self.write_gres() {
            error = format!("{error}; writing gres.conf failed: {e}");
        }
        self.end(generation, result)?;
        Ok(Outcome::Failed { error })
    }

    /// The devices have their targets: write gres.conf, stop slurmd, close the journal.
    fn finish_apply(&mut self, generation: u64) -> Result<Outcome, NodeError> {
        let mut outcome = Outcome::Done;
        if let Err(e) = self.write_gres() {
            outcome = Outcome::Failed { error: e.to_string() };
        } else {
            match run(&self.cfg.slurmd_stop) {
                Ok(()) => self.journal.append(Record::Slurmd { running: false })?,
                Err(e) => outcome = Outcome::Failed { error: e.to_string() },
            }
        }
        if self.journal.open_plan().is_some() {
            self.end(generation, "done".into())?;
        }
        Ok(outcome)
    }

    fn end(&mut self, generation: u64, result: String) -> Result<(), NodeError> {
        self.journal.append(Record::End { generation, result })
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

    /// Rewrites gres.conf in place (and fsyncs it); a torn file is rewritten by recovery.
    fn write_gres(&self) -> Result<(), NodeError> {
        let gpus = self.mig_gpus()?;
        let view: Vec<(u32, &GpuModel, &GpuState)> = gpus.iter().map(|(i, m, s)| (*i, m, s)).collect();
        let text = gres::render(&self.cfg.node, &view);
        write_in_place(&self.cfg.gres_conf, text.as_bytes())
    }

    /// Every MIG GPU's actual layout, as reports carry it.
    fn actual(&self) -> Result<Vec<GpuActual>, NodeError> {
        Ok(self
            .mig_gpus()?
            .iter()
            .map(|(index, model, st)| GpuActual {
                index: *index,
                model: model.key.clone(),
                layout: st.layout.display(model).to_string().replace("(empty)", ""),
            })
            .collect())
    }

    fn report(&self, generation: u64, phase: Phase, outcome: Outcome) -> Report {
        let gpus = self.actual().unwrap_or_else(|e| {
            log::error!("cannot read the GPUs for the report: {e}");
            Vec::new()
        });
        Report {
            smartmig: CHANNEL_VERSION,
            generation,
            phase,
            outcome,
            gpus,
            slurmd_running: self.journal.slurmd_running(),
            at: unix_now(),
        }
    }
}

fn write_in_place(path: &Path, bytes: &[u8]) -> Result<(), NodeError> {
    let mut f = std::fs::File::create(path).map_err(|e| NodeError::io(path, e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| NodeError::io(path, e))
}

/// Runs a configured command; a non-zero exit is an error carrying its stderr.
fn run(cmd: &[String]) -> Result<(), NodeError> {
    let line = cmd.join(" ");
    let Some((prog, args)) = cmd.split_first() else {
        return Err(NodeError::Command {
            command: line,
            reason: "empty command".into(),
        });
    };
    let out = Command::new(prog)
        .args(args)
        .output()
        .map_err(|e| NodeError::Command {
            command: line.clone(),
            reason: e.to_string(),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NodeError::Command {
            command: line,
            reason: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::spool::SpoolChannel;
    use smartmig_gpu::simulated::{FailFault, Faults, Simulated};

    struct Node {
        dir: tempfile::TempDir,
        sim: Simulated,
        model: GpuModel,
    }

    impl Node {
        fn new(layouts: &[&str]) -> Node {
            let dir = tempfile::tempdir().unwrap();
            let model = Catalogue::embedded().model("a100-40gb").unwrap().clone();
            let sim = Simulated::create_layouts(&dir.path().join("sim"), &model, layouts).unwrap();
            Node { dir, sim, model }
        }

        fn path(&self, rel: &str) -> PathBuf {
            self.dir.path().join(rel)
        }

        fn agent(&self) -> Agent {
            let log = self.path("slurmd.log").display().to_string();
            let cfg = AgentConfig {
                node: "n1".into(),
                driver: Driver::R510,
                catalogue: Catalogue::embedded(),
                state_dir: self.path("state"),
                gres_conf: self.path("gres.conf"),
                slurmd_stop: vec!["sh".into(), "-c".into(), format!("echo stop >> {log}")],
                slurmd_start: vec!["sh".into(), "-c".into(), format!("echo start >> {log}")],
                announce_interval_s: 300.0,
            };
            let ch = SpoolChannel::open(&self.path("spool"), "n1").unwrap();
            Agent::new(cfg, Box::new(self.sim.clone()), Box::new(ch)).unwrap()
        }

        fn desire(&self, generation: u64, phase: Phase, gpus: &[(u32, &str, &str)]) {
            let ch = SpoolChannel::open(&self.path("spool"), "n1").unwrap();
            ch.write_desired(&Desired {
                smartmig: CHANNEL_VERSION,
                generation,
                phase,
                gpus: gpus
                    .iter()
                    .map(|(i, from, to)| GpuTarget {
                        index: *i,
                        model: "A100-SXM4-40GB".into(),
                        from: from.to_string(),
                        to: to.to_string(),
                    })
                    .collect(),
            })
            .unwrap();
        }

        fn layout(&self, gpu: u32) -> String {
            let st = self.sim.state(gpu, &self.model).unwrap();
            assert!(st.is_settled(), "GPU {gpu} is left unsettled: {st:?}");
            let text = st.layout.display(&self.model).to_string();
            text
        }

        fn slurmd_log(&self) -> String {
            std::fs::read_to_string(self.path("slurmd.log")).unwrap_or_default()
        }
    }

    #[test]
    fn a_plan_is_applied_gres_conf_written_and_slurmd_stopped_then_started() {
        let n = Node::new(&["7g@0", "4g@0 3g@4"]);
        let mut a = n.agent();
        n.desire(1, Phase::Apply, &[(0, "7g.40gb@0", "3g.20gb@0,3g.20gb@4")]);
        let r = a.poll().unwrap().unwrap();
        assert_eq!(r.outcome, Outcome::Done);
        assert_eq!(r.gpus[0].layout, "3g.20gb@0 3g.20gb@4");
        assert_eq!(r.gpus[1].layout, "4g.20gb@0 3g.20gb@4");
        assert!(!r.slurmd_running);
        assert_eq!(n.layout(0), "3g.20gb@0 3g.20gb@4");
        assert!(a.journal().is_closed());
        let steps = a
            .journal()
            .records()
            .iter()
            .filter(|r| matches!(r, Record::Step { .. }))
            .count();
        assert_eq!(steps, 6);
        let gres = std::fs::read_to_string(n.path("gres.conf")).unwrap();
        let files: Vec<&str> = gres
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.rsplit('/').next().unwrap())
            .collect();
        assert_eq!(files, ["nvidia0", "nvidia4", "nvidia8", "nvidia12"]);
        assert!(gres.contains("NodeName=n1 Name=gpu Type=3g.20gb File="), "{gres}");
        assert_eq!(n.slurmd_log(), "stop\n");
        // The same generation and phase is not handled twice.
        assert!(a.poll().unwrap().is_none());
        n.desire(2, Phase::StartSlurmd, &[]);
        let r = a.poll().unwrap().unwrap();
        assert_eq!(
            (r.generation, r.outcome.clone(), r.slurmd_running),
            (2, Outcome::Done, true)
        );
        assert_eq!(n.slurmd_log(), "stop\nstart\n");
    }

    #[test]
    fn a_device_that_differs_from_what_central_saw_is_not_touched() {
        let n = Node::new(&["7g@0"]);
        let mut a = n.agent();
        n.desire(1, Phase::Apply, &[(0, "4g@0 3g@4", "3g@0 3g@4")]);
        let r = a.poll().unwrap().unwrap();
        let Outcome::Failed { error } = &r.outcome else {
            panic!("{r:?}")
        };
        assert!(
            error.contains("device has `7g.40gb@0`") && error.contains("nothing changed"),
            "{error}"
        );
        assert_eq!(n.layout(0), "7g.40gb@0");
        assert!(a.journal().records().is_empty());
        assert!(!n.path("gres.conf").exists());
        assert_eq!(n.slurmd_log(), "");
    }

    #[test]
    fn a_plan_that_destroys_a_busy_instance_is_refused_before_any_step() {
        let n = Node::new(&["4g@0 3g@4"]);
        let busy = Layout::parse(&n.model, "4g@0").unwrap().instances()[0];
        n.sim.set_busy(0, &n.model, busy, true).unwrap();
        let mut a = n.agent();
        n.desire(1, Phase::Apply, &[(0, "4g@0 3g@4", "2g@0 2g@2 3g@4")]);
        let r = a.poll().unwrap().unwrap();
        assert!(
            matches!(&r.outcome, Outcome::Failed { error } if error.contains("busy instance(s) 4g.20gb@0")),
            "{r:?}"
        );
        assert_eq!(n.layout(0), "4g.20gb@0 3g.20gb@4");
        assert!(a.journal().records().is_empty());
    }

    #[test]
    fn a_create_error_rolls_back_to_from_and_the_report_names_it() {
        let n = Node::new(&["7g@0"]);
        n.sim
            .set_faults(&Faults {
                fail: vec![FailFault {
                    op: "create-gi".into(),
                    gpu: Some(0),
                    error: "NVML_ERROR_INSUFFICIENT_RESOURCES".into(),
                    skip: 1,
                }],
                abort_after_steps: None,
            })
            .unwrap();
        let mut a = n.agent();
        n.desire(1, Phase::Apply, &[(0, "7g@0", "3g@0 3g@4")]);
        let r = a.poll().unwrap().unwrap();
        let Outcome::Failed { error } = &r.outcome else {
            panic!("{r:?}")
        };
        assert!(
            error.contains("NVML_ERROR_INSUFFICIENT_RESOURCES") && error.contains("create-gi 3g.20gb@4"),
            "{error}"
        );
        assert_eq!(n.layout(0), "7g.40gb@0");
        assert_eq!(r.gpus[0].layout, "7g.40gb@0");
        assert!(a.journal().is_closed());
        assert!(
            matches!(a.journal().records().last(), Some(Record::End { result, .. }) if result.starts_with("rolled-back"))
        );
        assert!(r.slurmd_running);
        assert_eq!(n.slurmd_log(), "");
    }

    #[test]
    fn recovery_rolls_back_to_from_when_the_interrupted_plan_cannot_finish() {
        let n = Node::new(&["7g@0"]);
        // A previous run began generation 5, destroyed the 7g and created 3g@0 without
        // its compute instance, then died.
        let m = &n.model;
        let mut sim = n.sim.clone();
        let seven = Layout::parse(m, "7g@0").unwrap().instances()[0];
        let three = Layout::parse(m, "3g@0").unwrap().instances()[0];
        for s in [
            Step::DestroyCompute(seven),
            Step::DestroyGpu(seven),
            Step::CreateGpu(three),
        ] {
            sim.apply(0, m, s).unwrap();
        }
        {
            let mut j = Journal::open(&n.path("state")).unwrap();
            j.append(Record::Begin {
                generation: 5,
                gpus: vec![GpuTarget {
                    index: 0,
                    model: "a100-40gb".into(),
                    from: "7g@0".into(),
                    to: "3g@0 3g@4".into(),
                }],
            })
            .unwrap();
        }
        sim.set_faults(&Faults {
            fail: vec![FailFault {
                op: "create-gi".into(),
                gpu: None,
                error: "NVML_ERROR_UNKNOWN".into(),
                skip: 0,
            }],
            abort_after_steps: None,
        })
        .unwrap();
        let mut a = n.agent();
        let r = a.recover().unwrap().unwrap();
        assert_eq!(r.generation, 5);
        assert!(
            matches!(&r.outcome, Outcome::Failed { error } if error.contains("could not be finished") && error.contains("NVML_ERROR_UNKNOWN")),
            "{r:?}"
        );
        assert_eq!(n.layout(0), "7g.40gb@0");
        assert!(a.journal().is_closed());
        assert!(a.recover().unwrap().is_none());
    }

    #[test]
    fn a_lost_report_is_reannounced_with_the_answered_generation_and_not_applied_again() {
        let n = Node::new(&["7g@0"]);
        let mut a = n.agent();
        a.announce().unwrap().unwrap();
        n.desire(3, Phase::Apply, &[(0, "7g.40gb@0", "3g.20gb@0,3g.20gb@4")]);
        let r = a.tick(unix_now()).unwrap().unwrap();
        assert_eq!(
            (r.generation, r.phase, r.outcome),
            (3, Phase::Apply, Outcome::Done)
        );
        assert!(a.tick(unix_now()).unwrap().is_none(), "nothing new to say");
        // slurmctld forgets the node's Comment (here: the spool loses the report).
        let spool = SpoolChannel::open(&n.path("spool"), "n1").unwrap();
        std::fs::remove_file(spool.report_path()).unwrap();
        let again = a.tick(unix_now()).unwrap().unwrap();
        assert_eq!(
            (again.generation, again.phase, again.outcome.clone()),
            (3, Phase::Apply, Outcome::Done)
        );
        assert_eq!(again.gpus[0].layout, "3g.20gb@0 3g.20gb@4");
        let mut spool = spool;
        assert_eq!(spool.last_report().unwrap(), Some(again));
        // Generation 3 was answered already: no second apply, no second slurmd stop.
        assert_eq!(n.slurmd_log(), "stop\n");
        assert_eq!(
            a.journal()
                .records()
                .iter()
                .filter(|r| matches!(r, Record::Begin { .. }))
                .count(),
            1
        );
    }

    #[test]
    fn a_layout_changed_behind_the_agents_back_is_reannounced_at_once_else_only_periodically() {
        let n = Node::new(&["4g@0 3g@4"]);
        let mut a = n.agent();
        let first = a.announce().unwrap().unwrap();
        let t = unix_now();
        assert!(a.tick(t).unwrap().is_none());
        assert!(a.tick(t + 290.0).unwrap().is_none(), "not before the interval");
        let periodic = a.tick(t + 301.0).unwrap().unwrap();
        assert_eq!((periodic.generation, &periodic.gpus), (0, &first.gpus));
        assert_eq!(periodic.at, t + 301.0);
        assert!(a.tick(t + 302.0).unwrap().is_none(), "the interval restarts");
        // Someone destroys the 4g by hand.
        let four = Layout::parse(&n.model, "4g@0").unwrap().instances()[0];
        let mut sim = n.sim.clone();
        sim.apply(0, &n.model, Step::DestroyCompute(four)).unwrap();
        sim.apply(0, &n.model, Step::DestroyGpu(four)).unwrap();
        let changed = a.tick(t + 303.0).unwrap().unwrap();
        assert_eq!(changed.gpus[0].layout, "3g.20gb@4");
        assert!(a.tick(t + 304.0).unwrap().is_none());
    }
}
