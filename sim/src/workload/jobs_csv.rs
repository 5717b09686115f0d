//! smartmig's own job list: one job per row, what `simulate --dump-jobs` writes.
//!
//! Header `id,release,deadline,t1,t2,t3,t4,t7,class` (columns in any order when read,
//! extra columns ignored). Times are minutes: release and soft deadline from the start
//! of the run, `tN` the processing time on an N-slice instance; `class` is the job's
//! class label. Numbers are written in Rust's shortest round-trip form, so a file read
//! back gives the same bits. On reading, jobs are sorted by release (file order on ties)
//! and ids renumbered to positions; class labels (trimmed, non-empty) are numbered in
//! order of first use in that order.

use std::fmt::Write as _;
use std::io::{Read, Write};

use super::job::{Job, JobSet};
use super::trace::{field, line_of, Columns, CsvTrace, ReadStats, TraceError};

/// The header row, in the order the writer uses.
pub const HEADER: [&str; 9] = ["id", "release", "deadline", "t1", "t2", "t3", "t4", "t7", "class"];

/// Reads a job list; `path` names the source in errors.
pub fn read_jobs_csv(
    input: impl Read,
    path: &str,
    skip_bad: bool,
) -> Result<(JobSet, ReadStats), TraceError> {
    let mut trace = CsvTrace::open(input, path, skip_bad, b',', &HEADER, &HEADER)?;
    let mut set = JobSet::default();
    trace.for_each_row(|rec, cols, log| {
        match parse_row(rec, cols, &mut set) {
            Ok(job) => {
                set.jobs.push(job);
                log.kept();
            }
            Err(message) => log.bad(line_of(rec), message)?,
        }
        Ok(())
    })?;
    let log = trace.log;
    set.normalise();
    // Number labels by first use in release order, whatever order the file had.
    set.compact_classes();
    Ok((set, log.stats))
}

/// One row as a job (with its class label added to `set`), or what is wrong with it.
fn parse_row(rec: &csv::ByteRecord, cols: &Columns, set: &mut JobSet) -> Result<Job, String> {
    let text = |i: usize| field(rec, cols.get(i).unwrap_or(usize::MAX), HEADER[i]);
    let num = |i: usize| -> Result<f64, String> {
        let s = text(i)?;
        s.parse::<f64>()
            .map_err(|_| format!("`{}` = `{s}` is not a number", HEADER[i]))
    };
    let id_text = text(0)?;
    let id: u32 = id_text
        .parse()
        .map_err(|_| format!("`id` = `{id_text}` is not a job number"))?;
    let times = [num(3)?, num(4)?, num(5)?, num(6)?, num(7)?];
    let label = text(8)?;
    if label.is_empty() {
        return Err("`class` is empty".into());
    }
    let job = Job {
        id,
        release: num(1)?,
        deadline: num(2)?,
        times,
        class: 0,
    };
    job.check().map_err(|e| e.to_string())?;
    // The label is added only once the job is known good, so a skipped row adds none.
    Ok(Job {
        class: set.class_index(label),
        ..job
    })
}

