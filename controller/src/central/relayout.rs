//! Making Slurm see new layouts, behind a trait: one implementation per path, chosen by
//! `[controller.central] relayout` ([`chosen`]).
//!
//! Every path starts alike: the managed nodes' `NodeName=` lines live in a generated file
//! that slurm.conf `Include`s; smartmig rewrites their `Gres=` values (durably, keeping the
//! previous file, [`NodeFile`]). Slurm 22.05's verified path (docs/admin-guide.md,
//! "Central role"), here: every changing node's slurmd is stopped (the node agent does it
//! when it installs the new gres.conf), slurmctld is restarted once for the whole batch
//! (without `-c`: queue and running jobs survive), then the agents start slurmd again. On
//! any failure the previous file is put back and, if slurmctld was restarted with the new
//! one, restarted again. From Slurm 23.11 on a reconfigure does it without a restart
//! ([`super::reconfigure`]).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use smartmig_core::config::{CentralConfig, RelayoutKind};
use smartmig_core::durable::{self, DurableError};

use super::reconfigure::{Reconfigure, RECONFIGURE_SINCE};
use crate::command::{self, CommandError};
use crate::slurm::{managed_counts, merge_mig_gres, set_mig_block, SlurmApi, SlurmError};

/// Why Slurm could not be refreshed (or put back).
#[derive(Debug, thiserror::Error)]
pub enum RelayoutError {
    /// The generated node file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The generated node file could not be written (it keeps its old content).
    #[error(transparent)]
    Write(#[from] DurableError),
    /// The node file has no line for a node.
    #[error("{}: no `NodeName={node}` line (move the node's definition into this file)", path.display())]
    NoNodeLine {
        /// The file.
        path: PathBuf,
        /// The node.
        node: String,
    },
    /// The copy of the node file saved before the batch is gone: the file cannot be put
    /// back (it keeps the batch's values).
    #[error("{}: cannot put back the node definitions from before the batch: their saved copy {} is gone", path.display(), durable::previous_path(path).display())]
    NoSavedCopy {
        /// The node file.
        path: PathBuf,
    },
    /// The restart command failed.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// slurmctld did not answer in time after the restart.
    #[error("slurmctld did not answer within {0:?} after the restart: {1}")]
    NoAnswer(Duration, String),
    /// slurmctld refused the reconfigure.
    #[error("scontrol reconfigure: {0}")]
    Reconfigure(SlurmError),
    /// slurmctld did not show the batch's GRES in time after the reconfigure.
    #[error("Slurm did not show the new GRES within {0:?} after the reconfigure: {1}")]
    NoAnswerAfterReconfigure(Duration, String),
    /// slurmctld, restarted, shows other GRES for a node than the file it was to load.
    #[error("slurmctld, restarted, shows {node} with GRES {have}, not the node file's {want}")]
    NotLoaded {
        /// The node.
        node: String,
        /// What slurmctld shows.
        have: String,
        /// The file's.
        want: String,
    },
}

impl RelayoutError {
    /// Whether Slurm may have done what was asked all the same (its answer was lost).
    pub fn may_have_taken_effect(&self) -> bool {
        matches!(self, RelayoutError::Reconfigure(e) if e.may_have_taken_effect())
    }
}

/// One way of making Slurm see new layouts.
pub trait Relayout {
    /// Name in logs and the status file.
    fn name(&self) -> &str;
    /// Whether the nodes' slurmd must be stopped while Slurm learns their new layouts.
    fn stops_slurmd(&self) -> bool;
    /// The longest one [`Relayout::apply`] or [`Relayout::undo`] may take.
    fn timeout(&self) -> Duration;
    /// Checks, before anything changes, that these nodes can be refreshed.
    fn check(&self, nodes: &[String]) -> Result<(), RelayoutError>;
    /// Makes Slurm see each node's new GPU GRES (`(node, "gpu:1g.10gb:3,gpu:3g.40gb:1")`),
    /// all at once.
    fn apply(&mut self, api: &mut dyn SlurmApi, nodes: &[(String, String)]) -> Result<(), RelayoutError>;
    /// Puts back what an [`Relayout::apply`] of `nodes` changed, whether it succeeded,
    /// failed half-way, or was interrupted by a restart of the central role; returns
    /// whether anything had to be undone. With `reload` (an undo interrupted by a restart)
    /// Slurm is made to load what is put back even if it was put back already.
    fn undo(
        &mut self,
        api: &mut dyn SlurmApi,
        nodes: &[(String, String)],
        reload: bool,
    ) -> Result<bool, RelayoutError>;
    /// The first half of [`Relayout::undo`]: puts back what `apply` changed without having
    /// Slurm load it; returns whether anything had to be put back.
    fn put_back(&mut self, nodes: &[(String, String)]) -> Result<bool, RelayoutError>;
    /// The second half: has Slurm load what was put back.
    fn reload(&mut self, api: &mut dyn SlurmApi) -> Result<(), RelayoutError>;
    /// Between batches: makes what Slurm would load at its next restart or reconfigure
    /// say what slurmctld shows now for `shown`'s nodes (`(node, its Gres)`), where it
    /// says otherwise; returns what it changed. Paths without a node file have nothing to
    /// bring in line.
    fn agree(&mut self, shown: &[(String, String)]) -> Result<Vec<Disagreement>, RelayoutError> {
        let _ = shown;
        Ok(Vec::new())
    }
    /// Between batches: of `left` (nodes that slurmctld shows with other MIG GRES than
    /// their agents report), those whose definition in what Slurm loads says what the
    /// agent reports have slurmctld as the one side left behind (a way back whose reload
    /// failed); makes Slurm load it again for them and returns them. Paths without a node
    /// file have nothing to load again.
    fn catch_up(&mut self, api: &mut dyn SlurmApi, left: &[LeftBehind]) -> Result<Vec<String>, CatchUpError> {
        let _ = (api, left);
        Ok(Vec::new())
    }
    /// The nodes whose definition in what Slurm loads has other GPU counts than slurmctld
    /// shows (`shown`: `(node, its Gres)`), or that slurmctld does not show: what a
    /// reconfigure would change. Paths without a node file change nothing.
    fn would_change(&mut self, shown: &[(String, String)]) -> Result<Vec<String>, RelayoutError> {
        let _ = shown;
        Ok(Vec::new())
    }
}

/// Why Slurm was not made to load the node file again for the nodes it is left behind on.
#[derive(Debug, thiserror::Error)]
pub enum CatchUpError {
    /// The file could not be read.
    #[error(transparent)]
    Read(RelayoutError),
    /// A load gives slurmctld every line of the file, and one would change the GPU count
    /// of a node jobs run on (Slurm would requeue them).
    #[error(
        "the node file is not loaded again: jobs run on {node}, whose GPU count it would change \
         (slurmctld shows {shown}, the file has {file}); it waits for them"
    )]
    Busy {
        /// The node.
        node: String,
        /// The `Gres` slurmctld shows.
        shown: String,
        /// Its `Gres=` in the file.
        file: String,
    },
    /// The load failed.
    #[error("loading the node file again for {} failed: {source}", nodes.join(", "))]
    Load {
        /// The nodes it was loaded for.
        nodes: Vec<String>,
        /// Why.
        source: RelayoutError,
    },
}

