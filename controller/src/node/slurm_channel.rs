//! The production channel: this node's own Slurm record, read with one small RPC
//! (`slurm_load_node_single`) per poll: `Extra` holds the central role's desired state,
//! `Comment` this agent's reports (each under the key `smartmig`).

use super::{NodeChannel, NodeError, NodeRecord};
use crate::central::batch::DRAIN_PREFIX;
use crate::channel::Report;
use crate::slurm::{read_desired, read_report, write_report, SlurmApi};

/// [`NodeChannel`] over the node's Slurm record.
pub struct SlurmChannel {
    api: Box<dyn SlurmApi>,
    node: String,
    /// The `Comment` last read, so a report keeps the site's keys there.
    comment: Option<String>,
    /// Whether `comment` was read (a report before any read reads it first).
    comment_read: bool,
}

impl SlurmChannel {
    /// The channel of node `node` over `api` (libslurm in production, with the faults a
    /// test injects in debug builds; tests also use an in-memory one).
    pub fn with_api(api: Box<dyn SlurmApi>, node: &str) -> SlurmChannel {
        SlurmChannel {
            api,
            node: node.to_string(),
            comment: None,
            comment_read: false,
        }
    }
}

impl NodeChannel for SlurmChannel {
    fn read(&mut self) -> Result<NodeRecord, NodeError> {
        let n = self
            .api
            .node(&self.node)?
            .ok_or_else(|| NodeError::UnknownNode(self.node.clone()))?;
        self.comment = n.comment.clone();
        self.comment_read = true;
        Ok(NodeRecord {
            desired: read_desired(&n).transpose()?,
            report: read_report(&n).transpose()?,
            relayout_drain: n.drain && n.reason.as_deref().is_some_and(|r| r.starts_with(DRAIN_PREFIX)),
            gres: Some(n.gres),
        })
    }

    fn gres(&mut self) -> Result<Option<String>, NodeError> {
        Ok(self.api.node(&self.node)?.map(|n| n.gres))
    }

    fn write_report(&mut self, report: &Report) -> Result<(), NodeError> {
        if !self.comment_read {
            self.read()?;
        }
        let node = self.node.clone();
        write_report(self.api.as_mut(), &node, self.comment.as_deref(), report)?;
        self.comment = Some(crate::channel::merge(
            self.comment.as_deref(),
            "Comment",
            Some(report),
        )?);
        Ok(())
    }

    fn clear_report(&mut self) -> Result<(), NodeError> {
        self.read()?;
        let what = format!("node {} Comment", self.node);
        let comment = crate::channel::merge::<Report>(self.comment.as_deref(), &what, None)?;
        self.api.update_node(&crate::slurm::NodeUpdate {
            node: self.node.clone(),
            comment: Some(comment),
            ..Default::default()
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::central::fake::FakeSlurm;
    use crate::channel::{Desired, Phase};

    #[test]
    fn the_agent_reads_its_own_record_only_and_keeps_the_sites_comment_keys() {
        let mut fake = FakeSlurm::default();
        fake.nodes.push(crate::slurm::SlurmNode {
            name: "n1".into(),
            comment: Some(r#"{"asset":"A-17"}"#.into()),
            gres: "gpu:7g.40gb:1".into(),
            ..Default::default()
        });
        for other in 0..50 {
            fake.nodes.push(crate::slurm::SlurmNode {
                name: format!("x{other}"),
                ..Default::default()
            });
        }
        let d = Desired::new(2, Phase::Apply, Vec::new());
        fake.nodes[0].extra = crate::channel::merge(None, "x", Some(&d)).ok();
        let mut ch = SlurmChannel::with_api(Box::new(fake), "n1");
        let rec = ch.read().unwrap();
        assert_eq!(rec.desired, Some(d));
        assert_eq!((rec.report, rec.gres.as_deref()), (None, Some("gpu:7g.40gb:1")));
        let r = FakeSlurm::report(Vec::new());
        ch.write_report(&r).unwrap();
        let rec = ch.read().unwrap();
        assert_eq!(rec.report, Some(r.clone()));
        let comment = ch.comment.clone().unwrap();
        assert!(comment.contains("\"asset\":\"A-17\""), "{comment}");
        // A report written before any read (an agent recovering at boot) keeps them too.
        let mut fresh = SlurmChannel::with_api(
            Box::new(ch.api.as_any().downcast_mut::<FakeSlurm>().unwrap().clone()),
            "n1",
        );
        fresh.write_report(&r).unwrap();
        let comment = fresh.comment.clone().unwrap();
        assert!(comment.contains("\"asset\":\"A-17\""), "{comment}");
        let mut other = SlurmChannel::with_api(Box::new(FakeSlurm::default()), "n9");
        let e = other.read().unwrap_err().to_string();
        assert!(e.contains("n9"), "{e}");
    }
}
