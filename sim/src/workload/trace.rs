//! What the trace readers share: the error type, read statistics, the bookkeeping of
//! skipped rows, and the two rules every reader uses to fill in what a trace lacks (the
//! per-slice speed model and the deadline slack).

use std::collections::BTreeMap;
use std::fmt;

use super::job::SLICE_SIZES;

/// Deadline slack of trace jobs: deadline = release + `DEADLINE_SLACK` × time on a full
/// GPU. Traces record no soft deadlines; 1.25 is the mean of the reference generator's
/// U(1, 1.5) factor (docs/model.md §2), so a trace's tardiness is on the generator's scale.
pub const DEADLINE_SLACK: f64 = 1.25;

/// How many bad rows are described in the log before the rest are only counted.
const WARN_FIRST: u64 = 5;

/// A trace that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("cannot read trace {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A line is malformed or describes an impossible job.
    #[error("{path}:{line}: {message}")]
    Line {
        /// The file.
        path: String,
        /// 1-based line number (1 is the header).
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// A trace workload that names no trace file or no format.
    #[error("the workload is a trace but names no `trace` file or no `format`")]
    NotATrace,
    /// The trace holds no usable job at all.
    #[error("trace {path} has no usable job ({stats})")]
    Empty {
        /// The file.
        path: String,
        /// What was read and why it was left out.
        stats: ReadStats,
    },
}

impl TraceError {
    /// Wraps a `csv` error (I/O or framing) with the file and, when known, the line.
    pub(crate) fn from_csv(path: &str, err: csv::Error) -> TraceError {
        let line = err.position().map(|p| p.line());
        match (line, err.into_kind()) {
            (_, csv::ErrorKind::Io(source)) => TraceError::Io {
                path: path.to_string(),
                source,
            },
            (line, kind) => TraceError::Line {
                path: path.to_string(),
                line: line.unwrap_or(0),
                message: format!("{:?}", kind),
            },
        }
    }
}

/// Why a trace row did not become a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// A job step (`N.batch`, `N.extern`, `N.0`), not a job.
    Step,
    /// The job asked for no GPU.
    NoGpu,
    /// The job used more than one GPU or slice (a job runs on one slice).
    MultiGpu,
    /// The job never started (cancelled while pending, or still pending).
    NeverStarted,
    /// The job was still running when the trace was taken: its duration is unknown.
    Unfinished,
    /// The job's end is censored by the end of the trace.
    Censored,
    /// A placeholder row with no submit time (sacct shows these briefly after a job ends).
    Placeholder,
    /// The job ran for less than the trace's time resolution (no positive runtime).
    NoRuntime,
    /// A malformed row, left out because `skip_bad` was asked for.
    Bad,
}

impl SkipReason {
    /// A short label for logs and reports.
    pub fn label(self) -> &'static str {
        match self {
            SkipReason::Step => "job steps",
            SkipReason::NoGpu => "without GPU",
            SkipReason::MultiGpu => "multi-GPU",
            SkipReason::NeverStarted => "never started",
            SkipReason::Unfinished => "unfinished",
            SkipReason::Censored => "censored at trace end",
            SkipReason::Placeholder => "placeholders",
            SkipReason::NoRuntime => "zero runtime",
            SkipReason::Bad => "bad",
        }
    }
}

/// What a trace reader read: rows seen, kept, and left out by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Data rows read (the header is not counted).
    pub rows: u64,
    /// Rows that became jobs.
    pub kept: u64,
    /// Rows left out, by reason; `rows == kept + Σ skipped`.
    pub skipped: BTreeMap<SkipReason, u64>,
}

impl ReadStats {
    /// Rows left out for one reason.
    pub fn skipped_for(&self, why: SkipReason) -> u64 {
        self.skipped.get(&why).copied().unwrap_or(0)
    }

    /// Rows left out for any reason.
    pub fn total_skipped(&self) -> u64 {
        self.skipped.values().sum()
    }
}

impl fmt::Display for ReadStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kept {} of {} rows", self.kept, self.rows)?;
        for (i, (why, n)) in self.skipped.iter().enumerate() {
            let sep = if i == 0 { "; skipped " } else { ", " };
            write!(f, "{sep}{n} {}", why.label())?;
        }
        Ok(())
    }
}

