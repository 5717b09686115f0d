//! Reader for Slurm accounting dumps: `sacct --parsable2` (or `--parsable`) output, e.g.
//! `sacct -a -X --parsable2 --format=JobID,Submit,Start,End,Timelimit,ReqTRES,AllocTRES,State`.
//!
//! Columns (header names, case-insensitive, any order, extra ones ignored): `JobID`,
//! `Submit`, `Start`, `End`, `State` are required, and at least one of `AllocTRES` and
//! `ReqTRES`; `Timelimit` is used when present, and `Comment` for a class label
//! (`smartmig:class=NAME`). Fields are split on `|` with no quoting (job names may hold
//! quotes). Times must be in sacct's default `YYYY-MM-DDTHH:MM:SS` form; sacct prints
//! local time, so dump with `TZ=UTC` to avoid a daylight-saving jump inside the trace.
//!
//! Rows are classified in this order:
//! - `JobID` with a `.` (`N.batch`, `N.extern`, `N.0`): a step, skipped
//!   ([`SkipReason::Step`]); the job's own row carries what is needed.
//! - no `Submit` time (`Unknown`, `None`, empty): a placeholder row, skipped
//!   ([`SkipReason::Placeholder`]).
//! - `State` `PENDING`, or no `Start` time: never started ([`SkipReason::NeverStarted`]);
//!   so is a `CANCELLED` job with zero elapsed time (cancelled as it was placed).
//! - `State` `RUNNING`, `SUSPENDED`, `REQUEUED`, `RESIZING`, `COMPLETING`, `CONFIGURING`,
//!   `STAGE_OUT`, `SIGNALING`, `STOPPED`, `REQUEUE_*`, `SPECIAL_EXIT`, or no `End` time:
//!   still running, duration unknown ([`SkipReason::Unfinished`]). Every ended state
//!   (`COMPLETED`, `FAILED`, `TIMEOUT`, `CANCELLED`, `OUT_OF_MEMORY`, `NODE_FAIL`,
//!   `PREEMPTED`, `BOOT_FAIL`, `DEADLINE`) is kept: the job held its slice that long.
//! - GPUs, from the TRES entries `gres/gpu:<type>=N` (typed) and `gres/gpu=N`
//!   (untyped). Typed entries win over untyped ones, and `AllocTRES` (what the job got)
//!   over `ReqTRES`. No GPU: skipped ([`SkipReason::NoGpu`]); more than one GPU or
//!   slice: skipped ([`SkipReason::MultiGpu`]), as a job runs on one slice.
//! - End = Start: ran under sacct's one-second resolution, skipped
//!   ([`SkipReason::NoRuntime`]).
//!
//! Mapping of a kept job:
//! - slice g0: the `Ng` prefix of the GPU type (`3g.20gb` → 3); any other type name
//!   (`a100`) or an untyped GPU is a whole GPU, 7g.
//! - runtime = End − Start, on g0 slices.
//! - per-slice times: sacct says nothing about how a job scales, and no class is known,
//!   so the job is assumed to use exactly the share d = g0/7 of a GPU it was given, in
//!   docs/model.md §2's compact model (on g slices it runs at min(g/7, d)/d of its full-GPU
//!   speed): runtime on g0 and larger slices, runtime × g0/g on smaller ones. Jobs that
//!   had a whole GPU come out linear. This is the conservative choice: it credits MIG
//!   with no energy saving a job's history does not show.
//! - release = Submit − the earliest Submit of a kept job, in minutes.
//! - deadline = release + min(Timelimit, [`DEADLINE_SLACK`] × the 7g time): the slack the
//!   generator uses on average, unless the user's own limit is tighter. `UNLIMITED`,
//!   `Partition_Limit` and an absent column leave only the slack.
//! - class: `smartmig:class=NAME` from `Comment` when present, else the slice (`3g`).

use std::io::Read;

use super::job::{Job, JobSet};
use super::trace::{
    field, line_of, share_times, Columns, CsvTrace, ReadStats, SkipReason, TraceError, DEADLINE_SLACK,
};