/// A node slurmctld shows with other MIG GRES than its agent reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftBehind {
    /// The node.
    pub node: String,
    /// The MIG GRES its agent reports.
    pub reported: String,
    /// The `Gres` slurmctld shows.
    pub shown: String,
    /// Whether jobs run on it.
    pub busy: bool,
}

/// A node whose MIG GRES in the node file differed from slurmctld's, now written as
/// slurmctld's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// The node.
    pub node: String,
    /// Its `Gres=` in the file before.
    pub file: String,
    /// The `Gres` slurmctld shows.
    pub slurmctld: String,
}

/// A `relayout` choice that cannot work with the Slurm smartmigd was built against.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[controller.central] relayout = \"{chosen}\" cannot work with Slurm {release}: {why}")]
pub struct UnusableRelayout {
    /// The configured path.
    pub chosen: &'static str,
    /// The release smartmigd was built for.
    pub release: String,
    /// What was measured (docs/admin-guide.md, "Slurm versions").
    pub why: &'static str,
}

/// The re-layout `cc.relayout` names for MIG types `mig_types`; `auto` by the Slurm release
/// smartmigd was built against (`built_for`, a `SLURM_VERSION_NUMBER`): [`Reconfigure`]
/// from 23.11 on, where a reconfigure re-executes slurmctld in place, [`RestartSlurmctld`]
/// before. An explicit choice the release cannot carry out is refused: every batch would
/// otherwise end with its nodes held.
pub fn chosen(
    cc: &CentralConfig,
    built_for: u32,
    mig_types: HashSet<String>,
) -> Result<Box<dyn Relayout>, UnusableRelayout> {
    let timeout = Duration::from_secs_f64(cc.slurmctld_timeout_s);
    let modern = built_for >= RECONFIGURE_SINCE;
    let refuse = |chosen, why| UnusableRelayout {
        chosen,
        release: crate::slurm::version_text(built_for),
        why,
    };
    let reconfigure =
        match cc.relayout {
            RelayoutKind::Auto => modern,
            RelayoutKind::Reconfigure if !modern => return Err(refuse(
                "reconfigure",
                "before 23.11 a reconfigure does not reload a node's GRES: the node's next registration is \
                 refused (INVALID_REG) and it is drained; use \"auto\" (the slurmctld restart)",
            )),
            RelayoutKind::Reconfigure => true,
            RelayoutKind::RestartSlurmctld if modern => {
                return Err(refuse(
                    "restart-slurmctld",
                    "from 23.11 a restarted slurmctld keeps a node's GRES from its saved state until the \
                 node's slurmd registers again, so the new layout cannot be checked before slurmd starts; \
                 use \"auto\" (the reconfigure)",
                ))
            }
            RelayoutKind::RestartSlurmctld => false,
        };
    let include = cc.nodes_include.clone();
    Ok(if reconfigure {
        Box::new(ViaNodeFile {
            include,
            timeout,
            mig_types,
            loader: Reconfigure,
        })
    } else {
        Box::new(ViaNodeFile {
            include,
            timeout,
            mig_types,
            loader: RestartSlurmctld {
                command: cc.restart_slurmctld.clone(),
            },
        })
    })
}

