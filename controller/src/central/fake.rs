//! An in-memory Slurm for unit tests and the benchmarks: nodes and jobs as plain data,
//! every update recorded, the RPCs counted, and optionally an instant node agent that
//! answers each desired state the way a healthy agent would.

use std::collections::BTreeMap;

use crate::channel::{self, Desired, GpuActual, Outcome, Phase, Report, CHANNEL_VERSION};
use crate::slurm::{
    read_desired, JobState, JobUpdate, NodeUpdate, SlurmApi, SlurmError, SlurmJob, SlurmNode,
};

/// A change slurmctld makes to a node's record on its own.
pub type NodeChange = fn(&mut SlurmNode);

/// A synthetic Slurm.
#[derive(Debug, Clone, Default)]
pub struct FakeSlurm {
    /// The nodes.
    pub nodes: Vec<SlurmNode>,
    /// The jobs.
    pub jobs: Vec<SlurmJob>,
    /// Every node update, in order.
    pub node_updates: Vec<NodeUpdate>,
    /// Every job update.
    pub job_updates: Vec<JobUpdate>,
    /// Requeued jobs.
    pub requeued: Vec<u32>,
    /// Answer desired states at once, like a node agent would.
    pub auto_agent: bool,
    /// Make the agent fail every Apply with this message.
    pub agent_fails: Option<String>,
    /// With `agent_fails`: the rollback fails too, the GPUs left in the target layouts.
    pub rollback_fails: bool,
    /// Nodes whose agent never answers Apply (slow NVML); other phases are answered.
    pub slow_apply: Vec<String>,
    /// Nodes whose agent refuses Start (it reverted the generation at boot), slurmd running.
    pub start_refused: Vec<String>,
    /// Nodes whose agent's watchdog reverted the generation before Start was asked (the
    /// central role away): Start finds the Revert's report.
    pub watchdog_reverted: Vec<String>,
    /// Nodes whose Extra cannot be written (slurmctld refuses the update): the hand-off of
    /// a plan to their agent fails.
    pub extra_refused: Vec<String>,
    /// Reads (`nodes`, `jobs`, `node`) numbered in this range fail as if slurmctld were down.
    pub outage: std::ops::Range<u32>,
    /// Reads so far.
    pub reads: u32,
    /// Nodes whose base state is UNKNOWN (slurmctld restarted, slurmd not registered
    /// yet): a resume clears their drain flag and then fails, as in Slurm 22.05.
    pub unknown_state: Vec<String>,
    /// Jobs that start on their node when it is drained, as if the scheduler had placed
    /// them just before the drain (after the central role read the node).
    pub start_on_drain: Vec<SlurmJob>,
    /// Refuse every requeue, as slurmctld does for a job it cannot requeue.
    pub refuse_requeue: bool,
    /// Jobs that end just before smartmigd requeues them: the call succeeds and leaves
    /// them ended, as slurmctld answers a requeue limited to running jobs.
    pub finish_before_requeue: Vec<u32>,
    /// Refuse this many updates that set a held drain reason (slurmctld away).
    pub refuse_held: u32,
    /// Nodes whose first Extra update is carried out but its reply lost (a timeout).
    pub extra_reply_lost: Vec<String>,
    /// Nodes slurmctld refuses to resume (their drain stays).
    pub refuse_resume: Vec<String>,
    /// Once an agent has applied a plan, this path becomes a non-empty directory: a file
    /// there (the central role's ledger) can no longer be written.
    pub block_after_apply: Option<std::path::PathBuf>,
    /// Reconfigures so far.
    pub reconfigures: u32,
    /// Nodes slurmctld refuses at every registration: a reconfigure leaves them INVAL (it
    /// clears every other node's INVAL, as each slurmd registers again).
    pub refuse_registration: Vec<String>,
    /// What slurmctld has done to these nodes' records by the time their agent has
    /// started slurmd (a registration it refused during the batch, say).
    pub at_start: Vec<(String, NodeChange)>,
    /// `SlurmdTimeout` (0: Slurm's default of 300 s is assumed).
    pub slurmd_timeout_s: u32,
    /// RPCs by call: `load_node` (whole table, changed), `load_node_unchanged`,
    /// `load_node_single`, `load_jobs`, `load_jobs_unchanged`, `update_node`, ...
    pub rpcs: BTreeMap<&'static str, u64>,
    /// Bumped by every change, so table reads can answer "unchanged" as slurmctld does.
    pub version: u64,
    /// `version` at the last node-table read.
    pub nodes_read_at: Option<u64>,
    /// `version` at the last job-table read.
    pub jobs_read_at: Option<u64>,
    /// Per node: the device order of the gres.conf its agent staged at Apply and the one
    /// installed before, as the agent's reports carry them once installed (or reverted).
    pub gres_orders: BTreeMap<String, (Vec<String>, Vec<String>)>,
}

