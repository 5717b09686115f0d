//! What a run measured, the ET objective, and time series for plots.

use serde::Serialize;

use crate::energy::wmin_to_kwh;
use crate::scenario::{ObjectiveSpec, ResolvedScenario, Semantics};
use crate::sched::Scheduler;

/// The tolerance in minutes below which no tolerance is applied (a tolerance of 0 in the
/// scenario): the paper's pure ratio, guarded against 0/0.
const MIN_TOLERANCE_MIN: f64 = 1e-9;

/// The result of one run.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RunResult {
    /// Repartition policy.
    pub policy: String,
    /// Scheduler.
    pub scheduler: Scheduler,
    /// Repartition semantics.
    pub semantics: Semantics,
    /// Seed of the run (the job stream's and the run's RNG).
    pub seed: u64,
    /// Jobs in the stream.
    pub jobs: usize,
    /// Jobs completed (all, at the end of a run).
    pub completed: usize,
    /// Energy from time 0 to the last completion, W·min.
    pub energy_wmin: f64,
    /// Mean over jobs of max(C − d, 0), minutes.
    pub avg_tardiness_min: f64,
    /// Time of the last completion, minutes.
    pub makespan_min: f64,
    /// GPU configuration changes.
    pub repartitions: u64,
    /// Jobs stopped by a repartition (preempt semantics).
    pub preemptions: u64,
    /// Busy compute-slice time over available compute-slice time.
    pub utilisation: f64,
    /// Share of GPU time spent in each configuration.
    pub config_share: Vec<(String, f64)>,
    /// Arrival and completion events processed.
    pub events: u64,
    /// Re-layout batches (each is one Slurm re-layout in the daemon).
    #[serde(default)]
    pub relayout_batches: u64,
    /// Mean over jobs of the time on a full GPU, minutes (the scale of ET's tolerance).
    #[serde(default)]
    pub mean_full_gpu_min: f64,
    /// Time series, when recorded.
    #[serde(skip)]
    pub series: Option<Series>,
}

impl RunResult {
    /// Energy in kWh.
    pub fn energy_kwh(&self) -> f64 {
        wmin_to_kwh(self.energy_wmin)
    }

    /// ET against a reference run on the same jobs, under the scenario's objective.
    pub fn et(&self, reference: &RunResult, objective: &ObjectiveSpec) -> f64 {
        Objective::new(objective, reference.mean_full_gpu_min).et(
            self.energy_wmin,
            self.avg_tardiness_min,
            reference.energy_wmin,
            reference.avg_tardiness_min,
        )
    }
}

/// The ET objective of one day of jobs: ET = (a·e/e_ref + (t + τ)/(t_ref + τ))/(a + 1).
///
/// τ (the tardiness tolerance) is a fraction of the day's mean full-GPU job time
/// (`objective.tardiness_tolerance`, 5% by default). It keeps ET finite when the
/// reference is never late and makes two equally punctual schedules equal in tardiness
/// (a ratio of 1, not 0/0), while at loaded days (t_ref ≫ τ) it is the paper's t/t_ref.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Objective {
    /// Weight `a` of energy against tardiness.
    pub energy_weight: f64,
    /// τ, minutes.
    pub tolerance_min: f64,
}

impl Objective {
    /// The objective of a scenario for jobs whose mean full-GPU time is `mean_full_gpu_min`.
    pub fn new(spec: &ObjectiveSpec, mean_full_gpu_min: f64) -> Objective {
        Objective {
            energy_weight: spec.energy_weight,
            tolerance_min: (spec.tardiness_tolerance * mean_full_gpu_min).max(MIN_TOLERANCE_MIN),
        }
    }

    /// ET of (e, t) against (e_ref, t_ref).
    pub fn et(&self, e: f64, t: f64, e_ref: f64, t_ref: f64) -> f64 {
        let a = self.energy_weight;
        let tau = self.tolerance_min;
        let energy = if e_ref > 0.0 { e / e_ref } else { 1.0 };
        (a * energy + (t + tau) / (t_ref + tau)) / (a + 1.0)
    }
}

