//! The production channel: this node's own Slurm record, through libslurm (`Extra` holds
//! the central role's desired state, `Comment` this agent's reports).

use super::{NodeChannel, NodeError};
use crate::channel::{Desired, Report};
use crate::slurm::{read_desired, read_report, write_report, Libslurm, SlurmApi};

/// [`NodeChannel`] over the node's Slurm record.
pub struct SlurmChannel {
    api: Box<dyn SlurmApi>,
    node: String,
}

impl SlurmChannel {
    /// The channel of node `node` through libslurm (`$SLURM_CONF`).
    pub fn new(node: &str) -> SlurmChannel {
        SlurmChannel::with_api(Box::new(Libslurm::new()), node)
    }

    /// The channel over any [`SlurmApi`] (tests use an in-memory one).
    pub fn with_api(api: Box<dyn SlurmApi>, node: &str) -> SlurmChannel {
        SlurmChannel {
            api,
            node: node.to_string(),
        }
    }

    fn record(&mut self) -> Result<crate::slurm::SlurmNode, NodeError> {
        let nodes = self.api.nodes()?;
        nodes
            .into_iter()
            .find(|n| n.name == self.node)
            .ok_or_else(|| NodeError::Refused(format!("Slurm has no node `{}`", self.node)))
    }
}

impl NodeChannel for SlurmChannel {
    fn read_desired(&mut self) -> Result<Option<Desired>, NodeError> {
        let n = self.record()?;
        read_desired(&n).transpose().map_err(NodeError::from)
    }
    fn last_report(&mut self) -> Result<Option<Report>, NodeError> {
        let n = self.record()?;
        read_report(&n).transpose().map_err(NodeError::from)
    }
    fn write_report(&mut self, report: &Report) -> Result<(), NodeError> {
        let node = self.node.clone();
        Ok(write_report(self.api.as_mut(), &node, report)?)
    }
    fn read(&mut self) -> Result<(Option<Desired>, Option<Report>), NodeError> {
        let n = self.record()?;
        Ok((read_desired(&n).transpose()?, read_report(&n).transpose()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::central::fake::FakeSlurm;
    use crate::channel::{Desired, Phase, CHANNEL_VERSION};

    #[test]
    fn the_agent_reads_its_extra_and_writes_its_comment() {
        let mut fake = FakeSlurm::default();
        fake.nodes.push(crate::slurm::SlurmNode {
            name: "n1".into(),
            ..Default::default()
        });
        let d = Desired {
            smartmig: CHANNEL_VERSION,
            generation: 2,
            phase: Phase::Apply,
            gpus: Vec::new(),
        };
        fake.nodes[0].extra = Some(serde_json::to_string(&d).unwrap());
        let mut ch = SlurmChannel::with_api(Box::new(fake), "n1");
        assert_eq!(ch.read_desired().unwrap(), Some(d));
        assert_eq!(ch.last_report().unwrap(), None);
        let r = crate::channel::Report {
            smartmig: CHANNEL_VERSION,
            generation: 2,
            phase: Phase::Apply,
            outcome: crate::channel::Outcome::Done,
            gpus: Vec::new(),
            slurmd_running: false,
            at: 0.0,
        };
        ch.write_report(&r).unwrap();
        assert_eq!(ch.last_report().unwrap(), Some(r));
        let mut other = SlurmChannel::with_api(Box::new(FakeSlurm::default()), "n9");
        let e = other.read_desired().unwrap_err().to_string();
        assert!(e.contains("n9"), "{e}");
    }
}
