//! Reader for the Alibaba GPU cluster trace 2023 ("openb") pod list.
//!
//! Columns (by header name, any order, extra ones ignored): `num_gpu`, `gpu_milli`,
//! `creation_time`, `scheduled_time`, `deletion_time` (seconds from the trace start) are
//! required; `qos` is the class label when present (`none` when empty). `name`,
//! `cpu_milli`, `memory_mib`, `gpu_spec` and `pod_phase` are not used.
//!
//! Mapping, row by row, in this order:
//! - `num_gpu` = 0: skipped ([`SkipReason::NoGpu`]). `num_gpu` > 1: skipped
//!   ([`SkipReason::MultiGpu`]): a job runs on one slice (MIG has no peer-to-peer), and
//!   splitting a multi-GPU pod into independent jobs would misstate its runtime.
//! - empty `scheduled_time`: never placed (phase `Pending`), skipped
//!   ([`SkipReason::NeverStarted`]).
//! - d = `gpu_milli` / 1000, the share of one GPU the pod asked for (1..=1000 required).
//! - runtime = `deletion_time` − `scheduled_time`, in minutes. The pod held its share d
//!   for that long, so, in docs/model.md §2's compact model (a job that can use a fraction d
//!   of a GPU runs on g slices at min(g/7, d)/d of its full-GPU speed), it is also its
//!   time on a full 7g GPU, and its time on g slices is runtime × d / min(g/7, d).
//!   A zero runtime is skipped ([`SkipReason::NoRuntime`]); a negative one is bad.
//! - Censoring: a pod whose `deletion_time` equals the latest deletion time in the file
//!   was still running when the trace ended, so its duration is only a lower bound. Such
//!   pods are skipped ([`SkipReason::Censored`]) rather than kept with a too-short time.
//!   `pod_phase` is not a censoring mark in openb: 5,193 of 8,152 pods say `Running`,
//!   but only 34 of them end at the trace's last timestamp; the others have a deletion
//!   time well before it, so they ended.
//! - release = `creation_time` − the earliest `creation_time` of a kept pod, in minutes.
//! - deadline = release + [`DEADLINE_SLACK`] × the 7g time (openb has no deadlines).

use std::io::Read;

use super::job::{Job, JobSet};
use super::trace::{
    field, line_of, share_times, Columns, CsvTrace, ReadStats, SkipReason, TraceError, DEADLINE_SLACK,
};

const NUM_GPU: usize = 0;
const GPU_MILLI: usize = 1;
const CREATION: usize = 2;
const SCHEDULED: usize = 3;
const DELETION: usize = 4;
const QOS: usize = 5;
const WANTED: [&str; 6] = [
    "num_gpu",
    "gpu_milli",
    "creation_time",
    "scheduled_time",
    "deletion_time",
    "qos",
];

/// What one row says, before the trace-wide rules (release origin, censoring) apply.
enum Row {
    /// Left out by a rule; the deletion time still counts towards the trace's end.
    Skip(SkipReason, Option<i64>),
    /// A pod that ran.
    Pod(Pod),
}

/// A pod that ran, in trace seconds.
struct Pod {
    line: u64,
    creation: i64,
    deletion: i64,
    job: Job,
}

/// Reads an openb pod list; `path` names the source in errors.
pub fn read_alibaba(input: impl Read, path: &str, skip_bad: bool) -> Result<(JobSet, ReadStats), TraceError> {
    let mut trace = CsvTrace::open(input, path, skip_bad, b',', &WANTED, &WANTED[..5])?;
    let mut set = JobSet::default();
    let mut pods = Vec::new();
    let mut trace_end = i64::MIN;
    trace.for_each_row(|rec, cols, log| {
        let line = line_of(rec);
        match parse_row(rec, cols, line, &mut set) {
            Ok(Row::Skip(why, deletion)) => {
                trace_end = trace_end.max(deletion.unwrap_or(i64::MIN));
                log.skipped(why);
            }
            Ok(Row::Pod(pod)) => {
                trace_end = trace_end.max(pod.deletion);
                pods.push(pod);
            }
            Err(message) => log.bad(line, message)?,
        }
        Ok(())
    })?;
    let mut log = trace.log;
    // Censoring needs the trace's end, known only now.
    pods.retain(|p| {
        let censored = p.deletion == trace_end;
        if censored {
            log.skipped(SkipReason::Censored);
        } else {
            log.kept();
        }
        !censored
    });
    let origin = pods.iter().map(|p| p.creation).min().unwrap_or(0);
    set.jobs = pods
        .iter()
        .map(|p| {
            let release = (p.creation - origin) as f64 / 60.0;
            Job {
                release,
                deadline: release + (p.job.deadline - p.job.release),
                ..p.job
            }
        })
        .collect();
    for (p, j) in pods.iter().zip(&set.jobs) {
        // Shifting the release cannot break a job that passed the row check, but never
        // hand out a bad job.
        j.check().map_err(|why| log.error(p.line, why.to_string()))?;
    }
    set.normalise();
    // Number labels by first use in release order (censored pods registered theirs too).
    set.compact_classes();
    Ok((set, log.stats))
}

