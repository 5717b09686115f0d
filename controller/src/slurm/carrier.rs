//! The channel's carrier: the node's own Slurm record. The central role writes
//! [`Desired`] into the node's `Extra`; the node agent writes its [`Report`] into the
//! node's `Comment`, each under the key `smartmig` of a JSON object so the site's own keys
//! stay. Slurm authenticates both updates (munge) and lets only root, SlurmUser or a Slurm
//! admin make them.

use crate::channel::{self, ChannelError, Desired, Report};

use super::{NodeUpdate, SlurmApi, SlurmError, SlurmNode};

fn value(e: ChannelError) -> SlurmError {
    SlurmError::Value {
        what: "smartmig message".into(),
        why: e.to_string(),
    }
}

/// Writes `desired` into `node`'s `Extra`, keeping the other keys of its current value.
pub fn write_desired(api: &mut dyn SlurmApi, node: &SlurmNode, desired: &Desired) -> Result<(), SlurmError> {
    let what = format!("node {} Extra", node.name);
    let extra = channel::merge(node.extra.as_deref(), &what, Some(desired)).map_err(value)?;
    api.update_node(&NodeUpdate {
        node: node.name.clone(),
        extra: Some(extra),
        ..NodeUpdate::default()
    })
}

/// Writes `report` into the `Comment` of node `name` (whose current `Comment` is
/// `current`), keeping the other keys.
pub fn write_report(
    api: &mut dyn SlurmApi,
    name: &str,
    current: Option<&str>,
    report: &Report,
) -> Result<(), SlurmError> {
    let what = format!("node {name} Comment");
    let comment = channel::merge(current, &what, Some(report)).map_err(value)?;
    api.update_node(&NodeUpdate {
        node: name.to_string(),
        comment: Some(comment),
        ..NodeUpdate::default()
    })
}

/// The desired state in a node's `Extra` (None: none there).
pub fn read_desired(node: &SlurmNode) -> Option<Result<Desired, ChannelError>> {
    channel::parse(node.extra.as_deref(), &format!("node {} Extra", node.name)).transpose()
}

/// The report in a node's `Comment` (None: none there).
pub fn read_report(node: &SlurmNode) -> Option<Result<Report, ChannelError>> {
    channel::parse(node.comment.as_deref(), &format!("node {} Comment", node.name)).transpose()
}
