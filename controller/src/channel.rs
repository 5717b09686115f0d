//! What the central role and the node agents tell each other.
//!
//! The central role writes a [`Desired`] for a node; the node's agent answers with a
//! [`Report`]. Both are small JSON documents. The production carrier is the node's own
//! Slurm record (`Extra` for desired state, `Comment` for reports, each under the key
//! [`KEY`] of a JSON object so that a site's own keys there are kept): Slurm
//! authenticates every update through munge and lets only root, SlurmUser or a Slurm admin
//! change them, so the channel needs no port or secret of its own (docs/admin-guide.md).
//!
//! A re-layout of one node is one generation, asked for in phases (docs/admin-guide.md,
//! "The re-layout transaction"): `Apply` changes the GPUs and prepares the new gres.conf
//! while slurmd keeps running; `Install` puts that gres.conf in place and stops slurmd when
//! the re-layout path needs it; `Start` starts slurmd once Slurm knows the new layout;
//! `Revert` takes the node back to where the generation began (GPUs, gres.conf, slurmd).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of the messages below; a reader refuses any other (3: `Desired::padding`; 4:
/// `Desired::order` and `Report::gres_order`, without which a reader would take a padded
/// node's devices for GPU and placement order).
pub const CHANNEL_VERSION: u32 = 4;

/// The key of `Extra` and `Comment` (JSON objects) under which smartmig keeps its message.
pub const KEY: &str = "smartmig";

/// Which step of a re-layout the central role asks a node for; ordered as they happen
/// within a generation (`Start` and `Revert` both end one; a generation has one of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Change the GPUs' layouts and stage the new gres.conf; slurmd keeps running.
    Apply,
    /// Install the staged gres.conf (keeping the previous one) and, if asked, stop slurmd.
    Install,
    /// Slurm has the new layout: start slurmd again.
    Start,
    /// Undo the generation: GPUs back to `from`, the previous gres.conf, slurmd running.
    Revert,
}

/// The layout one GPU should move to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuTarget {
    /// GPU index on the node (NVML order).
    pub index: u32,
    /// Catalogue model name, e.g. `A100-SXM4-40GB`.
    pub model: String,
    /// The layout the central role saw, in `Layout::parse` form; the agent refuses to act
    /// when the device differs (someone else changed it), and `Revert` goes back to it.
    pub from: String,
    /// The target layout, in `Layout::parse` form.
    pub to: String,
}

/// Desired state of one node, written by the central role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Desired {
    /// Must be [`CHANNEL_VERSION`].
    pub version: u32,
    /// Increases with every new re-layout of this node.
    pub generation: u64,
    /// What to do now.
    pub phase: Phase,
    /// GPUs that change (for `Apply` and `Revert`); GPUs not listed are left alone.
    pub gpus: Vec<GpuTarget>,
    /// `Install`: stop slurmd after installing gres.conf (the re-layout path restarts
    /// slurmctld and slurmd must not re-register with a layout slurmctld does not have).
    #[serde(default)]
    pub stop_slurmd: bool,
    /// `Install`: seconds slurmd may stay stopped before the agent's watchdog starts it
    /// again on its own (with the gres.conf that matches slurmctld).
    #[serde(default)]
    pub slurmd_budget_s: f64,
    /// `Apply`: each MIG type's padding block on the node (`smartmig_core::mig::padding`);
    /// the staged gres.conf fills every block with padding records. Empty: no padding.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub padding: BTreeMap<String, u32>,
    /// `Apply`, with padding: the node's devices afterwards in the order the staged
    /// gres.conf lists them ([`device_ref`] each), which keeps each device's position
    /// within its type (`smartmig_core::mig::device_order`). Empty: GPU and placement order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<String>,
}

/// A device of a node as an order names it: `GPU:instance` (`0:3g.20gb@4`).
pub fn device_ref(gpu: u32, instance: &str) -> String {
    format!("{gpu}:{instance}")
}

/// The GPU index and instance of a [`device_ref`], None when it is not one.
pub fn parse_device_ref(text: &str) -> Option<(u32, &str)> {
    let (gpu, instance) = text.split_once(':')?;
    Some((gpu.parse().ok()?, instance))
}

