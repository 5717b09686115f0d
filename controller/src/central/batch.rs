//! The re-layout transaction: one batch of nodes re-laid out together (one Slurm refresh),
//! each node an explicit state machine with one defined way back from every state, kept
//! in `<state_dir>/relayout.json` and written durably *before* the step it announces runs,
//! so a restarted central role finishes or undoes what it started (docs/admin-guide.md,
//! "The re-layout transaction").
//!
//! ```text
//! Draining ──drain──▶ Drained ──idle──▶ Applying ──done──▶ Applied ──batch ready──▶ Installing ──done──▶ Installed
//!    │ refused           │ busy            │ rolled back / slow                        │ failed, late        │ refreshed
//!    ▼                   ▼                 ▼                                           ▼                     ▼  (failed: include
//! Closed(Skipped)     Resuming ◀────── Reverting(resume) ◀─┘               Reverting(hold) ◀─────────── Starting    put back,
//!                        │ reason still ours?                                   │                          │     Reverting(hold))
//!                        ▼                                                      ▼                          ▼
//!              Closed(Resumed | LeftDrained)                             Closed(Held)                  Resuming
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::channel::GpuTarget;

/// The batch file's name inside `[controller] state_dir`.
pub const BATCH_FILE: &str = "relayout.json";

/// Where one node is in its re-layout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum NodeState {
    /// About to be drained (reason [`drain_reason`]).
    Draining,
    /// Drained; its instances are checked again for jobs that started meanwhile.
    Drained,
    /// Asked to change its GPUs (phase Apply).
    Applying,
    /// Its GPUs have the new layout and the new gres.conf is staged; slurmd runs.
    Applied {
        /// The node's new GPU GRES, from the agent's report.
        gres: String,
    },
    /// Asked to install the new gres.conf (and stop slurmd when the path needs it).
    Installing {
        /// The node's new GPU GRES.
        gres: String,
    },
    /// gres.conf installed (slurmd stopped when the path needs it): ready for Slurm.
    Installed {
        /// The node's new GPU GRES.
        gres: String,
    },
    /// Slurm has the new layout; asked to start slurmd.
    Starting,
    /// To be resumed if its drain reason is still smartmig's.
    Resuming {
        /// What happened, for the decision lines (`applied`, `rolled back: ...`, ...).
        outcome: String,
    },
    /// Asked to go back to where the generation began, because of `error`.
    Reverting {
        /// Why.
        error: String,
        /// Whether the node stays drained afterwards (the failure was Slurm's or
        /// slurmd's: an admin looks); otherwise a confirmed revert resumes it.
        hold: bool,
    },
    /// To be left drained with `reason`: slurmctld refused the update, tried again.
    Holding {
        /// The held reason to set.
        reason: String,
    },
    /// Finished.
    Closed(Closed),
}

/// How a node's re-layout ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "end", rename_all = "kebab-case")]
pub enum Closed {
    /// Back in service (in its new layout, or its old one after a clean rollback).
    Resumed {
        /// What happened.
        outcome: String,
    },
    /// Left drained on purpose, with this reason in Slurm (an admin looks at it).
    Held {
        /// The drain reason set.
        reason: String,
    },
    /// Drained by someone else meanwhile: left as they set it.
    LeftDrained {
        /// Their reason.
        reason: String,
    },
    /// Nothing was changed (the drain was refused).
    Skipped {
        /// Why.
        why: String,
    },
    /// Slurm no longer has the node: nothing can be asked of it (an admin looks at it).
    Gone {
        /// Why.
        why: String,
    },
}

impl NodeState {
    /// Whether the node's re-layout is over.
    pub fn is_closed(&self) -> bool {
        matches!(self, NodeState::Closed(_))
    }

    /// Whether the node is going back or done (no revert needs asking).
    pub fn reverting_or_closed(&self) -> bool {
        matches!(
            self,
            NodeState::Reverting { .. } | NodeState::Holding { .. } | NodeState::Closed(_)
        )
    }

    /// The phase the node's agent has been asked for in this state (None: none awaited).
    pub fn asked(&self) -> Option<crate::channel::Phase> {
        use crate::channel::Phase;
        match self {
            NodeState::Applying => Some(Phase::Apply),
            NodeState::Installing { .. } => Some(Phase::Install),
            NodeState::Starting => Some(Phase::Start),
            NodeState::Reverting { .. } => Some(Phase::Revert),
            _ => None,
        }
    }