fn err(call: &str) -> SlurmError {
    SlurmError::Call {
        call: call.to_string(),
        errno: 2017,
        message: "Invalid node name specified".into(),
    }
}

impl FakeSlurm {
    /// A node record with an agent report of its GPUs (`(model, layout)` each).
    pub fn node(name: &str, gpus: &[(&str, &str)]) -> SlurmNode {
        let report = FakeSlurm::report(
            gpus.iter()
                .enumerate()
                .map(|(i, (m, l))| GpuActual {
                    index: i as u32,
                    model: m.to_string(),
                    layout: l.to_string(),
                })
                .collect(),
        );
        SlurmNode {
            name: name.to_string(),
            comment: channel::merge(None, "fake", Some(&report)).ok(),
            gres: crate::central::gres_of_report(&report.gpus),
            ..SlurmNode::default()
        }
    }

    /// A node agent's first announcement of `gpus`.
    pub fn report(gpus: Vec<GpuActual>) -> Report {
        Report {
            version: CHANNEL_VERSION,
            generation: 0,
            phase: Phase::Start,
            outcome: Outcome::Done,
            gpus,
            gres_order: Vec::new(),
            read_error: None,
            slurmd_running: true,
            watchdog: None,
            at: 0.0,
        }
    }

    /// A pending job asking for `tres_per_node`.
    pub fn pending(id: u32, tres_per_node: &str) -> SlurmJob {
        SlurmJob {
            id,
            state: JobState::Pending,
            tres: [Some(tres_per_node.to_string()), None, None, None],
            nodes: Vec::new(),
            gres_detail: Vec::new(),
            submit: 0,
            start: 0,
            time_limit_min: Some(30),
            time_min_min: None,
            deadline: None,
            comment: None,
            name: None,
            account: None,
            partition: None,
            admin_comment: None,
            requeueable: true,
        }
    }

    /// A running job on `node` holding Slurm device `idx` of type `ty`.
    pub fn running(id: u32, node: &str, ty: &str, idx: u32) -> SlurmJob {
        SlurmJob {
            state: JobState::Running,
            nodes: vec![node.to_string()],
            gres_detail: vec![format!("gpu:{ty}:1(IDX:{idx})")],
            ..FakeSlurm::pending(id, &format!("gres:gpu:{ty}:1"))
        }
    }

    /// The report in node `i`'s `Comment`.
    pub fn report_of(&self, i: usize) -> Option<Report> {
        crate::slurm::read_report(&self.nodes[i]).and_then(Result::ok)
    }

    /// Sets node `i`'s report's gres.conf device order, as an agent that wrote it reports it.
    pub fn set_gres_order(&mut self, i: usize, order: &[&str]) {
        if let Some(mut r) = self.report_of(i) {
            r.gres_order = order.iter().map(|s| s.to_string()).collect();
            self.set_report(i, &r);
        }
    }

    /// Puts report `r` in node `i`'s `Comment`, as its agent writes it.
    pub fn set_report(&mut self, i: usize, r: &Report) {
        self.nodes[i].comment = channel::merge(self.nodes[i].comment.as_deref(), "fake", Some(r)).ok();
    }

