//! The node agent's journal: an append-only file of JSON lines, each fsynced before the
//! step it announces runs, so a restarted agent knows what was under way.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::NodeError;
use crate::channel::GpuTarget;

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rec", rename_all = "kebab-case")]
pub enum Record {
    /// A re-layout starts: the GPUs and their `from` and `to` layouts.
    Begin {
        /// Generation of the desired state.
        generation: u64,
        /// The GPUs that change.
        gpus: Vec<GpuTarget>,
    },
    /// A driver call is about to run.
    Step {
        /// Sequence number within the re-layout.
        n: u32,
        /// GPU index.
        gpu: u32,
        /// The call, e.g. `create-gi 3g.20gb@4`.
        step: String,
    },
    /// The step with this number returned successfully.
    Done {
        /// Sequence number.
        n: u32,
    },
    /// The re-layout is over; `result` says how (`done`, `rolled-back: ...`, `failed: ...`).
    End {
        /// Generation.
        generation: u64,
        /// How it ended.
        result: String,
    },
    /// slurmd was stopped or started by the agent.
    Slurmd {
        /// Whether it runs now.
        running: bool,
    },
}

/// The journal file.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    records: Vec<Record>,
}

/// The journal's file name inside `[controller] state_dir`.
pub const JOURNAL_FILE: &str = "node-journal.jsonl";

impl Journal {
    /// Opens (or creates) the journal in `state_dir`, reading what it holds.
    pub fn open(state_dir: &Path) -> Result<Journal, NodeError> {
        std::fs::create_dir_all(state_dir).map_err(|e| NodeError::io(state_dir, e))?;
        let path = state_dir.join(JOURNAL_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(NodeError::io(&path, e)),
        };
        let mut records = Vec::new();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str::<Record>(line) {
                Ok(r) => records.push(r),
                // A torn last line is a write the kill interrupted: its step never ran.
                Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {
                    log::warn!("{}: ignoring a torn last line", path.display())
                }
                Err(e) => {
                    return Err(NodeError::Journal {
                        path: path.clone(),
                        reason: format!("line {}: {e}", i + 1),
                    })
                }
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| NodeError::io(&path, e))?;
        if !text.ends_with('\n') {
            // Cut the torn line so the next record starts on a line of its own.
            let keep = text.rfind('\n').map_or(0, |i| i + 1);
            file.set_len(keep as u64)
                .and_then(|()| file.sync_data())
                .map_err(|e| NodeError::io(&path, e))?;
        }
        Ok(Journal { path, file, records })
    }

    /// The journal file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every record read or written so far.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Appends a record and makes it durable before returning.
    pub fn append(&mut self, rec: Record) -> Result<(), NodeError> {
        let mut line = serde_json::to_string(&rec).map_err(|e| NodeError::Journal {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.sync_data())
            .map_err(|e| NodeError::io(&self.path, e))?;
        self.records.push(rec);
        Ok(())
    }

    /// The re-layout that began and never ended: its generation and GPUs.
    pub fn open_plan(&self) -> Option<(u64, Vec<GpuTarget>)> {
        let begin = self
            .records
            .iter()
            .rposition(|r| matches!(r, Record::Begin { .. }))?;
        if self.records[begin..]
            .iter()
            .any(|r| matches!(r, Record::End { .. }))
        {
            return None;
        }
        match &self.records[begin] {
            Record::Begin { generation, gpus } => Some((*generation, gpus.clone())),
            _ => None,
        }
    }

    /// Whether the last record closes a re-layout (nothing is under way).
    pub fn is_closed(&self) -> bool {
        self.open_plan().is_none()
    }

    /// Whether slurmd runs, as far as the agent's own stops and starts tell.
    pub fn slurmd_running(&self) -> bool {
        self.records
            .iter()
            .rev()
            .find_map(|r| match r {
                Record::Slurmd { running } => Some(*running),
                _ => None,
            })
            .unwrap_or(true)
    }

    /// The next step number.
    pub fn next_step(&self) -> u32 {
        self.records
            .iter()
            .rev()
            .find_map(|r| match r {
                Record::Step { n, .. } => Some(n + 1),
                _ => None,
            })
            .unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unended_begin_is_an_open_plan_after_reopening_and_a_torn_line_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        j.append(Record::Begin {
            generation: 4,
            gpus: vec![],
        })
        .unwrap();
        j.append(Record::Step {
            n: 1,
            gpu: 0,
            step: "destroy-ci 7g.40gb@0".into(),
        })
        .unwrap();
        drop(j);
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(JOURNAL_FILE))
            .unwrap();
        f.write_all(b"{\"rec\":\"do").unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.open_plan().map(|p| p.0), Some(4));
        assert_eq!(j.next_step(), 2);
        j.append(Record::End {
            generation: 4,
            result: "done".into(),
        })
        .unwrap();
        assert!(Journal::open(dir.path()).unwrap().is_closed());
    }
}