/// One guard for the outcome of every row, so no branch forgets the bookkeeping: a row
/// is kept, skipped by a rule, or bad (an error, or counted when `skip_bad`).
pub(crate) struct RowLog {
    path: String,
    skip_bad: bool,
    /// The counts so far.
    pub stats: ReadStats,
}

impl RowLog {
    /// A fresh log for `path`.
    pub fn new(path: &str, skip_bad: bool) -> RowLog {
        RowLog {
            path: path.to_string(),
            skip_bad,
            stats: ReadStats::default(),
        }
    }

    /// Records a kept row.
    pub fn kept(&mut self) {
        self.stats.rows += 1;
        self.stats.kept += 1;
    }

    /// Records a row left out by the format's rules.
    pub fn skipped(&mut self, why: SkipReason) {
        self.stats.rows += 1;
        *self.stats.skipped.entry(why).or_insert(0) += 1;
    }

    /// Records a bad row: an error naming the line, or, with `skip_bad`, a count (and a
    /// warning for the first few, so the reason is not lost).
    pub fn bad(&mut self, line: u64, message: String) -> Result<(), TraceError> {
        if !self.skip_bad {
            return Err(self.error(line, message));
        }
        self.skipped(SkipReason::Bad);
        let n = self.stats.skipped_for(SkipReason::Bad);
        if n <= WARN_FIRST {
            log::warn!("{}:{line}: skipped: {message}", self.path);
        }
        if n == WARN_FIRST {
            log::warn!("{}: further bad rows are only counted", self.path);
        }
        Ok(())
    }

    /// An error at a line of this file.
    pub fn error(&self, line: u64, message: String) -> TraceError {
        TraceError::Line {
            path: self.path.clone(),
            line,
            message,
        }
    }
}

/// Column positions found by (case-insensitive) name in a header row.
pub(crate) struct Columns {
    found: Vec<Option<usize>>,
}

impl Columns {
    /// Finds `wanted` names in `header`; an error at line 1 names every missing `required` one.
    pub fn find(
        header: &csv::ByteRecord,
        wanted: &[&str],
        required: &[&str],
        log: &RowLog,
    ) -> Result<Columns, TraceError> {
        let names: Vec<String> = header
            .iter()
            .map(|f| String::from_utf8_lossy(f).trim().to_ascii_lowercase())
            .collect();
        let found: Vec<Option<usize>> = wanted
            .iter()
            .map(|w| names.iter().position(|n| *n == w.to_ascii_lowercase()))
            .collect();
        let missing: Vec<&str> = required
            .iter()
            .filter(|r| {
                wanted
                    .iter()
                    .position(|w| w == *r)
                    .and_then(|i| found[i])
                    .is_none()
            })
            .copied()
            .collect();
        if !missing.is_empty() {
            return Err(log.error(
                1,
                format!(
                    "header lacks column{} {} (it has: {})",
                    if missing.len() > 1 { "s" } else { "" },
                    missing.join(", "),
                    names.join(", ")
                ),
            ));
        }
        Ok(Columns { found })
    }

    /// Column of the `i`-th wanted name, if the header has it.
    pub fn get(&self, i: usize) -> Option<usize> {
        self.found[i]
    }
}

/// A delimited trace with its header read and checked: what every reader starts from.
pub(crate) struct CsvTrace<R: std::io::Read> {
    rdr: csv::Reader<R>,
    path: String,
    /// The outcome of every row.
    pub log: RowLog,
    /// Where the wanted columns are.
    pub cols: Columns,
}

impl<R: std::io::Read> CsvTrace<R> {
    /// Opens `input` (fields split by `delimiter`; `|` means sacct's unquoted format) and
    /// finds the `wanted` columns, failing at line 1 if a `required` one is missing.
    pub fn open(
        input: R,
        path: &str,
        skip_bad: bool,
        delimiter: u8,
        wanted: &[&str],
        required: &[&str],
    ) -> Result<CsvTrace<R>, TraceError> {
        let mut rdr = csv::ReaderBuilder::new()
            .delimiter(delimiter)
            .quoting(delimiter != b'|')
            .has_headers(true)
            .flexible(true)
            .from_reader(input);
        let log = RowLog::new(path, skip_bad);
        let header = rdr
            .byte_headers()
            .map_err(|e| TraceError::from_csv(path, e))?
            .clone();
        let cols = Columns::find(&header, wanted, required, &log)?;
        Ok(CsvTrace {
            rdr,
            path: path.to_string(),
            log,
            cols,
        })
    }

