//! An in-memory Slurm for unit tests and the benchmark: nodes and jobs as plain data,
//! every update recorded, and optionally an instant node agent that answers each
//! desired state with a `Done` report.

use crate::channel::{self, Desired, GpuActual, Outcome, Phase, Report, CHANNEL_VERSION};
use crate::slurm::{JobState, NodeUpdate, SlurmApi, SlurmError, SlurmJob, SlurmNode};

/// A synthetic Slurm.
#[derive(Debug, Clone, Default)]
pub struct FakeSlurm {
    /// The nodes.
    pub nodes: Vec<SlurmNode>,
    /// The jobs.
    pub jobs: Vec<SlurmJob>,
    /// Every node update, in order.
    pub node_updates: Vec<NodeUpdate>,
    /// Every job update: (job, field, value).
    pub job_updates: Vec<(u32, usize, String)>,
    /// Requeued jobs.
    pub requeued: Vec<u32>,
    /// Answer desired states at once, like a node agent would.
    pub auto_agent: bool,
    /// Make the agent fail every Apply with this message.
    pub agent_fails: Option<String>,
    /// Reads (`nodes`, `jobs`) numbered in this range fail as if slurmctld were down.
    pub outage: std::ops::Range<u32>,
    /// Reads so far.
    pub reads: u32,
    /// Nodes whose base state is UNKNOWN (slurmctld restarted, slurmd not registered
    /// yet): a resume clears their drain flag and then fails, as in Slurm 22.05.
    pub unknown_state: Vec<String>,
    /// Reconfigures so far.
    pub reconfigures: u32,
    /// slurmctld stops answering pings after a reconfigure (it failed to load).
    pub down_after_reconfigure: bool,
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
        let report = Report {
            smartmig: CHANNEL_VERSION,
            generation: 0,
            phase: Phase::StartSlurmd,
            outcome: Outcome::Done,
            gpus: gpus
                .iter()
                .enumerate()
                .map(|(i, (m, l))| GpuActual {
                    index: i as u32,
                    model: m.to_string(),
                    layout: l.to_string(),
                })
                .collect(),
            slurmd_running: true,
            at: 0.0,
        };
        SlurmNode {
            name: name.to_string(),
            comment: serde_json::to_string(&report).ok(),
            ..SlurmNode::default()
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
            deadline: None,
            comment: None,
            name: None,
            account: None,
            partition: None,
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

    fn answer(&mut self, node: usize) {
        let Some(Ok(d)) = self.nodes[node]
            .extra
            .as_deref()
            .map(|t| channel::parse::<Desired>(t, "fake"))
        else {
            return;
        };
        let Some(Ok(mut report)) = self.nodes[node]
            .comment
            .as_deref()
            .map(|t| channel::parse::<Report>(t, "fake"))
        else {
            return;
        };
        report.generation = d.generation;
        report.phase = d.phase;
        match (d.phase, &self.agent_fails) {
            (Phase::Apply, Some(e)) => {
                // A failed agent rolls back and never stopped slurmd.
                report.outcome = Outcome::Failed { error: e.clone() };
            }
            (Phase::Apply, None) => {
                for t in &d.gpus {
                    if let Some(g) = report.gpus.iter_mut().find(|g| g.index == t.index) {
                        g.layout = t.to.clone();
                    }
                }
                report.outcome = Outcome::Done;
                report.slurmd_running = false;
            }
            (Phase::StartSlurmd, _) => {
                report.outcome = Outcome::Done;
                report.slurmd_running = true;
            }
        }
        self.nodes[node].comment = serde_json::to_string(&report).ok();
    }
}

impl FakeSlurm {
    fn read(&mut self, call: &str) -> Result<(), SlurmError> {
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
}

impl SlurmApi for FakeSlurm {
    fn jobs(&mut self) -> Result<Vec<SlurmJob>, SlurmError> {
        self.read("slurm_load_jobs")?;
        Ok(self.jobs.clone())
    }
    fn nodes(&mut self) -> Result<Vec<SlurmNode>, SlurmError> {
        self.read("slurm_load_node")?;
        Ok(self.nodes.clone())
    }
    fn update_node(&mut self, u: &NodeUpdate) -> Result<(), SlurmError> {
        let i = self
            .nodes
            .iter()
            .position(|n| n.name == u.node)
            .ok_or_else(|| err(&format!("slurm_update_node({})", u.node)))?;
        self.node_updates.push(u.clone());
        let n = &mut self.nodes[i];
        if let Some(e) = &u.extra {
            n.extra = (!e.is_empty()).then(|| e.clone());
        }
        if let Some(c) = &u.comment {
            n.comment = (!c.is_empty()).then(|| c.clone());
        }
        if let Some(r) = &u.drain {
            n.drain = true;
            n.reason = Some(r.clone());
        }
        if u.resume {
            n.drain = false;
            n.reason = None;
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
        Ok(())
    }
    fn update_job_tres(&mut self, job: u32, field: usize, value: &str) -> Result<(), SlurmError> {
        let j = self
            .jobs
            .iter_mut()
            .find(|j| j.id == job)
            .ok_or_else(|| err(&format!("slurm_update_job({job})")))?;
        j.tres[field] = Some(value.to_string());
        self.job_updates.push((job, field, value.to_string()));
        Ok(())
    }
    fn requeue(&mut self, job: u32) -> Result<(), SlurmError> {
        self.requeued.push(job);
        if let Some(j) = self.jobs.iter_mut().find(|j| j.id == job) {
            j.state = JobState::Pending;
            j.nodes.clear();
            j.gres_detail.clear();
        }
        Ok(())
    }
    fn ping(&mut self) -> Result<(), SlurmError> {
        if self.down_after_reconfigure && self.reconfigures > 0 {
            return Err(SlurmError::Call {
                call: "slurm_ping".into(),
                errno: 1007,
                message: "Unable to contact slurm controller (connect failure)".into(),
            });
        }
        Ok(())
    }
    fn reconfigure(&mut self) -> Result<(), SlurmError> {
        self.reconfigures += 1;
        Ok(())
    }
}