const JOBID: usize = 0;
const SUBMIT: usize = 1;
const START: usize = 2;
const END: usize = 3;
const STATE: usize = 4;
const ALLOC: usize = 5;
const REQ: usize = 6;
const TIMELIMIT: usize = 7;
const COMMENT: usize = 8;
const WANTED: [&str; 9] = [
    "JobID",
    "Submit",
    "Start",
    "End",
    "State",
    "AllocTRES",
    "ReqTRES",
    "Timelimit",
    "Comment",
];

/// States of a job that has not ended.
const UNFINISHED: [&str; 11] = [
    "RUNNING",
    "SUSPENDED",
    "REQUEUED",
    "RESIZING",
    "COMPLETING",
    "CONFIGURING",
    "STAGE_OUT",
    "SIGNALING",
    "STOPPED",
    "SPECIAL_EXIT",
    "REQUEUE_",
];

/// How a kept job actually ran, in minutes since the earliest kept `Submit`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Ran {
    /// `Start`, minutes.
    pub start: f64,
    /// `End`, minutes.
    pub end: f64,
    /// Compute slices of the slice it held (7 for a whole or untyped GPU).
    pub slices: u8,
}

/// Reads a `sacct --parsable2` dump; `path` names the source in errors.
pub fn read_sacct(input: impl Read, path: &str, skip_bad: bool) -> Result<(JobSet, ReadStats), TraceError> {
    read_sacct_runs(input, path, skip_bad).map(|(set, stats, _)| (set, stats))
}

/// Like [`read_sacct`], and also how each job ran: `runs[i]` belongs to `jobs[i]`.
/// The origin (minute 0) is the earliest kept `Submit`, as for the jobs' releases.
pub fn read_sacct_runs(
    input: impl Read,
    path: &str,
    skip_bad: bool,
) -> Result<(JobSet, ReadStats, Vec<Ran>), TraceError> {
    let mut trace = CsvTrace::open(input, path, skip_bad, b'|', &WANTED, &WANTED[..5])?;
    if trace.cols.get(ALLOC).is_none() && trace.cols.get(REQ).is_none() {
        return Err(trace
            .log
            .error(1, "header lacks both AllocTRES and ReqTRES".into()));
    }
    let mut set = JobSet::default();
    // Kept rows, until the earliest submit is known.
    let mut pending: Vec<Row> = Vec::new();
    trace.for_each_row(|rec, cols, log| {
        match parse_row(rec, cols, &mut set) {
            Ok(Ok(row)) => {
                pending.push(row);
                log.kept();
            }
            Ok(Err(why)) => log.skipped(why),
            Err(message) => log.bad(line_of(rec), message)?,
        }
        Ok(())
    })?;
    let log = trace.log;
    let origin = pending.iter().map(|r| r.submit).min().unwrap_or(0);
    // Sorted by submit (stable) here, so normalise's stable sort by release keeps this
    // order and runs[i] stays with jobs[i].
    pending.sort_by_key(|r| r.submit);
    let minutes = |t: i64| (t - origin) as f64 / 60.0;
    let runs = pending
        .iter()
        .map(|r| Ran {
            start: minutes(r.start),
            end: minutes(r.end),
            slices: r.slices,
        })
        .collect();
    set.jobs = pending
        .into_iter()
        .map(|r| {
            // The row check passed with release 0; shifting both ends keeps it valid.
            let release = minutes(r.submit);
            Job {
                release,
                deadline: release + r.job.deadline,
                ..r.job
            }
        })
        .collect();
    set.normalise();
    // Number labels by first use in release order, whatever order the file had.
    set.compact_classes();
    Ok((set, log.stats, runs))
}

/// A kept row: times in seconds, the job released at 0.
struct Row {
    submit: i64,
    start: i64,
    end: i64,
    slices: u8,
    job: Job,
}

