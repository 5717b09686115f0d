//! Jobs: the type, the reference generator and trace readers.
//!
//! [`from_scenario`] is what a run calls: it generates a scenario's jobs or reads its
//! trace. [`load_trace`] reads one trace file of a given [`TraceFormat`]. Each reader's
//! module documents its column mapping and assumptions (also in `docs/traces.md`).

pub mod alibaba;
pub mod generator;
pub use smartmig_policy::job;
pub mod jobs_csv;
pub mod sacct;
pub mod trace;

use std::path::Path;

pub use generator::generate;
pub use job::{size_index, Job, JobSet, SLICE_SIZES};
pub use jobs_csv::write_jobs_csv;
pub use trace::{ReadStats, SkipReason, TraceError, DEADLINE_SLACK};

use crate::scenario::{ResolvedScenario, TraceFormat, WorkloadSource};

/// Reads a trace file; with `skip_bad`, malformed rows are counted instead of failing.
/// A trace with no usable job is an error.
pub fn load_trace(
    path: &Path,
    format: TraceFormat,
    skip_bad: bool,
) -> Result<(JobSet, ReadStats), TraceError> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| TraceError::Io {
        path: name.clone(),
        source,
    })?;
    let input = std::io::BufReader::new(file);
    let (set, stats) = match format {
        TraceFormat::Sacct => sacct::read_sacct(input, &name, skip_bad)?,
        TraceFormat::Alibaba => alibaba::read_alibaba(input, &name, skip_bad)?,
        TraceFormat::Jobs => jobs_csv::read_jobs_csv(input, &name, skip_bad)?,
    };
    if set.jobs.is_empty() {
        return Err(TraceError::Empty { path: name, stats });
    }
    log::info!("{name}: {stats}");
    Ok((set, stats))
}

/// The jobs of a scenario: generated for `seed`, or read from its trace (a path relative
/// to the scenario file's directory).
pub fn from_scenario(resolved: &ResolvedScenario, seed: u64, skip_bad: bool) -> Result<JobSet, TraceError> {
    let w = &resolved.scenario.workload;
    match (w.source, &w.trace, w.format) {
        (WorkloadSource::Generator, _, _) => Ok(generate(w, seed)),
        (WorkloadSource::Trace, Some(trace), Some(format)) => {
            let path = match &resolved.base_dir {
                Some(dir) => dir.join(trace),
                None => Path::new(trace).to_path_buf(),
            };
            load_trace(&path, format, skip_bad).map(|(set, _)| set)
        }
        // Resolution refuses a trace workload without both; say so rather than guess.
        (WorkloadSource::Trace, _, _) => Err(TraceError::NotATrace),
    }
}

/// Minutes in a day.
const DAY_MIN: f64 = 1440.0;

/// Cuts a job set into days by release (day d holds the releases in [d·1440, (d+1)·1440)
/// minutes), each shifted by whole days to start in its own day 0, so times of day are
/// kept; a job keeps its deadline and times and may run past its day's end. Days without
/// a job are dropped.
pub fn split_days(set: &JobSet) -> Vec<JobSet> {
    let mut days: Vec<JobSet> = Vec::new();
    let mut current: Option<u64> = None;
    for j in &set.jobs {
        let d = (j.release / DAY_MIN).floor().max(0.0) as u64;
        if current != Some(d) {
            current = Some(d);
            days.push(JobSet {
                jobs: Vec::new(),
                classes: set.classes.clone(),
            });
        }
        let shift = d as f64 * DAY_MIN;
        if let Some(day) = days.last_mut() {
            day.jobs.push(Job {
                id: day.jobs.len() as u32,
                release: j.release - shift,
                deadline: j.deadline - shift,
                ..*j
            });
        }
    }
    days
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data");

    #[test]
    fn a_generator_scenario_generates_for_the_seed() {
        let r = Scenario::reference(&[]).unwrap();
        let set = from_scenario(&r, 4, false).unwrap();
        assert_eq!(set, generate(&r.scenario.workload, 4));
    }

    #[test]
    fn a_trace_scenario_reads_its_trace_relative_to_the_scenario_file() {
        let sets = [
            "workload.source=trace".to_string(),
            "workload.trace=alibaba/openb_pod_list_default.csv".into(),
            "workload.format=alibaba".into(),
        ];
        let mut r = Scenario::reference(&sets).unwrap();
        r.base_dir = Some(DATA.into());
        let set = from_scenario(&r, 0, false).unwrap();
        let (direct, _) = load_trace(
            &Path::new(DATA).join("alibaba/openb_pod_list_default.csv"),
            TraceFormat::Alibaba,
            false,
        )
        .unwrap();
        assert!(!set.jobs.is_empty());
        assert_eq!(set, direct);
        // Without the base directory the relative path does not resolve from here.
        r.base_dir = None;
        let e = from_scenario(&r, 0, false).unwrap_err().to_string();
        assert!(
            e.starts_with("cannot read trace alibaba/openb_pod_list_default.csv"),
            "{e}"
        );
    }

    #[test]
    fn a_three_day_trace_splits_into_three_days_keeping_the_time_of_day() {
        let mut spec = Scenario::reference(&[]).unwrap().scenario.workload;
        spec.days = 3.0;
        let set = generate(&spec, 2);
        let days = split_days(&set);
        assert_eq!(days.len(), 3);
        assert_eq!(days.iter().map(|d| d.jobs.len()).sum::<usize>(), set.jobs.len());
        let second = &days[1];
        let first_of_second = set.jobs.iter().find(|j| j.release >= 1440.0).unwrap();
        assert!((second.jobs[0].release - (first_of_second.release - 1440.0)).abs() < 1e-9);
        assert!((second.jobs[0].deadline - (first_of_second.deadline - 1440.0)).abs() < 1e-9);
        for d in &days {
            assert!(d.jobs.iter().all(|j| (0.0..1440.0).contains(&j.release)));
            assert!(d.jobs.iter().enumerate().all(|(i, j)| j.id as usize == i));
        }
    }

    #[test]
    fn a_missing_trace_file_names_the_path() {
        let e = load_trace(Path::new("/nonexistent/x.csv"), TraceFormat::Jobs, true)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cannot read trace /nonexistent/x.csv:"), "{e}");
    }

    #[test]
    fn a_trace_with_no_usable_job_is_an_error_with_its_counts() {
        let dir = std::env::temp_dir().join(format!("smartmig-wl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cpu-only.sacct");
        std::fs::write(
            &path,
            "JobID|Submit|Start|End|State|AllocTRES\n\
             1|2026-11-30T00:00:00|2026-11-30T00:00:00|2026-11-30T00:01:00|COMPLETED|cpu=1\n",
        )
        .unwrap();
        let e = load_trace(&path, TraceFormat::Sacct, false)
            .unwrap_err()
            .to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            e.ends_with("has no usable job (kept 0 of 1 rows; skipped 1 without GPU)"),
            "{e}"
        );
    }

    #[test]
    fn a_written_job_list_loads_back_through_load_trace() {
        let mut set = generate(&Scenario::reference(&[]).unwrap().scenario.workload, 8);
        set.compact_classes();
        let path = std::env::temp_dir().join(format!("smartmig-jobs-{}.csv", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        write_jobs_csv(&set, std::io::BufWriter::new(file)).unwrap();
        let loaded = load_trace(&path, TraceFormat::Jobs, false);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(loaded.unwrap().0, set);
    }
}