/// The generated node file and the MIG types smartmig manages in it: what every path
/// writes before Slurm loads it, and puts back.
#[derive(Debug, Clone, Copy)]
pub struct NodeFile<'a> {
    /// The file.
    pub include: &'a std::path::Path,
    /// The MIG types smartmig manages: a node's other GRES (non-MIG GPUs, licenses,
    /// shards) stay as the site wrote them.
    pub mig_types: &'a HashSet<String>,
}

impl NodeFile<'_> {
    fn read(&self) -> Result<String, RelayoutError> {
        std::fs::read_to_string(self.include).map_err(|source| RelayoutError::Read {
            path: self.include.to_path_buf(),
            source,
        })
    }

    /// Checks that the file defines every node of `nodes`.
    pub fn check(&self, nodes: &[String]) -> Result<(), RelayoutError> {
        let text = self.read()?;
        for node in nodes {
            if node_gres(&text, node).is_none() {
                return Err(RelayoutError::NoNodeLine {
                    path: self.include.to_path_buf(),
                    node: node.clone(),
                });
            }
        }
        Ok(())
    }

    /// Writes the batch's GRES, durably, keeping the previous file.
    pub fn write(&self, nodes: &[(String, String)]) -> Result<(), RelayoutError> {
        let mut text = self.read()?;
        for (node, gres) in nodes {
            text = set_node_gres(&text, node, gres, self.mig_types).ok_or_else(|| {
                RelayoutError::NoNodeLine {
                    path: self.include.to_path_buf(),
                    node: node.clone(),
                }
            })?;
        }
        durable::replace_keeping_previous(self.include, text.as_bytes())?;
        log::info!("{}: new GRES for {} node(s)", self.include.display(), nodes.len());
        Ok(())
    }

    /// The nodes whose line has other GPU counts than slurmctld shows (`shown`: node, the
    /// `Gres` slurmctld shows), or that slurmctld does not show (a line for several nodes
    /// included); the `DEFAULT` line defines no node.
    pub fn differing(&self, shown: &[(String, String)]) -> Result<Vec<String>, RelayoutError> {
        let text = self.read()?;
        let shown: HashMap<&str, &str> = shown.iter().map(|(n, g)| (n.as_str(), g.as_str())).collect();
        Ok(text
            .lines()
            .filter_map(line_gres)
            .filter(|(node, _)| !node.eq_ignore_ascii_case("DEFAULT"))
            .filter(|(node, gres)| !shown.get(node).is_some_and(|have| super::same_gpus(have, gres)))
            .map(|(node, _)| node.to_string())
            .collect())
    }

    /// Sets each node's MIG GRES (padding types included) where the file says otherwise
    /// than slurmctld (`shown`: node, the `Gres` slurmctld shows) to slurmctld's, durably;
    /// nodes without a line, or whose `Gres` does not read, are left alone. A way back
    /// that could not put the file back leaves it holding a failed batch's values, which
    /// slurmctld would load at its next restart under nodes whose gres.conf say otherwise.
    pub fn agree_with(&self, shown: &[(String, String)]) -> Result<Vec<Disagreement>, RelayoutError> {
        let mut text = self.read()?;
        // One pass over the file for every node (a cycle's cost must not grow with the
        // square of the cluster); the rare line rewritten is found again below.
        let mut lines: HashMap<String, String> = HashMap::new();
        for (n, g) in text.lines().filter_map(line_gres) {
            // The first line of a node counts, as for [`node_gres`].
            lines.entry(n.to_string()).or_insert_with(|| g.to_string());
        }
        let mut changed = Vec::new();
        for (node, gres) in shown {
            let Some(file) = lines.get(node).cloned() else {
                continue;
            };
            let (Some(want), Some(have)) = (
                managed_counts(gres, self.mig_types),
                managed_counts(&file, self.mig_types),
            ) else {
                continue;
            };
            // Counts only: slurmctld rebuilds a node's Gres when its slurmd registers, in
            // an order that need not be the include's (a padded node's). Written, the
            // file takes slurmctld's order.
            let sorted = |mut v: Vec<(String, u32)>| {
                v.sort();
                v
            };
            if sorted(have) == sorted(want.clone()) {
                continue;
            }
            let mig: Vec<String> = want.iter().map(|(t, n)| format!("gpu:{t}:{n}")).collect();
            let mig = mig.join(",");
            let Some(next) =
                edit_node_gres(&text, node, |before| set_mig_block(before, &mig, self.mig_types))
            else {
                continue;
            };
            text = next;
            changed.push(Disagreement {
                node: node.clone(),
                file,
                slurmctld: gres.clone(),
            });
        }
        if !changed.is_empty() {
            durable::write(self.include, text.as_bytes())?;
        }
        Ok(changed)
    }

    /// Puts the previous file back if it holds the batch's values (only [`NodeFile::write`]
    /// wrote them: the saved copy is then the one from just before); returns whether it did.
    pub fn put_back(&self, nodes: &[(String, String)]) -> Result<bool, RelayoutError> {
        let text = self.read()?;
        let mut with_batch = text.clone();
        for (n, g) in nodes {
            with_batch = set_node_gres(&with_batch, n, g, self.mig_types).unwrap_or_default();
        }
        if nodes.is_empty() || with_batch != text {
            return Ok(false);
        }
        if !durable::restore_previous(self.include)? {
            return Err(RelayoutError::NoSavedCopy {
                path: self.include.to_path_buf(),
            });
        }
        log::warn!("{}: previous GRES put back", self.include.display());
        Ok(true)
    }
}