    /// What an instant, healthy agent answers to node `i`'s desired state.
    fn answer(&mut self, i: usize) {
        let Some(Ok(d)) = read_desired(&self.nodes[i]) else {
            return;
        };
        let Some(mut report) = self.report_of(i) else {
            return;
        };
        if report.answers(d.generation, d.phase)
            || (d.phase == Phase::Apply && self.slow_apply.contains(&self.nodes[i].name))
        {
            return;
        }
        report.generation = d.generation;
        report.phase = d.phase;
        report.outcome = Outcome::Done;
        if d.phase == Phase::Start {
            // slurmd started (or running): slurmctld has heard from it.
            self.nodes[i].silent = false;
            for (name, change) in &self.at_start {
                if *name == self.nodes[i].name {
                    change(&mut self.nodes[i]);
                }
            }
        }
        match (d.phase, &self.agent_fails) {
            // A failed agent rolls back; slurmd keeps running.
            (Phase::Apply, Some(e)) => {
                report.outcome = Outcome::Failed { error: e.clone() };
                if self.rollback_fails {
                    set_layouts(&mut report, &d, |t| &t.to);
                }
            }
            (Phase::Apply, None) => {
                set_layouts(&mut report, &d, |t| &t.to);
                let installed = report.gres_order.clone();
                self.gres_orders
                    .insert(self.nodes[i].name.clone(), (d.order.clone(), installed));
                if let Some(p) = &self.block_after_apply {
                    if p.is_file() {
                        std::fs::remove_file(p).expect("the file to block");
                    }
                    std::fs::create_dir_all(p.join("blocked")).expect("a test directory");
                }
            }
            (Phase::Install, _) => {
                report.slurmd_running = !d.stop_slurmd;
                if let Some((staged, _)) = self.gres_orders.get(&self.nodes[i].name) {
                    report.gres_order = staged.clone();
                }
            }
            (Phase::Start, _) if self.watchdog_reverted.contains(&self.nodes[i].name) => {
                set_layouts(&mut report, &d, |t| &t.from);
                report.phase = Phase::Revert;
                report.watchdog = Some("slurmd stopped for 120 s".into());
                report.slurmd_running = true;
            }
            (Phase::Start, _) => {
                report.slurmd_running = true;
                if self.start_refused.contains(&self.nodes[i].name) {
                    // As an agent refuses it: the generation went back (at a reboot).
                    set_layouts(&mut report, &d, |t| &t.from);
                    report.outcome = Outcome::Failed {
                        error: format!(
                            "generation {} was reverted on this node; it does not go forward again",
                            d.generation
                        ),
                    };
                }
            }
            (Phase::Revert, _) => {
                set_layouts(&mut report, &d, |t| &t.from);
                if let Some((_, before)) = self.gres_orders.remove(&self.nodes[i].name) {
                    report.gres_order = before;
                }
                report.slurmd_running = true;
            }
        }
        self.set_report(i, &report);
    }

    fn count(&mut self, call: &'static str) {
        *self.rpcs.entry(call).or_default() += 1;
    }

    fn read(&mut self, call: &'static str) -> Result<(), SlurmError> {
        let n = self.reads;
        self.reads += 1;
        if self.outage.contains(&n) {
            return Err(SlurmError::Call {
                call: call.into(),
                errno: 1800,
                message: "Unable to contact slurm controller (connect failure)".into(),
            });
        }
        Ok(())
    }

    /// Marks the data changed (tests that edit `nodes` or `jobs` directly call it too).
    pub fn touch(&mut self) {
        self.version += 1;
    }
}

fn set_layouts(report: &mut Report, d: &Desired, layout: impl Fn(&crate::channel::GpuTarget) -> &String) {
    for t in &d.gpus {
        if let Some(g) = report.gpus.iter_mut().find(|g| g.index == t.index) {
            g.layout = layout(t).clone();
        }
    }
}