    /// A short name for logs and the status file.
    pub fn name(&self) -> &'static str {
        match self {
            NodeState::Draining => "draining",
            NodeState::Drained => "drained",
            NodeState::Applying => "applying",
            NodeState::Applied { .. } => "applied",
            NodeState::Installing { .. } => "installing",
            NodeState::Installed { .. } => "installed",
            NodeState::Starting => "starting slurmd",
            NodeState::Resuming { .. } => "resuming",
            NodeState::Reverting { .. } => "reverting",
            NodeState::Holding { .. } => "holding",
            NodeState::Closed(Closed::Resumed { .. }) => "resumed",
            NodeState::Closed(Closed::Held { .. }) => "held",
            NodeState::Closed(Closed::LeftDrained { .. }) => "left drained",
            NodeState::Closed(Closed::Skipped { .. }) => "skipped",
            NodeState::Closed(Closed::Gone { .. }) => "gone",
        }
    }
}

/// One node of a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeTxn {
    /// Where it is.
    pub state: NodeState,
    /// When it entered `state`, Unix seconds.
    pub since: f64,
    /// The GPUs that change.
    pub targets: Vec<GpuTarget>,
    /// The node's GPU set (index, model) when the batch was planned: a report with
    /// another set is refused.
    pub gpu_set: Vec<(u32, String)>,
    /// The node's GPU GRES in Slurm when the batch was planned.
    pub old_gres: String,
    /// Its changes as the status file shows them: (GPU `node/index`, configuration now,
    /// configuration chosen).
    #[serde(default)]
    pub lines: Vec<(String, String, String)>,
    /// Each MIG type's padding block on the node (`[controller.central] padding`); empty:
    /// not padded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub padding: BTreeMap<String, u32>,
    /// With padding, the node's devices afterwards in the order its gres.conf is to list
    /// them (`Desired::order`), fixed when the node is handed its plan; empty: GPU and
    /// placement order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<String>,
}

/// What happened to Slurm's view of the batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum SlurmStep {
    /// Slurm still has the old layouts.
    #[default]
    Untouched,
    /// The refresh is under way (include written, restart or reconfigure started): on a
    /// restart of the central role, Slurm's nodes are checked to learn which it got.
    Refreshing {
        /// Node → new GPU GRES.
        gres: BTreeMap<String, String>,
    },
    /// Slurm has the new layouts of these nodes.
    Refreshed,
    /// The refresh failed; the include is being put back and Slurm made to load it. On a
    /// restart of the central role this is done again, Slurm made to load the file even
    /// if it was put back already.
    Undoing {
        /// Node → the GPU GRES the refresh was to give it.
        gres: BTreeMap<String, String>,
        /// Why the refresh failed.
        error: String,
        /// Slurm loads the file put back only once the nodes' agents have put their
        /// gres.conf back (the reconfigure path: slurmd runs and re-reads gres.conf when
        /// Slurm reloads, so the two must agree by then).
        #[serde(default)]
        after_revert: bool,
        /// The include held the batch's values and was put back (Slurm reloads then).
        #[serde(default)]
        put_back: bool,
    },
    /// The refresh failed and the include was put back.
    Restored {
        /// Why.
        error: String,
    },
}

/// The batch in flight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// Generation of every node's desired state in the batch.
    pub generation: u64,
    /// When the batch was planned, Unix seconds.
    pub started_at: f64,
    /// Its nodes.
    pub nodes: BTreeMap<String, NodeTxn>,
    /// Slurm's side.
    pub slurm: SlurmStep,
    /// Seconds slurmd may stay stopped (half of Slurm's SlurmdTimeout).
    pub slurmd_budget_s: f64,
}

impl Batch {
    /// Whether every node is closed.
    pub fn is_closed(&self) -> bool {
        self.nodes.values().all(|n| n.state.is_closed()) && !matches!(self.slurm, SlurmStep::Undoing { .. })
    }

    /// Nodes in a state for which `pick` is true.
    pub fn in_state(&self, pick: impl Fn(&NodeState) -> bool) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|(_, t)| pick(&t.state))
            .map(|(n, _)| n.clone())
            .collect()
    }
}

/// What the central role keeps between cycles and restarts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Ledger {
    /// The batch in flight, if any.
    pub batch: Option<Batch>,
    /// When the last batch was planned (Unix seconds; 0: never), for the minimum interval.
    pub last_batch_at: f64,
    /// The highest generation handed out.
    pub generation: u64,
}

