//! What keeps the central role from re-laying out more, more often or elsewhere than the
//! admin allows: a freeze, the minimum interval between batches, maintenance windows,
//! node and partition allow-lists, how many cycles a target must persist, and how many
//! nodes one batch may change (`[controller.central]`, docs/admin-guide.md "Limits").

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use smartmig_core::config::hostlist::HostList;
use smartmig_core::config::window::Window;
use smartmig_core::config::CentralConfig;

use crate::slurm::SlurmNode;

/// The freeze file's name inside `[controller] state_dir` (`smartmigd freeze`).
pub const FREEZE_FILE: &str = "frozen";

/// Why no new batch may start now (None: one may).
#[derive(Debug, Clone, PartialEq)]
pub enum Closed {
    /// `smartmigd freeze` was run (its reason).
    Frozen(String),
    /// The last batch started too recently: seconds left.
    Interval(f64),
    /// Outside every maintenance window.
    OutsideWindows,
}

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Closed::Frozen(why) => write!(f, "frozen ({why}); `smartmigd thaw` lifts it"),
            Closed::Interval(left) => write!(f, "minimum interval between re-layouts: {left:.0} s left"),
            Closed::OutsideWindows => write!(f, "outside every maintenance window"),
        }
    }
}

/// The limits, and the memory they need between cycles.
#[derive(Debug, Clone)]
pub struct Guard {
    state_dir: PathBuf,
    min_interval_s: f64,
    persist_cycles: u32,
    max_nodes: usize,
    windows: Vec<Window>,
    nodes: Option<HostList>,
    partitions: Vec<String>,
    /// Per GPU (`node/index`): the target the last decisions chose and how many in a row.
    streak: HashMap<String, (usize, u32)>,
}

impl Guard {
    /// The limits of `[controller.central]` (already checked when the config was read).
    pub fn new(state_dir: &Path, c: &CentralConfig) -> Guard {
        Guard {
            state_dir: state_dir.to_path_buf(),
            min_interval_s: c.min_relayout_interval_s,
            persist_cycles: c.persist_cycles.max(1),
            max_nodes: c.max_nodes_per_batch.max(1) as usize,
            windows: c.windows(),
            nodes: c.node_list(),
            partitions: c.partitions.clone(),
            streak: HashMap::new(),
        }
    }

    /// Why a batch may not start at `now` (Unix seconds; `local` = weekday 0..6 from
    /// Monday and minute of the local day), given when the last one started.
    pub fn closed(&self, now: f64, local: (u32, u32), last_batch_at: f64) -> Option<Closed> {
        if let Some(why) = frozen(&self.state_dir) {
            return Some(Closed::Frozen(why));
        }
        let left = last_batch_at + self.min_interval_s - now;
        if last_batch_at > 0.0 && left > 0.0 {
            return Some(Closed::Interval(left));
        }
        if !self.windows.is_empty() && !self.windows.iter().any(|w| w.contains(local.0, local.1)) {
            return Some(Closed::OutsideWindows);
        }
        None
    }

    /// Whether the allow-lists let smartmig change `node`.
    pub fn allows(&self, node: &SlurmNode) -> bool {
        self.nodes.as_ref().is_none_or(|h| h.contains(&node.name))
            && (self.partitions.is_empty() || node.partitions.iter().any(|p| self.partitions.contains(p)))
    }

    /// Records this cycle's targets (`gpu key → target`; GPUs absent want no change) and
    /// returns, per GPU, how many consecutive cycles have chosen its target.
    pub fn persist(&mut self, targets: &BTreeMap<String, usize>) -> BTreeMap<String, u32> {
        self.streak.retain(|k, _| targets.contains_key(k));
        let mut out = BTreeMap::new();
        for (k, &t) in targets {
            let e = self.streak.entry(k.clone()).or_insert((t, 0));
            if e.0 == t {
                e.1 += 1;
            } else {
                *e = (t, 1);
            }
            out.insert(k.clone(), e.1);
        }
        out
    }

    /// Cycles a target must persist before it is acted on.
    pub fn persist_cycles(&self) -> u32 {
        self.persist_cycles
    }

    /// The most nodes one batch may change.
    pub fn max_nodes(&self) -> usize {
        self.max_nodes
    }
}

/// The freeze reason, if `smartmigd freeze` was run.
pub fn frozen(state_dir: &Path) -> Option<String> {
    std::fs::read_to_string(state_dir.join(FREEZE_FILE))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Weekday (0 = Monday) and minute of the local day of Unix time `t`.
pub fn local_time(t: f64) -> (u32, u32) {
    let secs = t as libc::time_t;
    // SAFETY: localtime_r fills `tm` from `secs` and touches nothing else.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if !ok {
        return (0, 0);
    }
    (
        ((tm.tm_wday + 6) % 7) as u32,
        (tm.tm_hour * 60 + tm.tm_min) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(text: &str) -> (tempfile::TempDir, Guard) {
        let dir = tempfile::tempdir().unwrap();
        let c: CentralConfig = toml::from_str(text).unwrap();
        let g = Guard::new(dir.path(), &c);
        (dir, g)
    }

    #[test]
    fn a_batch_waits_for_the_interval_the_window_and_a_thaw() {
        let (dir, g) =
            guard("min_relayout_interval_s = 600\nmaintenance_windows = [\"Mon-Fri 20:00-06:00\"]\n");
        let monday_night = (0, 21 * 60);
        assert_eq!(g.closed(1000.0, monday_night, 0.0), None, "no batch yet");
        assert_eq!(
            g.closed(1000.0, monday_night, 700.0),
            Some(Closed::Interval(300.0))
        );
        assert_eq!(g.closed(1300.0, monday_night, 700.0), None);
        assert_eq!(
            g.closed(1300.0, (0, 12 * 60), 700.0),
            Some(Closed::OutsideWindows)
        );
        std::fs::write(dir.path().join(FREEZE_FILE), "maintenance\n").unwrap();
        assert_eq!(
            g.closed(1300.0, monday_night, 0.0),
            Some(Closed::Frozen("maintenance".into()))
        );
    }

    #[test]
    fn a_target_counts_only_while_the_same_target_is_chosen() {
        let (_d, mut g) = guard("persist_cycles = 2\n");
        let t = |v: &[(&str, usize)]| v.iter().map(|(k, t)| (k.to_string(), *t)).collect();
        assert_eq!(g.persist(&t(&[("a/0", 3), ("b/0", 4)]))["a/0"], 1);
        let r = g.persist(&t(&[("a/0", 3), ("b/0", 5)]));
        assert_eq!((r["a/0"], r["b/0"]), (2, 1), "b changed its mind");
        assert!(g.persist(&t(&[])).is_empty());
        assert_eq!(g.persist(&t(&[("a/0", 3)]))["a/0"], 1, "a gap resets the count");
    }

    #[test]
    fn allow_lists_match_node_names_and_partitions() {
        let (_d, g) = guard("nodes = [\"gpu[01-02]\"]\npartitions = [\"mig\"]\n");
        let node = |name: &str, parts: &[&str]| SlurmNode {
            name: name.into(),
            partitions: parts.iter().map(|p| p.to_string()).collect(),
            ..SlurmNode::default()
        };
        assert!(g.allows(&node("gpu01", &["mig", "debug"])));
        assert!(!g.allows(&node("gpu03", &["mig"])));
        assert!(!g.allows(&node("gpu02", &["debug"])));
    }
}