impl Desired {
    /// A request for `phase` of `generation`.
    pub fn new(generation: u64, phase: Phase, gpus: Vec<GpuTarget>) -> Desired {
        Desired {
            version: CHANNEL_VERSION,
            generation,
            phase,
            gpus,
            stop_slurmd: false,
            slurmd_budget_s: 0.0,
            padding: BTreeMap::new(),
            order: Vec::new(),
        }
    }
}

/// How a node agent's work on one generation and phase ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Outcome {
    /// Still working on it.
    InProgress,
    /// Finished as asked.
    Done,
    /// Gave up; the devices are back in a valid layout (listed in the report).
    Failed {
        /// What went wrong, for the admin.
        error: String,
    },
}

/// The layout a GPU actually has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuActual {
    /// GPU index on the node.
    pub index: u32,
    /// Catalogue model name.
    pub model: String,
    /// Current layout, in `Layout::parse` form.
    pub layout: String,
}

/// A node agent's answer, written after every phase it handles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Must be [`CHANNEL_VERSION`].
    pub version: u32,
    /// The generation this answers.
    pub generation: u64,
    /// The phase this answers.
    pub phase: Phase,
    /// How it went.
    pub outcome: Outcome,
    /// Every MIG GPU of the node as it is now; meaningless when `read_error` is set.
    pub gpus: Vec<GpuActual>,
    /// Why the GPUs could not be read (the central role then trusts nothing in `gpus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_error: Option<String>,
    /// The node's devices in the order its installed gres.conf block lists them
    /// ([`device_ref`] each), which is the order Slurm numbers them in within each type;
    /// empty when the block records none (GPU and placement order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gres_order: Vec<String>,
    /// Whether the node's slurmd is running.
    pub slurmd_running: bool,
    /// What the agent's watchdog did on its own, if anything (slurmd stopped too long).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watchdog: Option<String>,
    /// When the report was written, Unix seconds.
    pub at: f64,
}

impl Report {
    /// Whether this report answers the request for `generation` and `phase`, or a later one.
    pub fn answers(&self, generation: u64, phase: Phase) -> bool {
        (self.generation, self.phase) >= (generation, phase)
    }

    /// Whether this report is the final answer to `generation`/`phase` exactly.
    pub fn settles(&self, generation: u64, phase: Phase) -> bool {
        self.generation == generation && self.phase == phase && self.outcome != Outcome::InProgress
    }

    /// The GPU set (index, model) the report describes, or the agent's read error.
    pub fn gpu_set(&self) -> Result<Vec<(u32, String)>, AgentReadError> {
        if let Some(e) = &self.read_error {
            return Err(AgentReadError(e.clone()));
        }
        let mut set: Vec<(u32, String)> = self.gpus.iter().map(|g| (g.index, g.model.clone())).collect();
        set.sort();
        Ok(set)
    }
}

/// The agent's own account of why it cannot read its GPUs (a report's `read_error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AgentReadError(pub String);

/// Why a message could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// Not JSON of the expected shape.
    #[error("{what}: not a smartmig message: {source}")]
    Malformed {
        /// Where the text came from (e.g. `node gpu3 Extra`).
        what: String,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// Written by another version of smartmig.
    #[error("{what}: channel version {found}, this smartmigd speaks {CHANNEL_VERSION} (upgrade smartmigd on the controller and the nodes together)")]
    Version {
        /// Where the text came from.
        what: String,
        /// The version found.
        found: u64,
    },
    /// The field holds text that is not a JSON object, so smartmig cannot keep its key
    /// beside the site's content.
    #[error("{what} holds text that is not a JSON object ({text:?}); smartmig keeps its messages under the key \"{KEY}\" of a JSON object there: move the site's text into such an object, or clear the field")]
    Foreign {
        /// Where the text came from.
        what: String,
        /// The first characters of the text.
        text: String,
    },
}