/// How Slurm is made to load the node file: the one part in which the paths differ.
pub trait Loader {
    /// Name in logs and the status file.
    const NAME: &'static str;
    /// Whether the nodes' slurmd must be stopped while Slurm loads their new layouts.
    const STOPS_SLURMD: bool;
    /// Makes Slurm load the file just written and confirms it took the batch's `nodes`
    /// (whose MIG types are `file.mig_types`), within `timeout`.
    fn load(
        &self,
        api: &mut dyn SlurmApi,
        file: &NodeFile<'_>,
        nodes: &[(String, String)],
        timeout: Duration,
    ) -> Result<(), RelayoutError>;
    /// Makes Slurm load the previous file, just put back.
    fn load_previous(&self, api: &mut dyn SlurmApi, timeout: Duration) -> Result<(), RelayoutError>;
    /// Makes Slurm load the file again, unchanged, for `nodes` whose running slurmd it
    /// refused: as [`Loader::load`] unless the path has more to check.
    fn load_again(
        &self,
        api: &mut dyn SlurmApi,
        file: &NodeFile<'_>,
        nodes: &[(String, String)],
        timeout: Duration,
    ) -> Result<(), RelayoutError> {
        self.load(api, file, nodes, timeout)
    }
}

/// A re-layout through the generated node file: write it, have Slurm load it; the way
/// back puts the previous file back and has Slurm load that.
#[derive(Debug, Clone)]
pub struct ViaNodeFile<L> {
    /// The generated node file.
    pub include: PathBuf,
    /// How long slurmctld may take to load and answer (a command included).
    pub timeout: Duration,
    /// The MIG types smartmig manages: a node's other GRES (non-MIG GPUs, licenses,
    /// shards) stay as the site wrote them.
    pub mig_types: HashSet<String>,
    /// How Slurm loads the file.
    pub loader: L,
}

impl<L> ViaNodeFile<L> {
    fn file(&self) -> NodeFile<'_> {
        NodeFile {
            include: &self.include,
            mig_types: &self.mig_types,
        }
    }
}

impl<L: Loader> Relayout for ViaNodeFile<L> {
    fn name(&self) -> &str {
        L::NAME
    }

    fn stops_slurmd(&self) -> bool {
        L::STOPS_SLURMD
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn check(&self, nodes: &[String]) -> Result<(), RelayoutError> {
        self.file().check(nodes)
    }

    fn apply(&mut self, api: &mut dyn SlurmApi, nodes: &[(String, String)]) -> Result<(), RelayoutError> {
        if nodes.is_empty() {
            return Ok(());
        }
        let file = self.file();
        file.write(nodes)?;
        self.loader.load(api, &file, nodes, self.timeout)
    }

    fn undo(
        &mut self,
        api: &mut dyn SlurmApi,
        nodes: &[(String, String)],
        reload: bool,
    ) -> Result<bool, RelayoutError> {
        // Slurm may have loaded either file: have it load the previous one.
        if !self.put_back(nodes)? && !reload {
            return Ok(false);
        }
        self.reload(api)?;
        Ok(true)
    }

    fn put_back(&mut self, nodes: &[(String, String)]) -> Result<bool, RelayoutError> {
        self.file().put_back(nodes)
    }

    fn reload(&mut self, api: &mut dyn SlurmApi) -> Result<(), RelayoutError> {
        self.loader.load_previous(api, self.timeout)
    }

    fn agree(&mut self, shown: &[(String, String)]) -> Result<Vec<Disagreement>, RelayoutError> {
        self.file().agree_with(shown)
    }

    fn would_change(&mut self, shown: &[(String, String)]) -> Result<Vec<String>, RelayoutError> {
        self.file().differing(shown)
    }

    fn catch_up(&mut self, api: &mut dyn SlurmApi, left: &[LeftBehind]) -> Result<Vec<String>, CatchUpError> {
        let file = self.file();
        let text = file.read().map_err(CatchUpError::Read)?;
        let gpus = |g: &str| {
            crate::slurm::parse_gres(g, "GRES")
                .map(|v| v.iter().map(|e| e.count).sum::<u32>())
                .ok()
        };
        let lines: Vec<(&LeftBehind, String)> = left
            .iter()
            .filter_map(|l| node_gres(&text, &l.node).map(|g| (l, g)))
            .collect();
        let behind: Vec<(String, String)> = lines
            .iter()
            .filter(|(l, g)| super::same_mig_gres(g, &l.reported, &self.mig_types))
            .map(|(l, g)| (l.node.clone(), g.clone()))
            .collect();
        if behind.is_empty() {
            return Ok(Vec::new());
        }
        // Slurm loads every line, whichever side is right for the node.
        if let Some((l, g)) = lines.iter().find(|(l, g)| l.busy && gpus(g) != gpus(&l.shown)) {
            return Err(CatchUpError::Busy {
                node: l.node.clone(),
                shown: l.shown.clone(),
                file: g.clone(),
            });
        }
        let nodes: Vec<String> = behind.iter().map(|(n, _)| n.clone()).collect();
        log::warn!(
            "slurmctld shows other GRES than {} has for {}: loading it again",
            self.include.display(),
            nodes.join(", ")
        );
        match self.loader.load_again(api, &file, &behind, self.timeout) {
            Ok(()) => Ok(nodes),
            Err(source) => Err(CatchUpError::Load { nodes, source }),
        }
    }
}

/// Slurm 22.05: restart slurmctld once (the node file rewritten before).
#[derive(Debug, Clone)]
pub struct RestartSlurmctld {
    /// The restart command (program, arguments).
    pub command: Vec<String>,
}

impl RestartSlurmctld {
    /// Restarts slurmctld and waits for it to answer, both within `timeout` (what the
    /// slurmd budget counts for a refresh).
    fn restart(&self, api: &mut dyn SlurmApi, timeout: Duration) -> Result<(), RelayoutError> {
        log::info!("restarting slurmctld: {}", self.command.join(" "));
        let started = std::time::Instant::now();
        command::run(&self.command, timeout)?;
        let left = timeout.saturating_sub(started.elapsed());
        let mut last = String::new();
        let answered = command::poll_until(left, Duration::from_millis(200), || match api.ping() {
            Ok(()) => Some(()),
            Err(e) => {
                last = e.to_string();
                None
            }
        });
        answered.ok_or(RelayoutError::NoAnswer(timeout, last))
    }
}

impl Loader for RestartSlurmctld {
    const NAME: &'static str = "restart-slurmctld";
    const STOPS_SLURMD: bool = true;