/// One row: a job, a skip, or what is wrong.
fn parse_row(
    rec: &csv::ByteRecord,
    cols: &Columns,
    set: &mut JobSet,
) -> Result<Result<Row, SkipReason>, String> {
    let text = |i: usize| -> Result<&str, String> {
        match cols.get(i) {
            Some(c) => field(rec, c, WANTED[i]),
            None => Ok(""),
        }
    };
    if text(JOBID)?.contains('.') {
        return Ok(Err(SkipReason::Step));
    }
    let Some(submit) = timestamp(text(SUBMIT)?).map_err(|e| format!("`Submit` {e}"))? else {
        return Ok(Err(SkipReason::Placeholder));
    };
    let state = text(STATE)?
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_uppercase();
    if state == "PENDING" {
        return Ok(Err(SkipReason::NeverStarted));
    }
    if UNFINISHED.iter().any(|u| state.starts_with(u)) {
        return Ok(Err(SkipReason::Unfinished));
    }
    let Some(start) = timestamp(text(START)?).map_err(|e| format!("`Start` {e}"))? else {
        return Ok(Err(SkipReason::NeverStarted));
    };
    let Some(end) = timestamp(text(END)?).map_err(|e| format!("`End` {e}"))? else {
        return Ok(Err(SkipReason::Unfinished));
    };
    if end < start {
        return Err(format!("`End` is {} s before `Start`", start - end));
    }
    if end == start && state == "CANCELLED" {
        return Ok(Err(SkipReason::NeverStarted));
    }
    let alloc = gpus(text(ALLOC)?).map_err(|e| format!("`AllocTRES` {e}"))?;
    let req = gpus(text(REQ)?).map_err(|e| format!("`ReqTRES` {e}"))?;
    let chosen = [alloc.typed, req.typed, alloc.untyped, req.untyped]
        .into_iter()
        .find(|g| *g != Gpus::None)
        .unwrap_or(Gpus::None);
    let slices = match chosen {
        Gpus::None => return Ok(Err(SkipReason::NoGpu)),
        Gpus::Many => return Ok(Err(SkipReason::MultiGpu)),
        Gpus::One(g) => g,
    };
    if end == start {
        return Ok(Err(SkipReason::NoRuntime));
    }
    let runtime = (end - start) as f64 / 60.0;
    let times = share_times(runtime, f64::from(slices) / 7.0);
    let mut window = DEADLINE_SLACK * times[4];
    if let Some(limit) = timelimit(text(TIMELIMIT)?).map_err(|e| format!("`Timelimit` {e}"))? {
        window = window.min(limit);
    }
    let job = Job {
        id: 0,
        release: 0.0,
        deadline: window,
        times,
        class: 0,
    };
    job.check().map_err(|e| e.to_string())?;
    let comment = text(COMMENT)?;
    let label = match comment.split_once("smartmig:class=") {
        Some((_, rest)) => rest.split([',', ' ', ';']).next().unwrap_or(""),
        None => "",
    };
    let class = if label.is_empty() {
        set.class_index(&format!("{slices}g"))
    } else {
        set.class_index(label)
    };
    Ok(Ok(Row {
        submit,
        start,
        end,
        slices,
        job: Job { class, ..job },
    }))
}

/// GPUs a TRES string names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gpus {
    /// None.
    None,
    /// One GPU or slice of this many compute slices.
    One(u8),
    /// More than one.
    Many,
}

/// The typed and the untyped GPU count of one TRES string.
#[derive(Debug, PartialEq)]
struct Tres {
    typed: Gpus,
    untyped: Gpus,
}

/// Reads the GPU entries of a TRES string (`cpu=1,gres/gpu:3g.20gb=1,gres/gpu=1,...`).
fn gpus(tres: &str) -> Result<Tres, String> {
    let mut typed_count = 0u64;
    let mut typed_slices = None;
    let mut untyped = 0u64;
    for entry in smartmig_core::tres::entries(tres) {
        let e = smartmig_core::tres::parse(entry)
            .ok()
            .filter(|e| e.count.is_some() && e.raw.contains('='))
            .ok_or_else(|| format!("entry `{entry}` is not KEY=VALUE"))?;
        if !(e.is_gpu() && e.spelling == smartmig_core::tres::Spelling::Slash) {
            continue;
        }
        let n = e
            .count()
            .map_err(|_| format!("entry `{entry}` has no whole GPU count"))?;
        match e.gpu_type {
            None => untyped = n,
            Some(kind) if n > 0 => {
                typed_count += n;
                typed_slices = Some(slices_of(kind)?);
            }
            Some(_) => {}
        }
    }
    let classify = |n: u64, slices: u8| match n {
        0 => Gpus::None,
        1 => Gpus::One(slices),
        _ => Gpus::Many,
    };
    Ok(Tres {
        typed: classify(typed_count, typed_slices.unwrap_or(7)),
        untyped: classify(untyped, 7),
    })
}

