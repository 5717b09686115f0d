//! What the central role and the node agents tell each other.
//!
//! The central role writes a [`Desired`] for a node; the node's agent answers with a
//! [`Report`]. Both are small JSON documents. The production carrier is the node's own
//! Slurm record (`Extra` for desired state, `Comment` for reports): Slurm authenticates
//! every update through munge and lets only root, SlurmUser or a Slurm admin change them,
//! so the channel needs no port or secret of its own (see docs/admin-guide.md).

use serde::{Deserialize, Serialize};

/// Version of the messages below; a reader refuses any other.
pub const CHANNEL_VERSION: u32 = 1;

/// Which step of a re-layout the central role asks a node for; ordered as they happen
/// within a generation (Apply, then StartSlurmd).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Change the GPUs' layouts, write gres.conf, and (when the re-layout strategy needs it)
    /// stop slurmd.
    Apply,
    /// Slurm has the new layout: start slurmd again.
    StartSlurmd,
}

/// The layout one GPU should move to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuTarget {
    /// GPU index on the node (NVML order).
    pub index: u32,
    /// Catalogue model name, e.g. `A100-SXM4-40GB`.
    pub model: String,
    /// The layout the central role saw, in `Layout::parse` form; the agent refuses to act
    /// when the device differs (someone else changed it).
    pub from: String,
    /// The target layout, in `Layout::parse` form.
    pub to: String,
}

/// Desired state of one node, written by the central role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Desired {
    /// Must be [`CHANNEL_VERSION`].
    pub smartmig: u32,
    /// Increases with every new request to this node.
    pub generation: u64,
    /// What to do now.
    pub phase: Phase,
    /// GPUs that change; GPUs not listed are left alone.
    pub gpus: Vec<GpuTarget>,
}

/// How a node agent's work on one generation and phase ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Outcome {
    /// Still working on it.
    InProgress,
    /// Finished: the devices have the target layouts.
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
    pub smartmig: u32,
    /// The generation this answers.
    pub generation: u64,
    /// The phase this answers.
    pub phase: Phase,
    /// How it went.
    pub outcome: Outcome,
    /// Every MIG GPU of the node as it is now.
    pub gpus: Vec<GpuActual>,
    /// Whether the node's slurmd is running.
    pub slurmd_running: bool,
    /// When the report was written, Unix seconds.
    pub at: f64,
}

impl Report {
    /// Whether this report answers the request for `generation` and `phase`, or a later one.
    pub fn answers(&self, generation: u64, phase: Phase) -> bool {
        (self.generation, self.phase) >= (generation, phase)
    }
}

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
    #[error("{what}: channel version {found}, this smartmigd speaks {CHANNEL_VERSION}")]
    Version {
        /// Where the text came from.
        what: String,
        /// The version found.
        found: u32,
    },
}

/// Reads a [`Desired`] or [`Report`]; `what` names the source in errors.
pub fn parse<T: serde::de::DeserializeOwned + Versioned>(text: &str, what: &str) -> Result<T, ChannelError> {
    let msg: T = serde_json::from_str(text).map_err(|source| ChannelError::Malformed {
        what: what.to_string(),
        source,
    })?;
    if msg.version() != CHANNEL_VERSION {
        return Err(ChannelError::Version {
            what: what.to_string(),
            found: msg.version(),
        });
    }
    Ok(msg)
}

/// A message that carries the channel version.
pub trait Versioned {
    /// The version it was written with.
    fn version(&self) -> u32;
}

impl Versioned for Desired {
    fn version(&self) -> u32 {
        self.smartmig
    }
}

impl Versioned for Report {
    fn version(&self) -> u32 {
        self.smartmig
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_desired_state_survives_the_round_trip_and_other_versions_are_refused() {
        let d = Desired {
            smartmig: CHANNEL_VERSION,
            generation: 7,
            phase: Phase::Apply,
            gpus: vec![GpuTarget {
                index: 1,
                model: "A100-SXM4-40GB".into(),
                from: "7g.40gb@0".into(),
                to: "3g.20gb@4,3g.20gb@0".into(),
            }],
        };
        let text = serde_json::to_string(&d).unwrap();
        assert_eq!(parse::<Desired>(&text, "test").unwrap(), d);
        let old = text.replace("\"smartmig\":1", "\"smartmig\":0");
        let e = parse::<Desired>(&old, "node n1 Extra").unwrap_err().to_string();
        assert!(e.contains("node n1 Extra") && e.contains("version 0"), "{e}");
        assert!(parse::<Report>("{}", "node n1 Comment").is_err());
    }
}
