//! The channel's carrier: the node's own Slurm record. The central role writes
//! [`Desired`] as JSON into the node's `Extra`; the node agent writes its [`Report`] into
//! the node's `Comment`. Slurm authenticates both updates (munge) and lets only root,
//! SlurmUser or a Slurm admin make them.

use crate::channel::{self, ChannelError, Desired, Report};

use super::{NodeUpdate, SlurmApi, SlurmError, SlurmNode};

/// Writes `desired` into `node`'s `Extra`.
pub fn write_desired(api: &mut dyn SlurmApi, node: &str, desired: &Desired) -> Result<(), SlurmError> {
    let json = serde_json::to_string(desired).map_err(|e| SlurmError::Value {
        what: format!("desired state of {node}"),
        why: e.to_string(),
    })?;
    api.update_node(&NodeUpdate {
        node: node.to_string(),
        extra: Some(json),
        ..NodeUpdate::default()
    })
}

/// Writes `report` into `node`'s `Comment`.
pub fn write_report(api: &mut dyn SlurmApi, node: &str, report: &Report) -> Result<(), SlurmError> {
    let json = serde_json::to_string(report).map_err(|e| SlurmError::Value {
        what: format!("report of {node}"),
        why: e.to_string(),
    })?;
    api.update_node(&NodeUpdate {
        node: node.to_string(),
        comment: Some(json),
        ..NodeUpdate::default()
    })
}

/// The desired state in a node's `Extra` (None: empty).
pub fn read_desired(node: &SlurmNode) -> Option<Result<Desired, ChannelError>> {
    let text = node.extra.as_deref()?;
    Some(channel::parse(text, &format!("node {} Extra", node.name)))
}

/// The report in a node's `Comment` (None: empty).
pub fn read_report(node: &SlurmNode) -> Option<Result<Report, ChannelError>> {
    let text = node.comment.as_deref()?;
    Some(channel::parse(text, &format!("node {} Comment", node.name)))
}