impl SlurmApi for FakeSlurm {
    fn jobs(&mut self) -> Result<Vec<SlurmJob>, SlurmError> {
        self.read("slurm_load_jobs")?;
        let unchanged = self.jobs_read_at == Some(self.version);
        self.count(if unchanged {
            "load_jobs_unchanged"
        } else {
            "load_jobs"
        });
        self.jobs_read_at = Some(self.version);
        Ok(self.jobs.clone())
    }
    fn nodes(&mut self) -> Result<Vec<SlurmNode>, SlurmError> {
        self.read("slurm_load_node")?;
        let unchanged = self.nodes_read_at == Some(self.version);
        self.count(if unchanged {
            "load_node_unchanged"
        } else {
            "load_node"
        });
        self.nodes_read_at = Some(self.version);
        Ok(self.nodes.clone())
    }
    fn node(&mut self, name: &str) -> Result<Option<SlurmNode>, SlurmError> {
        self.read("slurm_load_node_single")?;
        self.count("load_node_single");
        Ok(self.nodes.iter().find(|n| n.name == name).cloned())
    }
    fn slurmd_timeout(&mut self) -> Result<u32, SlurmError> {
        self.count("load_ctl_conf");
        Ok(if self.slurmd_timeout_s == 0 {
            300
        } else {
            self.slurmd_timeout_s
        })
    }
    fn update_node(&mut self, u: &NodeUpdate) -> Result<(), SlurmError> {
        self.count("update_node");
        let i = self
            .nodes
            .iter()
            .position(|n| n.name == u.node)
            .ok_or_else(|| err(&format!("slurm_update_node({})", u.node)))?;
        if u.extra.as_ref().is_some_and(|e| !e.is_empty()) && self.extra_refused.contains(&u.node) {
            return Err(SlurmError::Call {
                call: format!("slurm_update_node({})", u.node),
                errno: 2011,
                message: "Unable to contact slurm controller (connect failure)".into(),
            });
        }
        if self.refuse_held > 0
            && u.drain
                .as_deref()
                .is_some_and(|r| r.starts_with(super::batch::HELD_PREFIX))
        {
            self.refuse_held -= 1;
            return Err(SlurmError::Call {
                call: format!("slurm_update_node({})", u.node),
                errno: 1800,
                message: "Unable to contact slurm controller (connect failure)".into(),
            });
        }
        self.touch();
        self.node_updates.push(u.clone());
        let n = &mut self.nodes[i];
        if let Some(e) = &u.extra {
            n.extra = (!e.is_empty()).then(|| e.clone());
        }
        if let Some(c) = &u.comment {
            n.comment = (!c.is_empty()).then(|| c.clone());
        }
        if let Some(g) = &u.gres {
            n.gres = g.clone();
        }
        if let Some(r) = &u.drain {
            n.drain = true;
            n.reason = Some(r.clone());
            let (starting, rest): (Vec<SlurmJob>, Vec<SlurmJob>) = std::mem::take(&mut self.start_on_drain)
                .into_iter()
                .partition(|j| j.nodes.contains(&u.node));
            self.start_on_drain = rest;
            self.jobs.extend(starting);
        }
        // Slurm refuses to resume a node whose registration it refused (INVAL).
        if u.resume && (self.refuse_resume.contains(&u.node) || self.nodes[i].invalid_reg) {
            return Err(SlurmError::Call {
                call: format!("slurm_update_node({})", u.node),
                errno: 2028,
                message: "Invalid node state specified".into(),
            });
        }
        let n = &mut self.nodes[i];
        if u.resume {
            n.drain = false;
            n.reason = None;
            // Slurm asks a resumed node to register: not responding until it answers.
            n.silent = true;
            if self.unknown_state.contains(&u.node) {
                return Err(SlurmError::Call {
                    call: format!("slurm_update_node({})", u.node),
                    errno: 2028,
                    message: "Invalid node state specified".into(),
                });
            }
        }
        if self.auto_agent && u.extra.is_some() {
            self.answer(i);
        }
        if u.extra.as_ref().is_some_and(|e| !e.is_empty()) {
            if let Some(k) = self.extra_reply_lost.iter().position(|n| *n == u.node) {
                self.extra_reply_lost.remove(k);
                return Err(SlurmError::Call {
                    call: format!("slurm_update_node({})", u.node),
                    errno: 5004,
                    message: "Socket timed out on send/recv operation".into(),
                });
            }
        }
        Ok(())
    }
    fn update_job(&mut self, u: &JobUpdate) -> Result<(), SlurmError> {
        self.count("update_job");
        self.touch();
        let j = self
            .jobs
            .iter_mut()
            .find(|j| j.id == u.job)
            .ok_or_else(|| err(&format!("slurm_update_job({})", u.job)))?;
        if let Some((field, value)) = &u.tres {
            j.tres[*field] = Some(value.clone());
        }
        if let Some(t) = u.time_limit_min {
            j.time_limit_min = Some(t);
        }
        if let Some(c) = &u.admin_comment {
            j.admin_comment = Some(c.clone());
        }
        self.job_updates.push(u.clone());
        Ok(())
    }
    fn requeue(&mut self, job: u32) -> Result<(), SlurmError> {
        self.count("requeue");
        if self.finish_before_requeue.contains(&job) {
            if let Some(j) = self.jobs.iter_mut().find(|j| j.id == job) {
                j.state = JobState::Other;
                j.nodes.clear();
                j.gres_detail.clear();
            }
            self.touch();
            return Ok(());
        }
        let refused = self.refuse_requeue || self.jobs.iter().any(|j| j.id == job && !j.requeueable);
        if refused {
            // What slurmctld answers for a job submitted with --no-requeue.
            return Err(SlurmError::Call {
                call: format!("slurm_requeue({job})"),
                errno: 2037, // ESLURM_DISABLED
                message: "Requested operation is presently disabled".into(),
            });
        }
        self.touch();
        self.requeued.push(job);
        if let Some(j) = self.jobs.iter_mut().find(|j| j.id == job) {
            j.state = JobState::Pending;
            j.nodes.clear();
            j.gres_detail.clear();
        }
        Ok(())
    }
    fn as_any(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn ping(&mut self) -> Result<(), SlurmError> {
        self.count("ping");
        self.read("ping")
    }
    fn reconfigure(&mut self) -> Result<(), SlurmError> {
        self.count("reconfigure");
        self.reconfigures += 1;
        self.version += 1;
        for n in &mut self.nodes {
            n.invalid_reg &= self.refuse_registration.contains(&n.name);
        }
        Ok(())
    }
}

/// One in-memory Slurm shared by several clients (the central role and many agents in the
/// RPC benchmark), each counted on the same [`FakeSlurm::rpcs`].
#[derive(Debug, Clone, Default)]
pub struct SharedFake(pub std::rc::Rc<std::cell::RefCell<FakeSlurm>>);

impl SlurmApi for SharedFake {
    fn jobs(&mut self) -> Result<Vec<SlurmJob>, SlurmError> {
        self.0.borrow_mut().jobs()
    }
    fn nodes(&mut self) -> Result<Vec<SlurmNode>, SlurmError> {
        self.0.borrow_mut().nodes()
    }
    fn node(&mut self, name: &str) -> Result<Option<SlurmNode>, SlurmError> {
        self.0.borrow_mut().node(name)
    }
    fn slurmd_timeout(&mut self) -> Result<u32, SlurmError> {
        self.0.borrow_mut().slurmd_timeout()
    }
    fn update_node(&mut self, update: &NodeUpdate) -> Result<(), SlurmError> {
        self.0.borrow_mut().update_node(update)
    }
    fn update_job(&mut self, update: &JobUpdate) -> Result<(), SlurmError> {
        self.0.borrow_mut().update_job(update)
    }
    fn requeue(&mut self, job: u32) -> Result<(), SlurmError> {
        self.0.borrow_mut().requeue(job)
    }
    fn ping(&mut self) -> Result<(), SlurmError> {
        self.0.borrow_mut().ping()
    }
    fn reconfigure(&mut self) -> Result<(), SlurmError> {
        self.0.borrow_mut().reconfigure()
    }
    fn as_any(&mut self) -> &mut dyn std::any::Any {
        self
    }
}
