//! The central role's status file (`<[controller] state_dir>/central-status.json`): what
//! `smartmig status` and `smartmigd status` show and the metrics endpoint exports.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Name of the status file inside `state_dir`.
pub const STATUS_FILE: &str = "central-status.json";

/// Decisions and errors kept in the status file.
pub const KEEP: usize = 50;

/// One GPU's decision in a cycle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionLine {
    /// Unix seconds.
    pub at: f64,
    /// The re-layout generation (0 in dry-run).
    pub generation: u64,
    /// `node/gpu-index`.
    pub gpu: String,
    /// Configuration (or layout) now.
    pub from: String,
    /// Configuration chosen.
    pub to: String,
    /// What was (or, in dry-run, would be) done: `apply`, `applied`, `skip: ...`,
    /// `failed: ...`, `would apply`, `would skip: ...`.
    pub action: String,
}

/// One GPU as last seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuLine {
    /// `node/gpu-index`.
    pub gpu: String,
    /// Model key.
    pub model: String,
    /// Layout.
    pub layout: String,
    /// Configuration name, if the layout is one.
    pub configuration: Option<String>,
    /// Busy instances.
    pub busy: usize,
}

/// The status file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Status {
    /// Unix seconds of the last write.
    pub updated_at: f64,
    /// `dry-run`, `drain` or `preempt`.
    pub mode: String,
    /// Cycles run since start.
    pub cycles: u64,
    /// Last re-layout generation.
    pub generation: u64,
    /// Where each model's last decision came from.
    pub sources: BTreeMap<String, String>,
    /// Every managed GPU.
    pub gpus: Vec<GpuLine>,
    /// Nodes in the middle of a re-layout (drained by smartmig), with the step.
    pub pending_transitions: BTreeMap<String, String>,
    /// The latest decisions, newest last.
    pub decisions: Vec<DecisionLine>,
    /// The latest errors, newest last: (Unix seconds, message).
    pub errors: Vec<(f64, String)>,
    /// What the central role has done.
    pub counters: Counters,
    /// Seconds spent by GPUs in each configuration (summed over GPUs).
    pub seconds_in_configuration: BTreeMap<String, f64>,
    /// Why re-layouts are frozen (`smartmigd freeze`), if they are.
    #[serde(default)]
    pub frozen: Option<String>,
    /// Pending jobs the plugin routed to a type no managed GPU has now, which this Slurm
    /// cannot re-route (before 23.02.6): they cannot start while no GPU has their type.
    #[serde(default)]
    pub stranded_jobs: Vec<u32>,
}

/// What the central role has counted since its state directory was made (an older status
/// file's map of the same names reads the same).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    /// GPU decisions made.
    pub decisions: u64,
    /// GPUs re-laid out.
    pub repartitions: u64,
    /// Errors met.
    pub failures: u64,
    /// Pending jobs re-routed after their type vanished.
    pub reroutes: u64,
}

impl Counters {
    /// (name, value) of every counter, in a fixed order.
    pub fn named(&self) -> [(&'static str, u64); 4] {
        [
            ("decisions", self.decisions),
            ("repartitions", self.repartitions),
            ("failures", self.failures),
            ("reroutes", self.reroutes),
        ]
    }
}

/// The status file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusReadError {
    /// Not readable (missing: the central role has not run here yet).
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not a status file of this release.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: serde_json::Error,
    },
}

impl Status {
    /// Adds an error (logged by the caller), keeping the last [`KEEP`].
    pub fn error(&mut self, at: f64, message: String) {
        self.errors.push((at, message));
        trim(&mut self.errors);
        self.counters.failures += 1;
    }

    /// Adds decisions, keeping the last [`KEEP`].
    pub fn decided(&mut self, lines: Vec<DecisionLine>) {
        self.counters.decisions += lines.len() as u64;
        self.decisions.extend(lines);
        trim(&mut self.decisions);
    }

    /// Writes the file durably (`crate::durable`).
    pub fn write(&self, state_dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(state_dir)?;
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        crate::durable::write(&state_dir.join(STATUS_FILE), &json).map_err(std::io::Error::other)
    }

    /// Reads the file.
    pub fn read(state_dir: &Path) -> Result<Status, StatusReadError> {
        let path = state_dir.join(STATUS_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| StatusReadError::Read {
            path: path.clone(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| StatusReadError::Parse { path, source })
    }

    /// A human-readable summary.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "mode {}, {} cycles, generation {}, updated at {:.0}",
            self.mode, self.cycles, self.generation, self.updated_at
        );
        if let Some(why) = &self.frozen {
            let _ = writeln!(s, "FROZEN: no new re-layouts ({why}); `smartmigd thaw` lifts it");
        }
        for (m, src) in &self.sources {
            let _ = writeln!(s, "policy {m}: {src}");
        }
        let _ = writeln!(s, "\nGPUs:");
        for g in &self.gpus {
            let _ = writeln!(
                s,
                "  {:<20} {:<12} {:<4} busy {}  {}",
                g.gpu,
                g.model,
                g.configuration.as_deref().unwrap_or("-"),
                g.busy,
                g.layout
            );
        }
        let _ = writeln!(s, "\npending transitions:");
        for (n, step) in &self.pending_transitions {
            let _ = writeln!(s, "  {n}: {step}");
        }
        let _ = writeln!(s, "\nlast decisions:");
        for d in &self.decisions {
            let _ = writeln!(
                s,
                "  gen {} {} {} -> {}: {}",
                d.generation, d.gpu, d.from, d.to, d.action
            );
        }
        if !self.stranded_jobs.is_empty() {
            let ids: Vec<String> = self.stranded_jobs.iter().map(u32::to_string).collect();
            let _ = writeln!(
                s,
                "\njobs waiting for a GPU type no GPU has, not re-routable on this Slurm \
                 (resubmit them): {}",
                ids.join(" ")
            );
        }
        let _ = writeln!(s, "\nerrors:");
        for (at, e) in &self.errors {
            let _ = writeln!(s, "  {at:.0} {e}");
        }
        let _ = writeln!(s, "\ncounters:");
        for (k, v) in self.counters.named() {
            let _ = writeln!(s, "  {k}: {v}");
        }
        s
    }
}

fn trim<T>(v: &mut Vec<T>) {
    if v.len() > KEEP {
        v.drain(..v.len() - KEEP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_of_an_older_status_file_read_by_name_and_missing_ones_are_zero() {
        let old = r#"{"decisions": 12, "repartitions": 3, "failures": 1}"#;
        let c: Counters = serde_json::from_str(old).unwrap();
        assert_eq!(
            c.named(),
            [
                ("decisions", 12),
                ("repartitions", 3),
                ("failures", 1),
                ("reroutes", 0)
            ]
        );
        let back: serde_json::Value = serde_json::to_value(c).unwrap();
        assert_eq!(back["repartitions"], 3);
    }

    #[test]
    fn stranded_jobs_are_listed_only_when_there_are_some() {
        let mut s = Status::default();
        assert!(!s.render().contains("jobs waiting"));
        s.stranded_jobs = vec![12, 15];
        assert!(
            s.render()
                .contains("not re-routable on this Slurm (resubmit them): 12 15"),
            "{}",
            s.render()
        );
    }
}