/// A field's JSON object, or why it is none (an empty field is an empty object).
fn object(
    text: Option<&str>,
    what: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, ChannelError> {
    let text = text.unwrap_or("").trim();
    if text.is_empty() {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        _ => Err(ChannelError::Foreign {
            what: what.to_string(),
            text: text.chars().take(40).collect(),
        }),
    }
}

/// Reads a message written as JSON of its own (the spool carrier); `what` names the
/// source in errors.
pub fn parse_message<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T, ChannelError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|source| ChannelError::Malformed {
        what: what.to_string(),
        source,
    })?;
    from_value(value, what)
}

fn from_value<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
    what: &str,
) -> Result<T, ChannelError> {
    let found = value
        .get("version")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    if found != u64::from(CHANNEL_VERSION) {
        return Err(ChannelError::Version {
            what: what.to_string(),
            found,
        });
    }
    serde_json::from_value(value).map_err(|source| ChannelError::Malformed {
        what: what.to_string(),
        source,
    })
}

/// Reads smartmig's message from a Slurm field's text (None: the field has no smartmig
/// key); `what` names the source in errors.
pub fn parse<T: serde::de::DeserializeOwned>(
    text: Option<&str>,
    what: &str,
) -> Result<Option<T>, ChannelError> {
    match object(text, what)?.remove(KEY) {
        Some(value) => from_value(value, what).map(Some),
        None => Ok(None),
    }
}

/// The field's new text: its current JSON object with smartmig's key set to `msg` (or
/// removed, with None), every other key kept.
pub fn merge<T: Serialize>(
    current: Option<&str>,
    what: &str,
    msg: Option<&T>,
) -> Result<String, ChannelError> {
    let mut m = object(current, what)?;
    match msg {
        Some(msg) => {
            let value = serde_json::to_value(msg).map_err(|source| ChannelError::Malformed {
                what: what.to_string(),
                source,
            })?;
            m.insert(KEY.to_string(), value);
        }
        None => {
            m.remove(KEY);
        }
    }
    Ok(if m.is_empty() {
        String::new()
    } else {
        serde_json::Value::Object(m).to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desired() -> Desired {
        Desired::new(
            7,
            Phase::Apply,
            vec![GpuTarget {
                index: 1,
                model: "A100-SXM4-40GB".into(),
                from: "7g.40gb@0".into(),
                to: "3g.20gb@4,3g.20gb@0".into(),
            }],
        )
    }

    #[test]
    fn a_message_round_trips_beside_the_sites_own_keys() {
        let site = r#"{"rack":"b12","owner":"ml"}"#;
        let text = merge(Some(site), "node n1 Extra", Some(&desired())).unwrap();
        let back: Desired = parse(Some(&text), "node n1 Extra").unwrap().unwrap();
        assert_eq!(back, desired());
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (v["rack"].as_str(), v["owner"].as_str()),
            (Some("b12"), Some("ml"))
        );
        // Removing ours gives the site's object back; an empty field is no message.
        let cleared = merge::<Desired>(Some(&text), "x", None).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&cleared).unwrap(),
            serde_json::from_str::<serde_json::Value>(site).unwrap()
        );
        assert_eq!(merge::<Desired>(Some(""), "x", None).unwrap(), "");
        assert!(parse::<Desired>(None, "x").unwrap().is_none());
        assert!(parse::<Desired>(Some(site), "x").unwrap().is_none());
    }

    #[test]
    fn other_versions_and_site_free_text_are_refused_with_the_reason() {
        let v1 = r#"{"smartmig":1,"generation":3}"#;
        let e = parse::<Desired>(Some(v1), "node n1 Extra")
            .unwrap_err()
            .to_string();
        assert!(e.contains("node n1 Extra") && e.contains("version 0"), "{e}");
        let old = merge(None, "x", Some(&desired()))
            .unwrap()
            .replace(&format!("\"version\":{CHANNEL_VERSION}"), "\"version\":1");
        let e = parse::<Desired>(Some(&old), "node n1 Extra")
            .unwrap_err()
            .to_string();
        assert!(e.contains("version 1"), "{e}");
        let e = merge(Some("rack b12, do not use"), "node n1 Comment", Some(&desired()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("node n1 Comment") && e.contains("rack b12"), "{e}");
    }
}