/// Writes `set` as a job list. The same set always gives the same bytes. A class label
/// the reader would not give back (empty, or with surrounding spaces) is refused.
pub fn write_jobs_csv(set: &JobSet, out: impl Write) -> std::io::Result<()> {
    if let Some(bad) = set
        .classes
        .iter()
        .find(|c| c.is_empty() || c.trim() != c.as_str())
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("class label `{bad}` is empty or has surrounding spaces"),
        ));
    }
    let mut w = csv::Writer::from_writer(out);
    w.write_record(HEADER)?;
    let mut buf = String::new();
    for j in &set.jobs {
        let label = set.classes.get(usize::from(j.class)).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "job {} has class {} but the set has {} labels",
                    j.id,
                    j.class,
                    set.classes.len()
                ),
            )
        })?;
        buf.clear();
        let _ = write!(buf, "{}", j.id);
        w.write_field(&buf)?;
        for x in [j.release, j.deadline].iter().chain(&j.times) {
            buf.clear();
            // `{}` on f64 is the shortest text that parses back to the same value.
            let _ = write!(buf, "{x}");
            w.write_field(&buf)?;
        }
        w.write_field(label)?;
        w.write_record(None::<&[u8]>)?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;
    use crate::workload::generator::generate;

    fn generated() -> JobSet {
        let spec = Scenario::reference(&[]).unwrap().scenario.workload;
        generate(&spec, 42)
    }

    fn to_bytes(set: &JobSet) -> Vec<u8> {
        let mut out = Vec::new();
        write_jobs_csv(set, &mut out).unwrap();
        out
    }

    #[test]
    fn writing_then_reading_gives_the_same_job_set() {
        let mut set = generated();
        // A reader numbers labels in order of first use: give the set that order.
        set.compact_classes();
        let bytes = to_bytes(&set);
        let (back, stats) = read_jobs_csv(&bytes[..], "mem", false).unwrap();
        assert_eq!(stats.kept as usize, set.jobs.len());
        assert_eq!(stats.total_skipped(), 0);
        assert_eq!(back, set);
    }

    #[test]
    fn the_writer_gives_identical_bytes_for_the_same_input() {
        let set = generated();
        let a = to_bytes(&set);
        assert_eq!(a, to_bytes(&set.clone()));
        let text = String::from_utf8(a).unwrap();
        assert_eq!(
            text.lines().next(),
            Some("id,release,deadline,t1,t2,t3,t4,t7,class")
        );
        assert_eq!(text.lines().count(), set.jobs.len() + 1);
    }

    #[test]
    fn columns_may_come_in_any_order_and_rows_are_sorted_by_release() {
        let text = "class,t7,t4,t3,t2,t1,deadline,release,id,note\n\
                    b,1,1,1,1,1,9,5,0,x\n\
                    \"a,1\",2,2.5,3,4,8,7,1.5,1,y\n";
        let (set, _) = read_jobs_csv(text.as_bytes(), "mem", false).unwrap();
        assert_eq!(set.classes, ["a,1", "b"]);
        let j = set.jobs[0];
        assert_eq!(
            (j.id, j.release, j.deadline, j.times),
            (0, 1.5, 7.0, [8.0, 4.0, 3.0, 2.5, 2.0])
        );
        assert_eq!((set.jobs[1].id, set.jobs[1].release), (1, 5.0));
    }

    #[test]
    fn a_bad_row_is_reported_with_its_line_or_skipped_and_counted() {
        let text = "id,release,deadline,t1,t2,t3,t4,t7,class\n\
                    0,0,10,4,2,2,1,1,x\n\
                    1,5,4,4,2,2,1,1,x\n\
                    2,abc,10,4,2,2,1,1,x\n\
                    3,1,10,4,2,2,1,1\n\
                    4,1,10,1,2,2,1,1,y\n";
        let e = read_jobs_csv(text.as_bytes(), "jobs.csv", false)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("jobs.csv:3: deadline 4 is before release 5"), "{e}");
        let (set, stats) = read_jobs_csv(text.as_bytes(), "jobs.csv", true).unwrap();
        assert_eq!(set.jobs.len(), 1);
        assert_eq!((stats.rows, stats.kept, stats.total_skipped()), (5, 1, 4));
        // The skipped rows add no class label.
        assert_eq!(set.classes, ["x"]);
    }

    #[test]
    fn a_label_that_would_not_read_back_is_refused_by_the_writer() {
        let mut set = generated();
        set.classes[0] = " padded".into();
        let e = write_jobs_csv(&set, Vec::new()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    }

    proptest::proptest! {
        #[test]
        fn any_valid_job_set_survives_a_round_trip(
            raw in proptest::collection::vec(
                (0.0..1e7f64, 0.0..1e4f64, proptest::array::uniform5(1e-9..1e4f64), 0..3usize),
                1..40,
            ),
            labels in proptest::collection::vec(LABEL, 3),
        ) {
            let mut set = JobSet::default();
            for (release, slack, mut times, class) in raw {
                // Valid jobs: times non-increasing, deadline after release.
                times.sort_by(|a, b| b.total_cmp(a));
                let class = set.class_index(&labels[class]);
                set.jobs.push(Job { id: 0, release, deadline: release + slack, times, class });
            }
            set.normalise();
            set.compact_classes();
            let mut bytes = Vec::new();
            write_jobs_csv(&set, &mut bytes).unwrap();
            let (back, stats) = read_jobs_csv(&bytes[..], "mem", false).unwrap();
            proptest::prop_assert_eq!(stats.kept as usize, set.jobs.len());
            proptest::prop_assert_eq!(back, set);
        }
    }

    /// Release-mode timing of a job list at the generator's large scale:
    /// `cargo test --release --lib job_list_of_a_1024_gpu_week -- --ignored --nocapture`.
    #[test]
    #[ignore = "timing; run in release"]
    fn a_job_list_of_a_1024_gpu_week_writes_and_reads_back() {
        let mut spec = Scenario::reference(&[]).unwrap().scenario.workload;
        spec.days = 7.0;
        spec.multiplier = 2560.0;
        let mut set = generate(&spec, 1);
        set.compact_classes();
        let start = std::time::Instant::now();
        let bytes = to_bytes(&set);
        let wrote = start.elapsed();
        let (back, _) = read_jobs_csv(&bytes[..], "mem", false).unwrap();
        let read = start.elapsed() - wrote;
        println!(
            "{} jobs, {} MB: write {:.2} s, read {:.2} s",
            set.jobs.len(),
            bytes.len() / 1_000_000,
            wrote.as_secs_f64(),
            read.as_secs_f64()
        );
        assert_eq!(back, set);
    }

    /// Labels with the characters CSV must quote, never starting or ending with a space.
    const LABEL: &str = r#"[a-z,"é\-]{0,3}[a-z]"#;

    #[test]
    fn a_missing_column_is_named_at_line_1() {
        let e = read_jobs_csv("id,release,t1,t2,t3,t4,t7,class\n".as_bytes(), "j.csv", true)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("j.csv:1: header lacks column deadline"), "{e}");
    }
}