    fn load(
        &self,
        api: &mut dyn SlurmApi,
        _: &NodeFile<'_>,
        _: &[(String, String)],
        timeout: Duration,
    ) -> Result<(), RelayoutError> {
        self.restart(api, timeout)
    }

    fn load_previous(&self, api: &mut dyn SlurmApi, timeout: Duration) -> Result<(), RelayoutError> {
        self.restart(api, timeout)
    }

    /// Restarts slurmctld, and checks that it read the file's values for `nodes` at its
    /// start: else a restart command that restarted something else would be run again at
    /// every try. A restarted slurmctld asks every node to register (it keeps no refused
    /// registration across a restart: the nodes come back UNKNOWN), so the refused nodes'
    /// running slurmd register with the definitions just loaded.
    fn load_again(
        &self,
        api: &mut dyn SlurmApi,
        file: &NodeFile<'_>,
        nodes: &[(String, String)],
        timeout: Duration,
    ) -> Result<(), RelayoutError> {
        self.restart(api, timeout)?;
        for (node, want) in nodes {
            let have = api
                .node(node)
                .map_err(|e| RelayoutError::NoAnswer(timeout, e.to_string()))?
                .map(|n| n.gres)
                .unwrap_or_default();
            if !super::same_gpu_gres(&have, want, file.mig_types) {
                return Err(RelayoutError::NotLoaded {
                    node: node.clone(),
                    have,
                    want: want.clone(),
                });
            }
        }
        Ok(())
    }
}

/// The `Gres=` value of node `node`'s line in `text` ("" when the line has none), None
/// when no line defines exactly this node.
pub fn node_gres(text: &str, node: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line_gres(line).filter(|(n, _)| *n == node))
        .map(|(_, g)| g.to_string())
}

/// The node a `NodeName=` line defines and its `Gres=` value ("" when it has none); None
/// for any other line.
fn line_gres(line: &str) -> Option<(&str, &str)> {
    let first = line.split_whitespace().next()?;
    let (k, node) = first.split_once('=')?;
    if !k.eq_ignore_ascii_case("NodeName") {
        return None;
    }
    let gres = line
        .split_whitespace()
        .find_map(|w| {
            w.split_once('=')
                .filter(|(k, _)| k.eq_ignore_ascii_case("Gres"))
                .map(|(_, v)| v)
        })
        .unwrap_or_default();
    Some((node, gres))
}

/// `text` with the MIG entries of the `Gres=` of node `node`'s line set to `gpu`, in
/// place ([`merge_mig_gres`]: every entry whose type is not in `mig_types` kept, the order
/// of the types kept); None when no line defines exactly this node.
pub fn set_node_gres(text: &str, node: &str, gpu: &str, mig_types: &HashSet<String>) -> Option<String> {
    edit_node_gres(text, node, |before| merge_mig_gres(before, gpu, mig_types))
}