/// Why the ledger could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// Reading failed.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a ledger.
    #[error("{}: not a smartmig re-layout ledger: {source} (move it away only after checking every node it names: see docs/admin-guide.md)", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_json::Error,
    },
    /// The file parses but contradicts itself.
    #[error("{}: inconsistent re-layout ledger: {why} (move it away only after checking every node it names: see docs/admin-guide.md)", path.display())]
    Inconsistent {
        /// The file.
        path: PathBuf,
        /// What contradicts what.
        why: String,
    },
    /// Writing failed.
    #[error(transparent)]
    Write(#[from] smartmig_core::durable::DurableError),
}

impl Ledger {
    /// Reads the ledger from `state_dir` (an empty one when there is none).
    pub fn load(state_dir: &Path) -> Result<Ledger, LedgerError> {
        let path = state_dir.join(BATCH_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let ledger: Ledger = serde_json::from_slice(&bytes).map_err(|source| LedgerError::Parse {
                    path: path.clone(),
                    source,
                })?;
                // Every step of the batch acts on nodes of its own: a Slurm step naming
                // another node would have nothing to revert (a hand-edited file).
                if let Some(b) = &ledger.batch {
                    let named = match &b.slurm {
                        SlurmStep::Refreshing { gres } | SlurmStep::Undoing { gres, .. } => {
                            gres.keys().collect()
                        }
                        _ => Vec::new(),
                    };
                    if let Some(n) = named.into_iter().find(|n| !b.nodes.contains_key(*n)) {
                        return Err(LedgerError::Inconsistent {
                            path,
                            why: format!("its Slurm step names node {n}, which is not one of its nodes"),
                        });
                    }
                }
                Ok(ledger)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Ledger::default()),
            Err(source) => Err(LedgerError::Read { path, source }),
        }
    }

    /// Writes the ledger durably into `state_dir`.
    pub fn save(&self, state_dir: &Path) -> Result<(), LedgerError> {
        std::fs::create_dir_all(state_dir).map_err(|source| LedgerError::Read {
            path: state_dir.to_path_buf(),
            source,
        })?;
        let json = serde_json::to_vec_pretty(self).map_err(|source| LedgerError::Parse {
            path: state_dir.join(BATCH_FILE),
            source,
        })?;
        Ok(smartmig_core::durable::write(&state_dir.join(BATCH_FILE), &json)?)
    }
}

/// The drain reason of a re-layout in progress.
pub fn drain_reason(generation: u64) -> String {
    format!("{DRAIN_PREFIX}{generation}")
}

/// The drain reason of a node left drained after a failure.
pub fn held_reason(generation: u64, why: &str) -> String {
    // Slurm keeps the reason in a fixed-size field of its state file: keep it short.
    let why: String = why.chars().take(180).collect();
    format!("{HELD_PREFIX}gen {generation}: {why}")
}

/// The prefix of a re-layout's drain reason.
pub const DRAIN_PREFIX: &str = "smartmig: repartition gen ";

/// The prefix of the reason of a node smartmig left drained after a failure; smartmig
/// never resumes such a node itself (the admin does, or `smartmigd release`).
pub const HELD_PREFIX: &str = "smartmig: held: ";

/// Whether a drain reason is the one of re-layout `generation`.
pub fn is_ours(reason: Option<&str>, generation: u64) -> bool {
    reason == Some(drain_reason(generation).as_str())
}

/// How the reason slurmctld drains a node with starts when it refused the node's
/// registration over its GPUs; 24.11 puts it in place of a reason the node had (22.05
/// keeps the node's).
const GPU_REFUSAL: &str = "gres/gpu";

/// What slurmctld finds wrong in such a refusal, as its text says it
/// (`gres/gpu:3g.20gb count too low (1 < 2)`, `gres/gpu count reported lower than
/// configured (0 < 1)`, `gres/gpu type (3g.20gb) reported but not configured`, `gres/gpu
/// count changed and jobs are using them (1 != 2)`, `gres/gpu type changed and jobs are
/// using them`).
const GPU_REFUSALS: [&str; 4] = [
    " count too low (",
    " count reported lower than configured (",
    " reported but not configured",
    " changed and jobs are using them",
];

/// Whether a drain reason is slurmctld's refusal of the node's registration over its
/// GPUs, as slurmctld wrote it: nothing added since (a node slurmctld then marked down
/// reads `... : Not responding`).
pub fn is_gpu_refusal(reason: &str) -> bool {
    reason.starts_with(GPU_REFUSAL)
        && !reason.contains(" : ")
        && GPU_REFUSALS.iter().any(|s| reason.contains(s))
}

