//! Jobs as the simulator sees them: release, soft deadline, time on each slice size.

use serde::{Deserialize, Serialize};

/// Compute-slice sizes a job can run on, smallest first.
pub const SLICE_SIZES: [u8; 5] = [1, 2, 3, 4, 7];

/// Index into [`SLICE_SIZES`] of a slice with `compute` slices (5 and 6 count as 4:
/// no MIG profile has them).
pub fn size_index(compute: u8) -> usize {
    match compute {
        0 | 1 => 0,
        2 => 1,
        3 => 2,
        4..=6 => 3,
        _ => 4,
    }
}

/// One job. Times are minutes from the start of the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Position in its job set (stable id).
    pub id: u32,
    /// Release (submit) time.
    pub release: f64,
    /// Soft deadline.
    pub deadline: f64,
    /// Processing time on a slice of each size in [`SLICE_SIZES`], non-increasing.
    pub times: [f64; 5],
    /// Index of the job's class label in its [`JobSet`].
    pub class: u16,
}

impl Job {
    /// Processing time on a slice with `compute` compute slices.
    pub fn time_on(&self, compute: u8) -> f64 {
        self.times[size_index(compute)]
    }

    /// The throughput class CEDF sorts by (docs/model.md §2): 1 if the 4g runs it at less
    /// than 80% of the 7g's throughput, else 2 if the 2g does, else 3 if the 1g does, else 4.
    pub fn throughput_class(&self) -> u8 {
        let thr = |i: usize| 1.0 / self.times[i];
        let full = thr(4);
        if thr(3) < 0.8 * full {
            1
        } else if thr(1) < 0.8 * full {
            2
        } else if thr(0) < 0.8 * full {
            3
        } else {
            4
        }
    }

    /// Checks the invariants every reader and generator must keep.
    pub fn check(&self) -> Result<(), JobError> {
        if !self.release.is_finite() || self.release < 0.0 {
            return Err(JobError::Release(self.release));
        }
        if !self.deadline.is_finite() || self.deadline < self.release {
            return Err(JobError::Deadline {
                deadline: self.deadline,
                release: self.release,
            });
        }
        if self.times.iter().any(|t| !t.is_finite() || *t <= 0.0) {
            return Err(JobError::NotPositive(self.times));
        }
        if self.times.windows(2).any(|w| w[1] > w[0] * (1.0 + 1e-9)) {
            return Err(JobError::Grow(self.times));
        }
        Ok(())
    }
}

/// A job that breaks the invariants every reader and generator keeps.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobError {
    /// A release that is no time at or after 0.
    #[error("release {0} is not a time >= 0")]
    Release(f64),
    /// A deadline before the release.
    #[error("deadline {deadline} is before release {release}")]
    Deadline {
        /// The deadline.
        deadline: f64,
        /// The release.
        release: f64,
    },
    /// A processing time that is not positive.
    #[error("processing times {0:?} must be positive")]
    NotPositive([f64; 5]),
    /// Processing times that grow with the slice size.
    #[error("processing times {0:?} grow with slice size")]
    Grow([f64; 5]),
}

/// The jobs of one run, sorted by release, with the labels of their classes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobSet {
    /// Jobs, sorted by release; `jobs[i].id == i`.
    pub jobs: Vec<Job>,
    /// Class labels (`bert-infer`, ...), indexed by `Job::class`.
    pub classes: Vec<String>,
}

impl JobSet {
    /// Sorts by release (stable) and renumbers ids to positions.
    pub fn normalise(&mut self) {
        self.jobs.sort_by(|a, b| a.release.total_cmp(&b.release));
        for (i, j) in self.jobs.iter_mut().enumerate() {
            j.id = i as u32;
        }
    }

    /// Renumbers class labels in order of first use by the jobs and drops unused ones:
    /// the numbering a trace reader rebuilds from per-job labels.
    pub fn compact_classes(&mut self) {
        let used = self
            .jobs
            .iter()
            .map(|j| usize::from(j.class) + 1)
            .max()
            .unwrap_or(0);
        let mut map: Vec<Option<u16>> = vec![None; used.max(self.classes.len())];
        let mut labels = Vec::new();
        for j in &mut self.jobs {
            let old = usize::from(j.class);
            let new = match map.get(old).copied().flatten() {
                Some(n) => n,
                None => {
                    let n = labels.len() as u16;
                    labels.push(self.classes.get(old).cloned().unwrap_or_default());
                    if let Some(m) = map.get_mut(old) {
                        *m = Some(n);
                    }
                    n
                }
            };
            j.class = new;
        }
        self.classes = labels;
    }

    /// The class index for a label, adding it if new.
    pub fn class_index(&mut self, label: &str) -> u16 {
        match self.classes.iter().position(|c| c == label) {
            Some(i) => i as u16,
            None => {
                self.classes.push(label.to_string());
                (self.classes.len() - 1) as u16
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(times: [f64; 5]) -> Job {
        Job {
            id: 0,
            release: 0.0,
            deadline: 10.0,
            times,
            class: 0,
        }
    }

    #[test]
    fn throughput_classes_follow_the_paper_thresholds() {
        // BERT inference is linear: the 4g runs at 4/7 of the 7g -> class 1.
        assert_eq!(job([7.0, 3.5, 7.0 / 3.0, 1.75, 1.0]).throughput_class(), 1);
        // 4g at 90% of 7g, 2g at 50% -> class 2.
        assert_eq!(job([4.0, 2.0, 1.5, 1.11, 1.0]).throughput_class(), 2);
        // 2g at 90%, 1g at 50% -> class 3.
        assert_eq!(job([2.0, 1.11, 1.05, 1.02, 1.0]).throughput_class(), 3);
        // Flat: class 4.
        assert_eq!(job([1.1, 1.0, 1.0, 1.0, 1.0]).throughput_class(), 4);
    }

    #[test]
    fn a_job_slower_on_a_bigger_slice_is_refused() {
        assert!(job([1.0, 2.0, 1.0, 1.0, 1.0]).check().is_err());
        assert!(job([3.0, 2.0, 1.0, 1.0, 1.0]).check().is_ok());
    }

    #[test]
    fn compacting_classes_numbers_labels_by_first_use() {
        let mut set = JobSet {
            jobs: [2u16, 0, 2]
                .map(|c| Job {
                    class: c,
                    ..job([1.0; 5])
                })
                .to_vec(),
            classes: ["a", "b", "c"].map(String::from).to_vec(),
        };
        set.compact_classes();
        assert_eq!(set.classes, ["c", "a"]);
        assert_eq!(set.jobs.iter().map(|j| j.class).collect::<Vec<_>>(), [0, 1, 0]);
    }

    #[test]
    fn five_and_six_slices_count_as_four() {
        assert_eq!(size_index(5), 3);
        assert_eq!(size_index(7), 4);
    }
}