    /// Calls `row` on every record after the header, in order, with the columns and the log.
    pub fn for_each_row(
        &mut self,
        mut row: impl FnMut(&csv::ByteRecord, &Columns, &mut RowLog) -> Result<(), TraceError>,
    ) -> Result<(), TraceError> {
        let mut rec = csv::ByteRecord::new();
        while self
            .rdr
            .read_byte_record(&mut rec)
            .map_err(|e| TraceError::from_csv(&self.path, e))?
        {
            row(&rec, &self.cols, &mut self.log)?;
        }
        Ok(())
    }
}

/// Field `col` of a row as trimmed text; `name` is for the message.
pub(crate) fn field<'r>(rec: &'r csv::ByteRecord, col: usize, name: &str) -> Result<&'r str, String> {
    let raw = rec
        .get(col)
        .ok_or_else(|| format!("has {} fields, so no `{name}`", rec.len()))?;
    std::str::from_utf8(raw)
        .map(str::trim)
        .map_err(|_| format!("`{name}` is not UTF-8"))
}

/// 1-based line a record starts on (0 if unknown).
pub(crate) fn line_of(rec: &csv::ByteRecord) -> u64 {
    rec.position().map_or(0, |p| p.line())
}

/// Processing times on [`SLICE_SIZES`] of a job that can use a fraction `d` of a GPU
/// and takes `full` minutes on a full one: on g slices it runs at min(g/7, d)/d of its
/// full-GPU speed (docs/model.md §2's compact model), so its time is `full` × d / min(g/7, d).
/// The result never grows with slice size; `d` is clamped to (0, 1].
pub fn share_times(full: f64, d: f64) -> [f64; 5] {
    let d = d.clamp(f64::MIN_POSITIVE, 1.0);
    SLICE_SIZES.map(|g| {
        let share = (f64::from(g) / 7.0).min(d);
        // Where the slice covers the share, the job runs at full speed: return `full`
        // exactly, so times on big slices are equal, not off by rounding.
        if share >= d {
            full
        } else {
            full * d / share
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_gpu_job_scales_linearly_with_slices() {
        let t = share_times(70.0, 1.0);
        for (k, g) in SLICE_SIZES.iter().enumerate() {
            assert!((t[k] - 70.0 * 7.0 / f64::from(*g)).abs() < 1e-9, "{t:?}");
        }
    }

    #[test]
    fn a_fractional_job_gains_nothing_beyond_its_share() {
        // d = 0.46: 4g (4/7 = 0.57) and 7g already cover it; 3g (0.43) does not.
        let t = share_times(10.0, 0.46);
        assert_eq!(t[3], 10.0);
        assert_eq!(t[4], 10.0);
        assert!((t[2] - 10.0 * 0.46 / (3.0 / 7.0)).abs() < 1e-9);
        assert!(t.windows(2).all(|w| w[1] <= w[0]), "{t:?}");
    }

    #[test]
    fn stats_display_lists_skips_by_reason() {
        let mut log = RowLog::new("t.csv", true);
        log.kept();
        log.skipped(SkipReason::NoGpu);
        log.bad(3, "oops".into()).unwrap();
        assert_eq!(log.stats.rows, 3);
        assert_eq!(log.stats.total_skipped(), 2);
        assert_eq!(
            log.stats.to_string(),
            "kept 1 of 3 rows; skipped 1 without GPU, 1 bad"
        );
    }

    #[test]
    fn a_bad_row_is_an_error_naming_file_and_line_unless_skipped() {
        let mut log = RowLog::new("t.csv", false);
        let e = log.bad(7, "no submit time".into()).unwrap_err().to_string();
        assert_eq!(e, "t.csv:7: no submit time");
    }
}