/// Whether a node re-layout `generation` drained still carries its drain: the
/// generation's reason, or slurmctld's GPU refusal put in its place (24.11) by a
/// registration refused during the batch. Such a registration is the batch's own doing:
/// one slurmd sent before Slurm's refresh reached it, with the layouts the node had.
pub fn still_ours(reason: Option<&str>, generation: u64) -> bool {
    is_ours(reason, generation) || reason.is_some_and(is_gpu_refusal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_survives_a_restart_and_a_missing_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Ledger::load(dir.path()).unwrap(), Ledger::default());
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "n1".to_string(),
            NodeTxn {
                state: NodeState::Installed {
                    gres: "gpu:3g.20gb:2".into(),
                },
                since: 5.0,
                targets: vec![],
                gpu_set: vec![(0, "A100-SXM4-40GB".into())],
                old_gres: "gpu:7g.40gb:1".into(),
                lines: vec![],
                padding: [("3g.20gb".to_string(), 2)].into(),
                order: vec!["0:3g.20gb@0".into(), "0:3g.20gb@4".into()],
            },
        );
        let ledger = Ledger {
            batch: Some(Batch {
                generation: 4,
                started_at: 1.0,
                nodes,
                slurm: SlurmStep::Refreshing {
                    gres: [("n1".to_string(), "gpu:3g.20gb:2".to_string())].into(),
                },
                slurmd_budget_s: 150.0,
            }),
            last_batch_at: 1.0,
            generation: 4,
        };
        ledger.save(dir.path()).unwrap();
        assert_eq!(Ledger::load(dir.path()).unwrap(), ledger);
        std::fs::write(dir.path().join(BATCH_FILE), "{").unwrap();
        let e = Ledger::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains(BATCH_FILE) && e.contains("admin-guide"), "{e}");
        // A Slurm step naming a node the batch does not have (a hand edit): refused by
        // name, never acted on.
        let mut edited = ledger.clone();
        if let Some(b) = &mut edited.batch {
            b.slurm = SlurmStep::Undoing {
                gres: [("n9".to_string(), "gpu:3g.20gb:2".to_string())].into(),
                error: "x".into(),
                after_revert: false,
                put_back: false,
            };
        }
        edited.save(dir.path()).unwrap();
        let e = Ledger::load(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains(BATCH_FILE) && e.contains("node n9, which is not one of its nodes"),
            "{e}"
        );
    }

    #[test]
    fn only_this_generations_reason_is_ours() {
        assert!(is_ours(Some("smartmig: repartition gen 7"), 7));
        assert!(!is_ours(Some("smartmig: repartition gen 7"), 8));
        assert!(!is_ours(Some("bad fan"), 7));
        assert!(!is_ours(None, 7));
        assert!(!is_ours(Some("gres/gpu:3g.20gb count too low (1 < 2)"), 7));
    }

    #[test]
    fn a_gpu_refusal_slurmctld_put_in_place_of_the_drain_keeps_the_node_the_batchs() {
        let refused = Some("gres/gpu:3g.20gb count too low (1 < 2)");
        assert!(still_ours(refused, 7) && still_ours(Some("smartmig: repartition gen 7"), 7));
        assert!(!still_ours(Some("gres/shard count too low (1 < 2)"), 7));
        assert!(still_ours(
            Some("gres/gpu count reported lower than configured (0 < 1)"),
            7
        ));
        assert!(still_ours(
            Some("gres/gpu type (3g.20gb) reported but not configured"),
            7
        ));
        assert!(still_ours(
            Some("gres/gpu count changed and jobs are using them (1 != 2)"),
            7
        ));
        // slurmctld marked the node down since (its slurmd died): not the batch's doing.
        assert!(!still_ours(
            Some("gres/gpu:3g.20gb count too low (1 < 2) : Not responding"),
            7
        ));
        // An admin's or a health check's text that only starts alike.
        assert!(!still_ours(Some("gres/gpu missing on GPU 3"), 7));
        assert!(!still_ours(Some("smartmig: repartition gen 6"), 7));
        assert!(!still_ours(Some("bad fan"), 7) && !still_ours(None, 7));
        assert!(held_reason(3, &"x".repeat(500)).len() < 220);
    }
}