/// Mean over jobs of the time on a full GPU (the largest slice), minutes; 0 for no job.
pub fn mean_full_gpu_min(jobs: &[crate::workload::Job]) -> f64 {
    if jobs.is_empty() {
        return 0.0;
    }
    jobs.iter().map(|j| j.times[4]).sum::<f64>() / jobs.len() as f64
}

/// One time-series point.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Time, minutes.
    pub t: f64,
    /// Busy compute slices.
    pub busy_slices: u32,
    /// Jobs waiting.
    pub waiting: usize,
}

/// Time series of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// Sampling interval, minutes.
    pub every: f64,
    /// Samples.
    pub samples: Vec<Sample>,
    /// Arrivals in each sampling interval.
    pub arrivals: Vec<u32>,
    /// Configuration labels.
    pub config_names: Vec<String>,
    /// GPUs in each configuration at each sample (row per sample).
    pub config_counts: Vec<Vec<u32>>,
    /// Compute slices in the cluster.
    pub total_slices: u32,
}

/// Builds a [`Series`] during a run.
#[derive(Debug, Clone)]
pub struct SeriesRecorder {
    series: Series,
    arrivals_now: u32,
}

impl SeriesRecorder {
    /// A recorder sampling every `every` minutes.
    pub fn new(every: f64, sc: &ResolvedScenario) -> SeriesRecorder {
        let multi = sc.models.len() > 1;
        let config_names = sc
            .models
            .iter()
            .flat_map(|m| {
                m.configurations.iter().map(move |c| {
                    if multi {
                        format!("{}/{}", m.model.key, c.name)
                    } else {
                        c.name.clone()
                    }
                })
            })
            .collect();
        SeriesRecorder {
            series: Series {
                every,
                samples: Vec::new(),
                arrivals: Vec::new(),
                config_names,
                config_counts: Vec::new(),
                total_slices: sc.total_slices(),
            },
            arrivals_now: 0,
        }
    }

    /// Counts an arrival in the current interval.
    pub fn arrival(&mut self) {
        self.arrivals_now += 1;
    }

    /// Records a sample and closes the interval.
    pub fn record(&mut self, s: Sample, counts: &[Vec<u32>]) {
        self.series.samples.push(s);
        self.series.arrivals.push(std::mem::take(&mut self.arrivals_now));
        self.series
            .config_counts
            .push(counts.iter().flatten().copied().collect());
    }

    /// The finished series.
    pub fn finish(self) -> Series {
        self.series
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objective(tolerance: f64) -> Objective {
        Objective::new(
            &ObjectiveSpec {
                energy_weight: 0.5,
                tardiness_tolerance: tolerance,
            },
            2.0,
        )
    }

    #[test]
    fn et_of_the_reference_is_one_at_every_load_even_when_nobody_is_late() {
        let o = objective(0.05);
        assert!((o.tolerance_min - 0.1).abs() < 1e-12);
        for t in [0.0, 1e-6, 0.01, 3.9, 100.0] {
            assert!((o.et(10.0, t, 10.0, t) - 1.0).abs() < 1e-12, "t = {t}");
        }
        // The paper's pure ratio (tolerance 0) is guarded too: 0/0 counts as equal.
        assert!((objective(0.0).et(10.0, 0.0, 10.0, 0.0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_never_late_reference_bounds_the_penalty_by_the_tolerance() {
        let o = objective(0.05);
        // 0.1 min late per job against a punctual reference: (0.1 + τ)/τ = 2.
        let v = o.et(10.0, 0.1, 10.0, 0.0);
        assert!((v - (0.5 + 2.0) / 1.5).abs() < 1e-12, "{v}");
        // Equal energy and less tardiness is a gain; at a loaded day τ barely matters.
        assert!(o.et(10.0, 1.0, 10.0, 4.0) < 1.0);
        let paper = (0.5 + 1.0 / 4.0) / 1.5;
        assert!((o.et(10.0, 1.0, 10.0, 4.0) - paper).abs() < 0.02);
    }
}
