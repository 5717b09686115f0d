//! The node agent's journal: an append-only file of JSON lines, each fsynced before the
//! step it announces runs, so a restarted agent knows what was under way: a plan half
//! applied, a gres.conf staged or installed, slurmd stopped (and until when it may stay
//! so), and the layouts to restore after a reboot. Compacted when it grows and nothing is
//! under way.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::NodeError;
use crate::channel::{GpuActual, GpuTarget};

/// How a re-layout plan ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "kebab-case")]
pub enum Ending {
    /// The devices have the target layouts.
    Done,
    /// The devices are back in the `from` layouts.
    RolledBack {
        /// Why.
        error: String,
    },
    /// Neither: the devices are in a layout of their own (the report lists it).
    Failed {
        /// Why.
        error: String,
    },
}

/// A re-layout that began and never ended (its `Begin`).
#[derive(Debug, Clone, PartialEq)]
pub struct OpenPlan {
    /// Generation of the desired state.
    pub generation: u64,
    /// The GPUs that change.
    pub gpus: Vec<GpuTarget>,
    /// The node's padding blocks (empty: none).
    pub padding: BTreeMap<String, u32>,
    /// The order of the node's devices in the staged gres.conf (empty: GPU and placement).
    pub order: Vec<String>,
}

/// The journal's last generation, between the end of its plan and slurmd's start on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlight {
    /// Its plan ended done; gres.conf does not have its lines yet.
    Applied(u64),
    /// gres.conf has (or may have) its lines; slurmd has not started on them.
    Installed(u64),
}

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
        /// The node's padding blocks for the gres.conf staged after it (empty: none).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        padding: BTreeMap<String, u32>,
        /// The order of the node's devices in that gres.conf (`Desired::order`; empty:
        /// GPU and placement order).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        order: Vec<String>,
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
    /// The re-layout's driver calls are over.
    End {
        /// Generation.
        generation: u64,
        /// How it ended.
        ending: Ending,
    },
    /// The gres.conf lines of generation `generation` are ready to be installed.
    Staged {
        /// Generation.
        generation: u64,
        /// The node's managed gres.conf lines.
        lines: String,
    },
    /// gres.conf's content before generation `generation` is kept beside it; the staged
    /// lines go in next. Written once per generation, so that an Install run again
    /// (after a crash or a lost report) never keeps its own lines as the content before.
    Installing {
        /// Generation.
        generation: u64,
    },
    /// The staged lines are in gres.conf; the file before is kept beside it.
    Installed {
        /// Generation.
        generation: u64,
    },
    /// Generation `generation` was undone (GPUs, gres.conf, slurmd).
    Reverted {
        /// Generation.
        generation: u64,
    },
    /// slurmd was stopped or started by the agent.
    Slurmd {
        /// Whether it runs now.
        running: bool,
        /// When stopped: the generation, and the Unix time by which the watchdog starts it
        /// again on its own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        watchdog: Option<(u64, f64)>,
    },
    /// The layouts the node should have (restored after a reboot).
    Layouts {
        /// Every MIG GPU.
        gpus: Vec<GpuActual>,
    },
}

/// The journal file.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    records: Vec<Record>,
    /// The length to cut the file back to before the next record: one was partly written
    /// and the cut after it failed.
    torn_at: Option<u64>,
}

/// The journal's file name inside `[controller] state_dir` (the `-v2` marks the typed
/// records of channel version 2; an older journal is left alone).
pub const JOURNAL_FILE: &str = "node-journal-v2.jsonl";