/// Compute slices of a GPU type name: the `Ng` prefix of a MIG profile (`3g.20gb`),
/// else 7 (a whole GPU named by its model, `a100`).
fn slices_of(kind: &str) -> Result<u8, String> {
    let digits = kind.bytes().take_while(u8::is_ascii_digit).count();
    let rest = &kind[digits..];
    let is_profile = digits > 0 && rest.starts_with('g') && (rest.len() == 1 || rest[1..].starts_with('.'));
    if !is_profile {
        return Ok(7);
    }
    match kind[..digits].parse::<u8>() {
        Ok(n @ (1 | 2 | 3 | 4 | 7)) => Ok(n),
        _ => Err(format!(
            "GPU type `{kind}` is no MIG profile (1g, 2g, 3g, 4g or 7g)"
        )),
    }
}

/// Seconds since 1970-01-01 of a `YYYY-MM-DDTHH:MM:SS` time; `None` for sacct's
/// `Unknown`/`None`/empty.
fn timestamp(s: &str) -> Result<Option<i64>, String> {
    if s.is_empty() || s.eq_ignore_ascii_case("unknown") || s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let bad = || format!("`{s}` is not a time like 2026-11-30T04:29:49");
    let (date, time) = s.split_once('T').ok_or_else(bad)?;
    let num = |p: &str| p.parse::<i64>().map_err(|_| bad());
    let d: Vec<&str> = date.split('-').collect();
    let t: Vec<&str> = time.split(':').collect();
    if d.len() != 3 || t.len() != 3 {
        return Err(bad());
    }
    let (y, m, day) = (num(d[0])?, num(d[1])?, num(d[2])?);
    let (h, min, sec) = (num(t[0])?, num(t[1])?, num(t[2])?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || min > 59 || sec > 60 {
        return Err(bad());
    }
    Ok(Some(
        days_from_civil(y, m, day) * 86_400 + h * 3600 + min * 60 + sec,
    ))
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Minutes of a Slurm time limit (`1-02:03:04`, `02:03:04`, `30:00` = m:s, `30` = min,
/// `2-12` = d-h, `2-12:30` = d-h:m); `None` for `UNLIMITED`, `Partition_Limit`,
/// `INVALID`, `NONE` or empty.
fn timelimit(s: &str) -> Result<Option<f64>, String> {
    let unset = ["", "UNLIMITED", "PARTITION_LIMIT", "INVALID", "NONE"];
    if unset.iter().any(|u| s.eq_ignore_ascii_case(u)) {
        return Ok(None);
    }
    let bad = || format!("`{s}` is not a Slurm time limit");
    let num = |p: &str| p.parse::<u64>().map(|v| v as f64).map_err(|_| bad());
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (Some(num(d)?), r),
        None => (None, s),
    };
    let parts: Vec<f64> = rest.split(':').map(num).collect::<Result<_, _>>()?;
    let minutes = match (days, parts.as_slice()) {
        (None, [m]) => *m,
        (None, [m, s]) => m + s / 60.0,
        (None, [h, m, s]) | (Some(_), [h, m, s]) => h * 60.0 + m + s / 60.0,
        (Some(_), [h]) => h * 60.0,
        (Some(_), [h, m]) => h * 60.0 + m,
        _ => return Err(bad()),
    };
    Ok(Some(days.unwrap_or(0.0) * 1440.0 + minutes))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Written by hand in the shape `sacct --parsable2` prints in Slurm 22.05
    // (docs/admin-guide.md, "What-if on your own history"): a real dump from the Slurm test harness will replace
    // it once the harness runs with accounting.
    const DUMP: &str = "\
JobID|JobName|Partition|Submit|Start|End|Elapsed|Timelimit|ReqTRES|AllocTRES|State
101|bert-ft|gpu|2026-11-30T04:20:00|2026-11-30T04:20:01|2026-11-30T04:29:49|00:09:48|00:30:00|billing=1,cpu=1,gres/gpu:3g.20gb=1,gres/gpu=1,mem=4000M,node=1|billing=1,cpu=1,gres/gpu:3g.20gb=1,gres/gpu=1,mem=4000M,node=1|COMPLETED
101.batch|batch||2026-11-30T04:20:01|2026-11-30T04:20:01|2026-11-30T04:29:49|00:09:48|||cpu=1,gres/gpu:3g.20gb=1,gres/gpu=1,mem=4000M,node=1|COMPLETED
101.extern|extern||2026-11-30T04:20:01|2026-11-30T04:20:01|2026-11-30T04:29:49|00:09:48|||billing=1,cpu=1,gres/gpu:3g.20gb=1,gres/gpu=1,mem=4000M,node=1|COMPLETED
102|prep|cpu|2026-11-30T04:21:00|2026-11-30T04:21:00|2026-11-30T04:22:00|00:01:00|UNLIMITED|billing=1,cpu=1,mem=4000M,node=1|billing=1,cpu=1,mem=4000M,node=1|COMPLETED
103|train|gpu|2026-11-30T04:18:30|2026-11-30T04:19:00|2026-11-30T05:19:00|01:00:00|1-00:00:00|billing=1,cpu=1,gres/gpu=1,mem=4000M,node=1|billing=1,cpu=1,gres/gpu:7g.40gb=1,gres/gpu=1,mem=4000M,node=1|COMPLETED
104|late|gpu|2026-11-30T04:22:00|None|2026-11-30T04:25:00|00:00:00|01:00:00|billing=1,cpu=1,gres/gpu:1g.5gb=1,gres/gpu=1,mem=4000M,node=1||CANCELLED by 1000
105|serve|gpu|2026-11-30T04:23:00|2026-11-30T04:23:05|Unknown|00:06:44|UNLIMITED|billing=1,cpu=1,gres/gpu:1g.5gb=1,gres/gpu=1,mem=4000M,node=1|billing=1,cpu=1,gres/gpu:1g.5gb=1,gres/gpu=1,mem=4000M,node=1|RUNNING
106|pair|gpu|2026-11-30T04:24:00|2026-11-30T04:24:00|2026-11-30T04:34:00|00:10:00|01:00:00|billing=2,cpu=2,gres/gpu:1g.5gb=2,gres/gpu=2,mem=8000M,node=1|billing=2,cpu=2,gres/gpu:1g.5gb=2,gres/gpu=2,mem=8000M,node=1|COMPLETED
107|short|gpu|2026-11-30T04:25:00|2026-11-30T04:26:00|2026-11-30T04:36:30|00:10:30|10:00|billing=1,cpu=1,gres/gpu:2g.10gb=1,gres/gpu=1,mem=4000M,node=1|billing=1,cpu=1,gres/gpu:2g.10gb=1,gres/gpu=1,mem=4000M,node=1|TIMEOUT
108|crash|gpu|2026-11-30T04:26:00|2026-11-30T04:26:00|2026-11-30T04:27:12|00:01:12|Partition_Limit|billing=1,cpu=1,gres/gpu:1g.5gb=1,gres/gpu=1,mem=4000M,node=1|billing=1,cpu=1,gres/gpu:1g.5gb=1,gres/gpu=1,mem=4000M,node=1|FAILED
109|queued|gpu|2026-11-30T04:27:00|Unknown|Unknown|00:00:00|01:00:00|billing=1,cpu=1,gres/gpu:mig=1,gres/gpu=1,mem=4000M,node=1||PENDING
110|bert-ft|gpu|Unknown|Unknown|Unknown|00:00:00|00:30:00|||COMPLETED
";

    fn read(text: &str) -> (JobSet, ReadStats) {
        read_sacct(text.as_bytes(), "sacct.txt", false).unwrap()
    }

    #[test]
    fn a_sacct_dump_keeps_finished_single_gpu_jobs_and_counts_the_rest() {
        let (set, stats) = read(DUMP);
        assert_eq!(stats.rows, 12);
        assert_eq!(stats.kept, 4);
        assert_eq!(stats.skipped_for(SkipReason::Step), 2);
        assert_eq!(stats.skipped_for(SkipReason::NoGpu), 1);
        assert_eq!(stats.skipped_for(SkipReason::NeverStarted), 2);
        assert_eq!(stats.skipped_for(SkipReason::Unfinished), 1);
        assert_eq!(stats.skipped_for(SkipReason::MultiGpu), 1);
        assert_eq!(stats.skipped_for(SkipReason::Placeholder), 1);
        assert_eq!(stats.rows, stats.kept + stats.total_skipped());
        for j in &set.jobs {
            j.check().unwrap();
        }
        let label = |j: &Job| set.classes[j.class as usize].as_str();
        // Release order: 103 (04:18:30, the origin), 101, 107, 108.
        let [j103, j101, j107, j108] = [0, 1, 2, 3].map(|i| set.jobs[i]);
        assert_eq!((j103.release, label(&j103)), (0.0, "7g"));
        // 103 asked for any GPU and got a 7g: linear, 60 min on the 7g.
        assert_eq!(j103.times[4], 60.0);
        assert!((j103.times[0] - 420.0).abs() < 1e-9);
        assert!((j103.deadline - 75.0).abs() < 1e-9);
        // 101: 9:48 on a 3g, so as fast on 3g and up, 3× slower on 1g; submitted 1.5 min
        // after 103; the slack (12.25 min) is tighter than its 30-minute limit.
        assert_eq!(label(&j101), "3g");
        assert_eq!(j101.release, 1.5);
        assert_eq!(&j101.times[2..], &[9.8, 9.8, 9.8]);
        assert!((j101.times[0] - 29.4).abs() < 1e-9 && (j101.times[1] - 14.7).abs() < 1e-9);
        assert!((j101.deadline - (1.5 + 12.25)).abs() < 1e-9);
        // 107 timed out at its 10-minute limit, tighter than the slack.
        assert_eq!(label(&j107), "2g");
        assert!((j107.deadline - (6.5 + 10.0)).abs() < 1e-9, "{j107:?}");
        // 108 has a partition limit only: slack.
        assert!((j108.deadline - j108.release - 1.25 * 1.2).abs() < 1e-9);
        assert_eq!(j108.times, [1.2; 5]);
    }

    #[test]
    fn columns_may_come_in_any_order_and_parsable_adds_a_trailing_bar() {
        let text = "State|AllocTRES|End|Start|Submit|JobID|Comment|\n\
                    COMPLETED|gres/gpu:4g.40gb=1,gres/gpu=1|2026-11-30T10:10:00|2026-11-30T10:00:00|2026-11-30T09:59:00|7|smartmig:class=bert-train|\n";
        let (set, stats) = read(text);
        assert_eq!(stats.kept, 1);
        assert_eq!(set.classes, ["bert-train"]);
        let j = set.jobs[0];
        assert_eq!(j.times[3], 10.0);
        assert!((j.times[0] - 40.0).abs() < 1e-9);
        assert!((j.deadline - 12.5).abs() < 1e-9);
    }

    #[test]
    fn a_bad_time_is_reported_with_file_and_line_or_skipped_and_counted() {
        let text = DUMP.replacen(
            "2026-11-30T04:26:00|2026-11-30T04:26:00",
            "30/11/2026|2026-11-30T04:26:00",
            1,
        );
        let e = read_sacct(text.as_bytes(), "sacct.txt", false)
            .unwrap_err()
            .to_string();
        // Row 108 is the eleventh line.
        assert!(e.starts_with("sacct.txt:11: `Submit` `30/11/2026`"), "{e}");
        let (set, stats) = read_sacct(text.as_bytes(), "sacct.txt", true).unwrap();
        assert_eq!(stats.skipped_for(SkipReason::Bad), 1);
        assert_eq!(set.jobs.len(), 3);
    }

    #[test]
    fn a_bad_gpu_count_or_profile_is_an_error() {
        let text = DUMP.replacen(
            "gres/gpu:2g.10gb=1,gres/gpu=1,mem=4000M,node=1|TIMEOUT",
            "gres/gpu:2g.10gb=x|TIMEOUT",
            1,
        );
        let e = read_sacct(text.as_bytes(), "s", false).unwrap_err().to_string();
        assert!(
            e.starts_with("s:10: `AllocTRES` entry `gres/gpu:2g.10gb=x`"),
            "{e}"
        );
        assert_eq!(
            slices_of("5g.30gb").map_err(|e| e.contains("no MIG profile")),
            Err(true)
        );
    }

    #[test]
    fn a_header_without_tres_columns_is_refused() {
        let e = read_sacct("JobID|Submit|Start|End|State\n".as_bytes(), "s", false)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "s:1: header lacks both AllocTRES and ReqTRES");
    }

    #[test]
    fn slices_come_from_the_profile_prefix_and_other_types_are_whole_gpus() {
        assert_eq!(slices_of("1g.5gb"), Ok(1));
        assert_eq!(slices_of("1g.10gb+me"), Ok(1));
        assert_eq!(slices_of("3g.71gb"), Ok(3));
        assert_eq!(slices_of("7g"), Ok(7));
        assert_eq!(slices_of("a100"), Ok(7));
        assert_eq!(slices_of("h100g"), Ok(7));
    }

    #[test]
    fn typed_tres_entries_win_and_counts_above_one_are_multi_gpu() {
        let t = gpus("billing=1,gres/gpu:3g.20gb=1,gres/gpu=1").unwrap();
        assert_eq!(t.typed, Gpus::One(3));
        assert_eq!(t.untyped, Gpus::One(7));
        assert_eq!(gpus("gres/gpu=2").unwrap().untyped, Gpus::Many);
        assert_eq!(
            gpus("gres/gpu:1g.5gb=1,gres/gpu:2g.10gb=1").unwrap().typed,
            Gpus::Many
        );
        assert_eq!(
            gpus("cpu=4,mem=1G").unwrap(),
            Tres {
                typed: Gpus::None,
                untyped: Gpus::None
            }
        );
    }

    #[test]
    fn sacct_times_are_seconds_since_the_epoch() {
        assert_eq!(timestamp("1970-01-01T00:00:00"), Ok(Some(0)));
        assert_eq!(timestamp("2000-01-01T00:00:00"), Ok(Some(946_684_800)));
        let leap = |a, b| Ok::<_, String>(timestamp(a)?.unwrap() - timestamp(b)?.unwrap());
        assert_eq!(leap("2024-03-01T00:00:00", "2024-02-28T00:00:00"), Ok(2 * 86_400));
        assert_eq!(leap("2026-11-30T04:29:49", "2026-11-29T04:29:50"), Ok(86_399));
        assert_eq!(timestamp("Unknown"), Ok(None));
        assert!(timestamp("2026-13-01T00:00:00").is_err());
    }

    #[test]
    fn time_limits_follow_slurm_forms() {
        let m = |s| timelimit(s).unwrap();
        assert_eq!(m("1-02:03:04"), Some(1440.0 + 123.0 + 4.0 / 60.0));
        assert_eq!(m("02:03:04"), Some(123.0 + 4.0 / 60.0));
        assert_eq!(m("30:00"), Some(30.0));
        assert_eq!(m("45"), Some(45.0));
        assert_eq!(m("2-12"), Some(2.0 * 1440.0 + 720.0));
        assert_eq!(m("2-12:30"), Some(2.0 * 1440.0 + 750.0));
        assert_eq!(m("UNLIMITED"), None);
        assert_eq!(m("Partition_Limit"), None);
        assert!(timelimit("1:2:3:4").is_err());
        assert!(timelimit("soon").is_err());
    }
}