/// `text` with the `Gres=` of node `node`'s line set to `edit` of its value ("" when the
/// line has none); None when no line defines exactly this node.
fn edit_node_gres(text: &str, node: &str, edit: impl Fn(&str) -> String) -> Option<String> {
    let mut found = false;
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let mut words: Vec<String> = body.split_whitespace().map(str::to_string).collect();
        let is_node = words
            .first()
            .and_then(|w| w.split_once('='))
            .is_some_and(|(k, v)| k.eq_ignore_ascii_case("NodeName") && v == node);
        if !is_node {
            out.push_str(line);
            continue;
        }
        found = true;
        let gres_at = words.iter().position(|w| {
            w.split_once('=')
                .is_some_and(|(k, _)| k.eq_ignore_ascii_case("Gres"))
        });
        let before = gres_at
            .map(|i| words[i].split_once('=').map_or("", |(_, v)| v))
            .unwrap_or("");
        let token = format!("Gres={}", edit(before));
        match gres_at {
            Some(i) => words[i] = token,
            None => words.push(token),
        }
        out.push_str(&words.join(" "));
        if line.ends_with('\n') {
            out.push('\n');
        }
    }
    found.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mig() -> HashSet<String> {
        ["1g.10gb", "3g.40gb", "7g.40gb"].map(String::from).into()
    }

    #[test]
    fn only_the_named_nodes_mig_gres_changes_other_gres_stay_and_types_keep_their_place() {
        let text = "# generated\nNodeName=gpu1 CPUs=16 Gres=gpu:a100:1,gpu:3g.40gb:2,license:2,gpu:7g.40gb:1\nNodeName=gpu10 Gres=gpu:7g.40gb:1\n";
        let out = set_node_gres(text, "gpu1", "gpu:1g.10gb:3,gpu:3g.40gb:1", &mig()).unwrap();
        assert_eq!(
            out,
            "# generated\nNodeName=gpu1 CPUs=16 Gres=gpu:a100:1,gpu:3g.40gb:1,gpu:1g.10gb:3,license:2\nNodeName=gpu10 Gres=gpu:7g.40gb:1\n"
        );
        assert_eq!(node_gres(&out, "gpu10").as_deref(), Some("gpu:7g.40gb:1"));
        let added = set_node_gres("NodeName=n2 CPUs=2", "n2", "gpu:7g.40gb:1", &mig()).unwrap();
        assert_eq!(added, "NodeName=n2 CPUs=2 Gres=gpu:7g.40gb:1");
        assert!(set_node_gres(text, "gpu2", "gpu:7g.40gb:1", &mig()).is_none());
    }

    #[test]
    fn between_batches_a_node_file_left_with_a_failed_batchs_values_is_written_as_slurmctld_shows_them() {
        let dir = tempfile::tempdir().unwrap();
        let include = dir.path().join("nodes.conf");
        // gpu1's line kept a failed batch's values (its put-back failed); gpu2 agrees.
        let text = "# generated\nNodeName=gpu1 CPUs=16 Gres=gpu:a100:1,gpu:1g.10gb:7,license:2\nNodeName=gpu2 Gres=gpu:7g.40gb:1\n";
        std::fs::write(&include, text).unwrap();
        let mut r = restart(dir.path(), "exit 0");
        let shown = [
            (
                "gpu1".to_string(),
                "gpu:a100:1(S:0),gpu:3g.40gb:2(S:0),license:2".to_string(),
            ),
            ("gpu2".to_string(), "gpu:7g.40gb:1(S:0)".to_string()),
            ("elsewhere".to_string(), "gpu:1g.10gb:7".to_string()),
        ];
        let changed = r.agree(&shown).unwrap();
        assert_eq!(
            changed,
            vec![Disagreement {
                node: "gpu1".into(),
                file: "gpu:a100:1,gpu:1g.10gb:7,license:2".into(),
                slurmctld: shown[0].1.clone(),
            }]
        );
        assert_eq!(
            std::fs::read_to_string(&include).unwrap(),
            "# generated\nNodeName=gpu1 CPUs=16 Gres=gpu:a100:1,gpu:3g.40gb:2,license:2\nNodeName=gpu2 Gres=gpu:7g.40gb:1\n"
        );
        assert!(r.agree(&shown).unwrap().is_empty(), "in line now");
        // A batch that dropped a type and added one: slurmctld's order comes back with its
        // counts (Slurm numbers the devices type by type in this order).
        std::fs::write(
            &include,
            "NodeName=gpu1 Gres=gpu:a100:1,gpu:3g.40gb:2,gpu:1g.10gb:7,license:2\n",
        )
        .unwrap();
        let shown = [(
            "gpu1".to_string(),
            "gpu:a100:1(S:0),gpu:7g.40gb:1(S:0),gpu:3g.40gb:2(S:0),license:2".to_string(),
        )];
        assert_eq!(r.agree(&shown).unwrap().len(), 1);
        assert_eq!(
            std::fs::read_to_string(&include).unwrap(),
            "NodeName=gpu1 Gres=gpu:a100:1,gpu:7g.40gb:1,gpu:3g.40gb:2,license:2\n"
        );
        // The same counts in another order agree (slurmctld lists gres.conf's order).
        std::fs::write(&include, "NodeName=gpu1 Gres=gpu:3g.40gb:2,gpu:7g.40gb:1\n").unwrap();
        assert!(r.agree(&shown).unwrap().is_empty());
        // A line that does not read is left alone.
        std::fs::write(&include, "NodeName=gpu1 Gres=gpu:3g.40gb:two\n").unwrap();
        assert!(r.agree(&shown).unwrap().is_empty());
        // A file that cannot be read is an error.
        std::fs::write(&include, text).unwrap();
        let gone = dir.path().join("gone");
        r.include = gone.join("nodes.conf");
        assert!(matches!(r.agree(&shown), Err(RelayoutError::Read { .. })));
    }

    #[test]
    fn slurm_loads_the_node_file_again_for_nodes_whose_line_has_what_their_agents_report_unless_a_busy_node_would_change_count(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let include = dir.path().join("nodes.conf");
        // gpu1's line was put back to what its agent reports, but the reload failed;
        // gpu2's line says neither (which side is right is not known: it is not named).
        let line1 = "gpu:a100:1,gpu:7g.40gb:1,license:2";
        let text = format!("NodeName=gpu1 Gres={line1}\nNodeName=gpu2 Gres=gpu:3g.40gb:2\n");
        std::fs::write(&include, &text).unwrap();
        let log = dir.path().join("restarts");
        let mut r = restart(dir.path(), &format!("echo x >> {}", log.display()));
        // slurmctld as it comes back from the restart: the file's values.
        let mut api = crate::central::fake::FakeSlurm {
            nodes: vec![crate::slurm::SlurmNode {
                name: "gpu1".into(),
                gres: line1.into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let restarts = || std::fs::read_to_string(&log).map_or(0, |l| l.lines().count());
        let behind = |node: &str, reported: &str, shown: &str, busy: bool| LeftBehind {
            node: node.into(),
            reported: reported.into(),
            shown: shown.into(),
            busy,
        };
        let left = [
            behind(
                "gpu1",
                "gpu:7g.40gb:1",
                "gpu:a100:1,gpu:3g.40gb:1,license:2",
                true,
            ),
            behind("gpu2", "gpu:1g.10gb:7", "gpu:3g.40gb:2", false),
            behind("elsewhere", "gpu:7g.40gb:1", "gpu:1g.10gb:7", false),
        ];
        assert_eq!(r.catch_up(&mut api, &left).unwrap(), vec!["gpu1".to_string()]);
        assert_eq!(restarts(), 1);
        assert_eq!(api.reconfigures, 0, "the restart asks every slurmd to register");
        assert_eq!(
            std::fs::read_to_string(&include).unwrap(),
            text,
            "the file as it was"
        );
        assert!(r.catch_up(&mut api, &left[1..]).unwrap().is_empty());
        assert_eq!(restarts(), 1, "nothing to load again");
        // A busy line alone holds nothing back: no load is due.
        let busy2 = behind("gpu2", "gpu:1g.10gb:7", "gpu:1g.10gb:7", true);
        assert!(r.catch_up(&mut api, &[busy2]).unwrap().is_empty());
        // Jobs run on a node whose GPU count the load would change (gpu1 itself, or gpu2
        // whose line is loaded with the rest): nothing loads.
        for busy in [
            behind(
                "gpu1",
                "gpu:7g.40gb:1",
                "gpu:a100:1,gpu:3g.40gb:2,license:2",
                true,
            ),
            behind("gpu2", "gpu:1g.10gb:7", "gpu:1g.10gb:7", true),
        ] {
            let both = [left[0].clone(), busy];
            let e = r.catch_up(&mut api, &both).unwrap_err();
            assert!(matches!(e, CatchUpError::Busy { .. }), "{e}");
        }
        assert_eq!(restarts(), 1, "left for the jobs to end");
        // A restart that did not load the file (the command restarted something else).
        api.nodes[0].gres = "gpu:a100:1,gpu:3g.40gb:1,license:2".into();
        let e = r.catch_up(&mut api, &left).unwrap_err();
        assert!(
            matches!(
                &e,
                CatchUpError::Load {
                    source: RelayoutError::NotLoaded { .. },
                    ..
                }
            ),
            "{e}"
        );
        r.loader.command = vec!["sh".into(), "-c".into(), "exit 4".into()];
        let e = r.catch_up(&mut api, &left).unwrap_err().to_string();
        assert!(
            e.contains("exit status: 4") && e.contains("for gpu1 failed"),
            "{e}"
        );
    }

    #[test]
    fn a_reconfigure_would_change_the_lines_with_other_gpu_counts_than_slurmctld_shows_and_those_of_nodes_it_does_not_show(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let text = "NodeName=DEFAULT Gres=gpu:a100:8\n\
                    NodeName=gpu1 Gres=gpu:a100:1,gpu:7g.40gb:1,license:2\n\
                    NodeName=gpu2 Gres=gpu:3g.40gb:2\n\
                    NodeName=gpu3 Gres=gpu:1g.10gb:7\n";
        std::fs::write(dir.path().join("nodes.conf"), text).unwrap();
        let mut r = restart(dir.path(), "true");
        let shown = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter().map(|(n, g)| (n.to_string(), g.to_string())).collect()
        };
        // gpu1 in another order and without the license: the same GPUs.
        let same = shown(&[
            ("gpu1", "gpu:7g.40gb:1(S:0),gpu:a100:1"),
            ("gpu2", "gpu:3g.40gb:2"),
            ("gpu3", "gpu:1g.10gb:7"),
        ]);
        assert!(r.would_change(&same).unwrap().is_empty());
        let other = shown(&[("gpu1", "gpu:7g.40gb:1"), ("gpu2", "gpu:3g.40gb:1")]);
        assert_eq!(r.would_change(&other).unwrap(), ["gpu1", "gpu2", "gpu3"]);
    }

    fn restart(dir: &std::path::Path, script: &str) -> ViaNodeFile<RestartSlurmctld> {
        ViaNodeFile {
            include: dir.join("nodes.conf"),
            timeout: Duration::from_secs(5),
            mig_types: mig(),
            loader: RestartSlurmctld {
                command: vec!["sh".into(), "-c".into(), script.into()],
            },
        }
    }

    #[test]
    fn a_failed_restart_is_undone_with_the_previous_file_and_a_second_restart() {
        let dir = tempfile::tempdir().unwrap();
        let include = dir.path().join("nodes.conf");
        std::fs::write(&include, "NodeName=a Gres=gpu:7g.40gb:1\n").unwrap();
        let log = dir.path().join("restarts");
        let mut api = crate::central::fake::FakeSlurm::default();
        let mut r = restart(dir.path(), &format!("echo x >> {}; exit 3", log.display()));
        assert!(matches!(
            r.check(&["b".into()]),
            Err(RelayoutError::NoNodeLine { .. })
        ));
        let batch = [("a".to_string(), "gpu:1g.10gb:7".to_string())];
        let e = r.apply(&mut api, &batch).unwrap_err().to_string();
        assert!(e.contains("exit status: 3"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&include).unwrap(),
            "NodeName=a Gres=gpu:1g.10gb:7\n"
        );
        r.loader.command = vec!["sh".into(), "-c".into(), format!("echo x >> {}", log.display())];
        assert!(
            r.undo(&mut api, &batch, false).unwrap(),
            "the batch's values were in the file"
        );
        assert_eq!(
            std::fs::read_to_string(&include).unwrap(),
            "NodeName=a Gres=gpu:7g.40gb:1\n"
        );
        assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 2);
        assert!(!r.undo(&mut api, &batch, false).unwrap(), "nothing left to undo");
    }

    #[test]
    fn a_put_back_whose_saved_copy_is_gone_is_an_error_and_the_file_keeps_the_batchs_values() {
        let dir = tempfile::tempdir().unwrap();
        let include = dir.path().join("nodes.conf");
        std::fs::write(&include, "NodeName=a Gres=gpu:7g.40gb:1\n").unwrap();
        let mut r = restart(dir.path(), "exit 3");
        let mut api = crate::central::fake::FakeSlurm::default();
        let batch = [("a".to_string(), "gpu:1g.10gb:7".to_string())];
        assert!(r.apply(&mut api, &batch).is_err());
        std::fs::remove_file(durable::previous_path(&include)).unwrap();
        let e = r.put_back(&batch).unwrap_err();
        assert!(matches!(e, RelayoutError::NoSavedCopy { .. }), "{e}");
        assert!(e.to_string().contains("is gone"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&include).unwrap(),
            "NodeName=a Gres=gpu:1g.10gb:7\n"
        );
    }

    #[test]
    fn a_restart_and_the_wait_for_slurmctld_share_one_timeout() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("nodes.conf"), "NodeName=a Gres=gpu:7g.40gb:1\n").unwrap();
        let mut r = restart(dir.path(), "sleep 2.5");
        r.timeout = Duration::from_secs(3);
        // slurmctld never answers after the restart.
        let mut api = crate::central::fake::FakeSlurm {
            outage: 0..u32::MAX,
            ..Default::default()
        };
        let batch = [("a".to_string(), "gpu:1g.10gb:7".to_string())];
        let started = std::time::Instant::now();
        let e = r.apply(&mut api, &batch).unwrap_err();
        assert!(matches!(e, RelayoutError::NoAnswer(..)), "{e}");
        // Not the command's 2.5 s and then 3 s more of pings (5.5 s): the budget counts
        // one (3 s). The 1.5 s margin either side absorbs a loaded machine.
        assert!(
            started.elapsed() < Duration::from_millis(4500),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn an_include_that_cannot_be_written_stays_as_it_was_and_nothing_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let include = dir.path().join("nodes.conf");
        std::fs::write(&include, "NodeName=a Gres=gpu:7g.40gb:1\n").unwrap();
        // The saved copy's place is taken by a directory: the write fails before the file.
        std::fs::create_dir(durable::previous_path(&include)).unwrap();
        std::fs::write(durable::previous_path(&include).join("x"), "").unwrap();
        let log = dir.path().join("restarts");
        let mut r = restart(dir.path(), &format!("echo x >> {}", log.display()));
        let mut api = crate::central::fake::FakeSlurm::default();
        let batch = [("a".to_string(), "gpu:1g.10gb:7".to_string())];
        let e = r.apply(&mut api, &batch).unwrap_err().to_string();
        assert!(e.contains("nodes.conf.smartmig-prev"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&include).unwrap(),
            "NodeName=a Gres=gpu:7g.40gb:1\n"
        );
        assert!(!r.undo(&mut api, &batch, false).unwrap());
        assert!(!log.exists(), "slurmctld was never restarted");
    }
}