/// Records above which a journal with nothing under way is compacted.
pub const COMPACT_AFTER: usize = 1000;

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
            // A last line without its newline is a write the kill interrupted (whole JSON
            // or not): the append never returned, so its step never ran; it is cut below.
            if i + 1 == lines.len() && !text.ends_with('\n') {
                log::warn!("{}: ignoring a torn last line", path.display());
                continue;
            }
            match serde_json::from_str::<Record>(line) {
                Ok(r) => records.push(r),
                Err(e) => {
                    return Err(NodeError::Journal {
                        path: path.clone(),
                        reason: format!("line {}: {e}", i + 1),
                    })
                }
            }
        }
        let file = open_append(&path)?;
        if !text.is_empty() && !text.ends_with('\n') {
            // Cut the torn line so the next record starts on a line of its own.
            let keep = text.rfind('\n').map_or(0, |i| i + 1);
            file.set_len(keep as u64)
                .and_then(|()| file.sync_data())
                .map_err(|e| NodeError::io(&path, e))?;
        }
        Ok(Journal {
            path,
            file,
            records,
            torn_at: None,
        })
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
        // Part of a line may be written (a full disk): it is cut, so that the next record
        // does not continue it into a line that no longer reads, which would make the
        // journal refused at the next start (only a torn *last* line is forgiven).
        let len = match self.torn_at {
            Some(len) => {
                self.cut(len)?;
                self.torn_at = None;
                len
            }
            None => self
                .file
                .metadata()
                .map_err(|e| NodeError::io(&self.path, e))?
                .len(),
        };
        if let Err(e) = self
            .file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.sync_data())
        {
            if let Err(cut) = self.cut(len) {
                log::error!("{cut}; cut before the next record");
                self.torn_at = Some(len);
            }
            return Err(NodeError::io(&self.path, e));
        }
        self.records.push(rec);
        Ok(())
    }

    fn cut(&self, len: u64) -> Result<(), NodeError> {
        self.file
            .set_len(len)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| NodeError::io(&self.path, e))
    }

    /// Rewrites the journal with only what a restarted agent needs when it has grown past
    /// [`COMPACT_AFTER`] and no driver call or slurmd stop is under way: the last
    /// generation whole (from its `Begin`: its driver calls may be over while its
    /// gres.conf still waits to be installed, started or reverted), after the last
    /// layouts and slurmd state recorded before it.
    pub fn compact_if_large(&mut self) -> Result<bool, NodeError> {
        if self.records.len() <= COMPACT_AFTER || !self.is_closed() || self.slurmd_watchdog().is_some() {
            return Ok(false);
        }
        // From the last generation's first record: one whose GPUs needed no change has
        // no `Begin`, and its `Staged` and `Installed` must stay too.
        let last_begin = self
            .last_generation()
            .map_or(self.records.len(), |(first, _)| first);
        let before = &self.records[..last_begin];
        let keep: Vec<Record> = [
            before.iter().rev().find(|r| matches!(r, Record::Layouts { .. })),
            before.iter().rev().find(|r| matches!(r, Record::Slurmd { .. })),
        ]
        .into_iter()
        .flatten()
        .chain(&self.records[last_begin..])
        .cloned()
        .collect();
        let mut text = String::new();
        for r in &keep {
            text.push_str(&serde_json::to_string(r).map_err(|e| NodeError::Journal {
                path: self.path.clone(),
                reason: e.to_string(),
            })?);
            text.push('\n');
        }
        smartmig_core::durable::write(&self.path, text.as_bytes())?;
        self.file = open_append(&self.path)?;
        self.torn_at = None;
        log::info!(
            "{}: compacted {} records to {}",
            self.path.display(),
            self.records.len(),
            keep.len()
        );
        self.records = keep;
        Ok(true)
    }

    /// The re-layout that began and never ended: its generation, GPUs, padding blocks and
    /// device order.
    pub fn open_plan(&self) -> Option<OpenPlan> {
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
            Record::Begin {
                generation,
                gpus,
                padding,
                order,
            } => Some(OpenPlan {
                generation: *generation,
                gpus: gpus.clone(),
                padding: padding.clone(),
                order: order.clone(),
            }),
            _ => None,
        }
    }

    /// The journal's last generation (the last `Begin`, or `Staged` for one whose GPUs
    /// needed no change) and the position of its first record.
    fn last_generation(&self) -> Option<(usize, u64)> {
        let generation = self.records.iter().rev().find_map(|r| match r {
            Record::Begin { generation, .. } | Record::Staged { generation, .. } => Some(*generation),
            _ => None,
        })?;
        let first = self.records.iter().position(|r| {
            matches!(r, Record::Begin { generation: g, .. } | Record::Staged { generation: g, .. } if *g == generation)
        })?;
        Some((first, generation))
    }

    /// The last generation, if its gres.conf lines were staged (its plan ended done, or
    /// its GPUs needed no change) and it has neither started nor been reverted since.
    pub fn in_flight(&self) -> Option<InFlight> {
        let (first, generation) = self.last_generation()?;
        if self.reverted(generation) || self.staged(generation).is_none() {
            return None;
        }
        let since = &self.records[first..];
        let installed = since.iter().rposition(|r| {
            matches!(r, Record::Installing { generation: g } | Record::Installed { generation: g } if *g == generation)
        });
        let Some(installed) = installed else {
            return Some(InFlight::Applied(generation));
        };
        // Its Start (or the watchdog's) starts slurmd after the install.
        let started = since[installed..]
            .iter()
            .any(|r| matches!(r, Record::Slurmd { running: true, .. }));
        (!started).then_some(InFlight::Installed(generation))
    }

    /// Whether a revert of `generation` stopped slurmd to restart it on the gres.conf put
    /// back and its start is not journaled yet: slurmd was stopped for the generation,
    /// running again since, then stopped for it once more.
    pub fn restart_begun(&self, generation: u64) -> bool {
        // 1: stopped for the generation; 2: running again; 3: stopped for it once more.
        let mut phase = 0;
        for r in &self.records {
            match r {
                Record::Slurmd {
                    running: false,
                    watchdog: Some((g, _)),
                } if *g == generation => phase = if phase >= 2 { 3 } else { 1 },
                Record::Slurmd { running: true, .. } if phase >= 1 => phase = 2,
                _ => {}
            }
        }
        phase == 3
    }

    /// The GPUs generation `generation` set out to change, if it began here.
    pub fn plan_of(&self, generation: u64) -> Option<Vec<GpuTarget>> {
        self.records.iter().rev().find_map(|r| match r {
            Record::Begin {
                generation: g, gpus, ..
            } if *g == generation => Some(gpus.clone()),
            _ => None,
        })
    }

    /// How generation `generation`'s driver calls ended, if they did.
    pub fn ending(&self, generation: u64) -> Option<&Ending> {
        self.records.iter().rev().find_map(|r| match r {
            Record::End {
                generation: g,
                ending,
            } if *g == generation => Some(ending),
            _ => None,
        })
    }

    /// Whether the last record closes a re-layout (nothing is under way).
    pub fn is_closed(&self) -> bool {
        self.open_plan().is_none()
    }

    /// The lines staged for generation `generation`.
    pub fn staged(&self, generation: u64) -> Option<&str> {
        self.records.iter().rev().find_map(|r| match r {
            Record::Staged { generation: g, lines } if *g == generation => Some(lines.as_str()),
            _ => None,
        })
    }

    /// Whether generation `generation` was reverted here (its way back is over).
    pub fn reverted(&self, generation: u64) -> bool {
        self.records
            .iter()
            .any(|r| matches!(r, Record::Reverted { generation: g } if *g == generation))
    }

    /// Whether generation `generation` kept gres.conf's content before it (and so may
    /// have installed its lines) and has not been reverted.
    pub fn installed(&self, generation: u64) -> bool {
        let mut installed = false;
        for r in &self.records {
            match r {
                Record::Installing { generation: g } | Record::Installed { generation: g }
                    if *g == generation =>
                {
                    installed = true
                }
                Record::Reverted { generation: g } if *g == generation => installed = false,
                _ => {}
            }
        }
        installed
    }

    /// Whether slurmd runs, as far as the agent's own stops and starts tell.
    pub fn slurmd_running(&self) -> bool {
        self.last_slurmd().is_none_or(|(running, _)| running)
    }

    /// Whether the agent stopped slurmd for generation `generation` (its Install did).
    pub fn stopped_for(&self, generation: u64) -> bool {
        self.records.iter().any(
            |r| matches!(r, Record::Slurmd { running: false, watchdog: Some((g, _)) } if *g == generation),
        )
    }

    /// When the agent stopped slurmd: the generation and the watchdog's deadline.
    pub fn slurmd_watchdog(&self) -> Option<(u64, f64)> {
        match self.last_slurmd() {
            Some((false, w)) => w,
            _ => None,
        }
    }

    fn last_slurmd(&self) -> Option<(bool, Option<(u64, f64)>)> {
        self.records.iter().rev().find_map(|r| match r {
            Record::Slurmd { running, watchdog } => Some((*running, *watchdog)),
            _ => None,
        })
    }

    /// The layouts to restore after a reboot.
    pub fn layouts(&self) -> Option<&[GpuActual]> {
        self.records.iter().rev().find_map(|r| match r {
            Record::Layouts { gpus } => Some(gpus.as_slice()),
            _ => None,
        })
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

fn open_append(path: &Path) -> Result<File, NodeError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| NodeError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory on a tmpfs of `kib` KiB, unmounted when dropped (None where mounting is
    /// not allowed: not root).
    struct SmallFs(tempfile::TempDir);

    impl SmallFs {
        fn mount(kib: u32) -> Option<SmallFs> {
            let dir = tempfile::tempdir().ok()?;
            let ok = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
                .arg(dir.path())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            ok.then_some(SmallFs(dir))
        }
    }

    impl Drop for SmallFs {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0.path()).status();
        }
    }

    #[test]
    fn a_record_the_disk_cannot_hold_leaves_no_partial_line_and_the_journal_opens() {
        let Some(fs) = SmallFs::mount(8) else {
            eprintln!("skipped: cannot mount a tmpfs (not root)");
            return;
        };
        let mut j = Journal::open(fs.0.path()).unwrap();
        let step = |n| Record::Step {
            n,
            gpu: 0,
            step: format!("destroy-ci 7g.40gb@0 {}", "x".repeat(97)),
        };
        let mut written = 0;
        let error = loop {
            match j.append(step(written)) {
                Ok(()) => written += 1,
                Err(e) => break e,
            }
            assert!(written < 10_000, "the disk never filled");
        };
        assert!(error.to_string().contains("No space left"), "{error}");
        let text = std::fs::read_to_string(j.path()).unwrap();
        assert!(text.ends_with('\n'), "a partial line was left");
        assert_eq!(text.lines().count(), written as usize);
        drop(j);
        let j = Journal::open(fs.0.path()).expect("the journal opens");
        assert_eq!(j.records().len(), written as usize);
    }

    #[test]
    fn an_unended_begin_is_an_open_plan_after_reopening_and_a_torn_line_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        j.append(Record::Begin {
            generation: 4,
            gpus: vec![],
            padding: Default::default(),
            order: Vec::new(),
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
        let j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.open_plan().map(|p| p.generation), Some(4));
        assert_eq!(j.next_step(), 2);
        // A whole record whose newline never made it is torn too, in memory as on disk.
        drop(j);
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(JOURNAL_FILE))
            .unwrap();
        f.write_all(br#"{"rec":"done","n":1}"#).unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        assert_eq!(j.records().len(), 2);
        assert_eq!(Journal::open(dir.path()).unwrap().records().len(), 2);
        j.append(Record::End {
            generation: 4,
            ending: Ending::Done,
        })
        .unwrap();
        assert!(Journal::open(dir.path()).unwrap().is_closed());
    }

    #[test]
    fn a_large_closed_journal_is_compacted_to_what_a_restart_needs() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        let layouts = vec![GpuActual {
            index: 0,
            model: "a100-40gb".into(),
            layout: "7g.40gb@0".into(),
        }];
        for g in 0..(COMPACT_AFTER as u64 / 3 + 1) {
            j.append(Record::Begin {
                generation: g,
                gpus: vec![],
                padding: Default::default(),
                order: Vec::new(),
            })
            .unwrap();
            j.append(Record::Slurmd {
                running: false,
                watchdog: Some((g, 1.0)),
            })
            .unwrap();
            j.append(Record::End {
                generation: g,
                ending: Ending::Done,
            })
            .unwrap();
        }
        assert!(
            !j.compact_if_large().unwrap(),
            "slurmd is stopped: the watchdog's record must stay"
        );
        j.append(Record::Slurmd {
            running: true,
            watchdog: None,
        })
        .unwrap();
        j.append(Record::Layouts {
            gpus: layouts.clone(),
        })
        .unwrap();
        assert!(j.compact_if_large().unwrap());
        j.append(Record::Installed { generation: 9 }).unwrap();
        let back = Journal::open(dir.path()).unwrap();
        // slurmd's state before the last generation, that generation whole (Begin, its
        // two slurmd records, End, the layouts) and the record appended since.
        assert_eq!(back.records().len(), 7, "{:?}", back.records());
        assert_eq!(back.layouts(), Some(&layouts[..]));
        assert!(back.slurmd_running() && back.installed(9));
    }

    #[test]
    fn compaction_between_a_generations_apply_and_its_install_keeps_what_install_and_revert_need() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        let layouts = vec![GpuActual {
            index: 0,
            model: "a100-40gb".into(),
            layout: "7g.40gb@0".into(),
        }];
        j.append(Record::Layouts {
            gpus: layouts.clone(),
        })
        .unwrap();
        for n in 0..COMPACT_AFTER as u32 {
            j.append(Record::Done { n }).unwrap();
        }
        // Generation 7's driver calls are over (End), its gres.conf is staged: the
        // central role has yet to ask for the install.
        let target = GpuTarget {
            index: 0,
            model: "a100-40gb".into(),
            from: "7g.40gb@0".into(),
            to: "3g.20gb@0 3g.20gb@4".into(),
        };
        j.append(Record::Begin {
            generation: 7,
            gpus: vec![target.clone()],
            padding: Default::default(),
            order: Vec::new(),
        })
        .unwrap();
        j.append(Record::End {
            generation: 7,
            ending: Ending::Done,
        })
        .unwrap();
        j.append(Record::Staged {
            generation: 7,
            lines: "NodeName=n0 Name=gpu Type=3g.20gb File=/dev/x\n".into(),
        })
        .unwrap();
        assert!(j.is_closed());
        assert!(j.compact_if_large().unwrap());
        let back = Journal::open(dir.path()).unwrap();
        assert_eq!(back.records().len(), 4, "{:?}", back.records());
        assert!(back.staged(7).is_some(), "Install finds its lines");
        assert_eq!(back.plan_of(7), Some(vec![target]), "Revert finds its GPUs");
        assert_eq!(back.layouts(), Some(&layouts[..]));
    }

    #[test]
    fn a_generation_whose_gpus_needed_no_change_is_in_flight_and_compaction_keeps_its_install() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path()).unwrap();
        for n in 0..COMPACT_AFTER as u32 {
            j.append(Record::Done { n }).unwrap();
        }
        // Generation 8 changed only gres.conf's order on this node: no Begin.
        j.append(Record::Staged {
            generation: 8,
            lines: "NodeName=n0 Name=gpu Type=3g.20gb File=/dev/x\n".into(),
        })
        .unwrap();
        assert_eq!(j.in_flight(), Some(InFlight::Applied(8)));
        j.append(Record::Installing { generation: 8 }).unwrap();
        j.append(Record::Installed { generation: 8 }).unwrap();
        assert_eq!(j.in_flight(), Some(InFlight::Installed(8)));
        assert!(j.compact_if_large().unwrap());
        let back = Journal::open(dir.path()).unwrap();
        assert!(back.installed(8), "Revert still puts gres.conf back");
        assert_eq!(back.in_flight(), Some(InFlight::Installed(8)));
        j.append(Record::Slurmd {
            running: true,
            watchdog: None,
        })
        .unwrap();
        assert_eq!(j.in_flight(), None, "started");
    }
}