/// Integer seconds from a field.
fn seconds(rec: &csv::ByteRecord, cols: &Columns, i: usize) -> Result<Option<i64>, String> {
    let s = field(rec, cols.get(i).unwrap_or(usize::MAX), WANTED[i])?;
    if s.is_empty() {
        return Ok(None);
    }
    s.parse::<i64>()
        .map(Some)
        .map_err(|_| format!("`{}` = `{s}` is not whole seconds", WANTED[i]))
}

fn parse_row(rec: &csv::ByteRecord, cols: &Columns, line: u64, set: &mut JobSet) -> Result<Row, String> {
    let text = |i: usize| field(rec, cols.get(i).unwrap_or(usize::MAX), WANTED[i]);
    // A skipped row's end still marks the trace's end; a malformed one on such a row is
    // no reason to refuse the row, so it is just not counted.
    let deletion = seconds(rec, cols, DELETION);
    let n = text(NUM_GPU)?;
    let num_gpu: u32 = n
        .parse()
        .map_err(|_| format!("`num_gpu` = `{n}` is not a GPU count"))?;
    if num_gpu == 0 {
        return Ok(Row::Skip(SkipReason::NoGpu, deletion.ok().flatten()));
    }
    if num_gpu > 1 {
        return Ok(Row::Skip(SkipReason::MultiGpu, deletion.ok().flatten()));
    }
    let Some(scheduled) = seconds(rec, cols, SCHEDULED)? else {
        return Ok(Row::Skip(SkipReason::NeverStarted, deletion.ok().flatten()));
    };
    let deletion = deletion?.ok_or("`deletion_time` is empty for a scheduled pod")?;
    let creation = seconds(rec, cols, CREATION)?.ok_or("`creation_time` is empty")?;
    let m = text(GPU_MILLI)?;
    let milli: u32 = m
        .parse()
        .ok()
        .filter(|v| (1..=1000).contains(v))
        .ok_or_else(|| format!("`gpu_milli` = `{m}` is not a share of one GPU in 1..=1000"))?;
    if deletion < scheduled {
        return Err(format!(
            "deleted at {deletion} s, before it was scheduled at {scheduled} s"
        ));
    }
    if deletion == scheduled {
        return Ok(Row::Skip(SkipReason::NoRuntime, Some(deletion)));
    }
    let full = (deletion - scheduled) as f64 / 60.0;
    let times = share_times(full, f64::from(milli) / 1000.0);
    // Release is set once the earliest creation is known; check the rest now, with the
    // line at hand.
    let job = Job {
        id: 0,
        release: 0.0,
        deadline: DEADLINE_SLACK * times[4],
        times,
        class: 0,
    };
    job.check().map_err(|e| e.to_string())?;
    let qos = match cols.get(QOS) {
        Some(c) => field(rec, c, "qos")?,
        None => "",
    };
    let label = if qos.is_empty() { "none" } else { qos };
    Ok(Row::Pod(Pod {
        line,
        creation,
        deletion,
        job: Job {
            class: set.class_index(label),
            ..job
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::job::SLICE_SIZES;

    const OPENB: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/alibaba/openb_pod_list_default.csv"
    );

    /// The file's rows, split naively (openb has no quoted fields), without the header.
    fn rows(text: &str) -> Vec<Vec<&str>> {
        text.lines().skip(1).map(|l| l.split(',').collect()).collect()
    }

    #[test]
    fn the_whole_openb_pod_list_reads_with_independently_counted_skips() {
        let text = std::fs::read_to_string(OPENB).unwrap();
        let file = std::fs::File::open(OPENB).unwrap();
        let (set, stats) = read_alibaba(file, OPENB, false).unwrap();

        // Independent count, straight from the columns (4 num_gpu, 5 gpu_milli, 9
        // creation, 10 deletion, 11 scheduled; 1-based).
        let rows = rows(&text);
        let end: i64 = rows.iter().map(|r| r[9].parse::<i64>().unwrap()).max().unwrap();
        let (mut no_gpu, mut multi, mut pending, mut censored) = (0, 0, 0, 0);
        let mut kept = Vec::new();
        for r in &rows {
            let n: u32 = r[3].parse().unwrap();
            if n == 0 {
                no_gpu += 1;
            } else if n > 1 {
                multi += 1;
            } else if r[10].is_empty() {
                pending += 1;
            } else if r[9].parse::<i64>().unwrap() == end {
                censored += 1;
            } else {
                kept.push(r);
            }
        }
        assert_eq!(stats.rows as usize, rows.len());
        assert_eq!(stats.skipped_for(SkipReason::NoGpu), no_gpu);
        assert_eq!(stats.skipped_for(SkipReason::MultiGpu), multi);
        assert_eq!(stats.skipped_for(SkipReason::NeverStarted), pending);
        assert_eq!(stats.skipped_for(SkipReason::Censored), censored);
        assert_eq!(stats.kept as usize, kept.len());
        assert_eq!(stats.rows, stats.kept + stats.total_skipped());
        assert_eq!(set.jobs.len(), kept.len());
        assert!(censored > 0 && kept.len() > 5000, "{stats}");

        // Expected jobs in release order (stable: file order on ties).
        let first: i64 = kept.iter().map(|r| r[8].parse::<i64>().unwrap()).min().unwrap();
        let mut want: Vec<(f64, f64, f64, &str)> = kept
            .iter()
            .map(|r| {
                let sec = |i: usize| r[i].parse::<i64>().unwrap();
                let release = (sec(8) - first) as f64 / 60.0;
                let full = (sec(9) - sec(10)) as f64 / 60.0;
                (release, full, r[4].parse::<f64>().unwrap() / 1000.0, r[6])
            })
            .collect();
        want.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert_eq!(set.jobs[0].release, 0.0);
        for (j, (release, full, d, qos)) in set.jobs.iter().zip(&want) {
            j.check().unwrap();
            assert_eq!(j.release, *release);
            assert_eq!(j.times[4], *full);
            assert_eq!(set.classes[j.class as usize], *qos);
            assert!((j.deadline - j.release - DEADLINE_SLACK * full).abs() < 1e-9 * j.deadline.max(1.0));
            for (k, g) in SLICE_SIZES.iter().enumerate() {
                let g = f64::from(*g);
                // Slower than 7g in proportion only where the slice is below the share.
                let expect = if g / 7.0 < *d { full * d * 7.0 / g } else { *full };
                assert!((j.times[k] - expect).abs() <= 1e-9 * expect, "{j:?} d={d}");
            }
        }
    }

    #[test]
    fn fractional_pods_run_no_faster_on_7g_than_on_the_slice_of_their_share() {
        let (set, _) = read_alibaba(std::fs::File::open(OPENB).unwrap(), OPENB, false).unwrap();
        let mut below_4g = 0;
        for j in &set.jobs {
            // The first slice as fast as the 7g is the one that covers the pod's share.
            let k = j.times.iter().position(|t| *t == j.times[4]).unwrap();
            for (t, g) in j.times[..k].iter().zip(SLICE_SIZES) {
                // Below it the pod is slower, in proportion to the slice (linear).
                assert!(*t > j.times[4], "{j:?}");
                let scaled = t * f64::from(g);
                assert!((scaled - j.times[0]).abs() <= 1e-9 * j.times[0], "{j:?}");
            }
            if k < 4 {
                below_4g += 1;
            }
        }
        // Independently: kept pods whose share fits in a 4g (d <= 4/7, 7·milli <= 4000).
        let text = std::fs::read_to_string(OPENB).unwrap();
        let rows = rows(&text);
        let end: i64 = rows.iter().map(|r| r[9].parse::<i64>().unwrap()).max().unwrap();
        let expect = rows
            .iter()
            .filter(|r| r[3] == "1" && !r[10].is_empty() && r[9].parse::<i64>().unwrap() != end)
            .filter(|r| 7 * r[4].parse::<u32>().unwrap() <= 4000)
            .count();
        assert_eq!(below_4g, expect);
        assert!(expect > 0);
    }

    const HEAD: &str =
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

    #[test]
    fn a_bad_share_is_reported_with_its_line_or_skipped() {
        let text = format!(
            "{HEAD}p0,1,1,1,500,,LS,Running,0,100,10\n\
             p1,1,1,1,1500,,LS,Running,5,100,10\n\
             p2,1,1,1,1000,,BE,Running,5,50,60\n\
             p3,1,1,1,1000,,BE,Running,5,900,60\n"
        );
        let e = read_alibaba(text.as_bytes(), "pods.csv", false)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("pods.csv:3: `gpu_milli` = `1500`"), "{e}");
        let (set, stats) = read_alibaba(text.as_bytes(), "pods.csv", true).unwrap();
        assert_eq!(stats.skipped_for(SkipReason::Bad), 2);
        // p3 ends last: censored. p0 remains, released at 0, 90 s on a full GPU.
        assert_eq!(stats.skipped_for(SkipReason::Censored), 1);
        assert_eq!(set.jobs.len(), 1);
        assert_eq!(set.jobs[0].times[4], 1.5);
        // The censored pod's label is not kept.
        assert_eq!(set.classes, ["LS"]);
    }

    #[test]
    fn a_missing_required_column_is_named() {
        let e = read_alibaba("name,num_gpu,gpu_milli\n".as_bytes(), "p.csv", false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.csv:1:") && e.contains("creation_time"), "{e}");
    }
}
