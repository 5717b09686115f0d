//! What a run measured, the ET objective, and time series for plots.

use serde::Serialize;

use crate::energy::wmin_to_kwh;
use crate::scenario::{ResolvedScenario, Semantics};
use crate::sched::Scheduler;

/// Tardiness references below this (minutes) are floored to it, so ET stays finite when
/// the reference policy is never late.
pub const MIN_T_REF: f64 = 0.01;

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
    /// Time series, when recorded.
    #[serde(skip)]
    pub series: Option<Series>,
}

impl RunResult {
    /// Energy in kWh.
    pub fn energy_kwh(&self) -> f64 {
        wmin_to_kwh(self.energy_wmin)
    }

    /// ET = (a·e/e_ref + t/t_ref)/(a+1) against a reference run on the same jobs.
    pub fn et(&self, reference: &RunResult, a: f64) -> f64 {
        et(
            self.energy_wmin,
            self.avg_tardiness_min,
            reference.energy_wmin,
            reference.avg_tardiness_min,
            a,
        )
    }
}

/// ET of (e, t) against (e_ref, t_ref) with energy weight `a` (docs/model.md §4).
pub fn et(e: f64, t: f64, e_ref: f64, t_ref: f64, a: f64) -> f64 {
    (a * e / e_ref.max(1e-12) + t / t_ref.max(MIN_T_REF)) / (a + 1.0)
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

    #[test]
    fn et_of_the_reference_is_one_and_a_zero_tardiness_reference_is_floored() {
        assert!((et(10.0, 2.0, 10.0, 2.0, 0.5) - 1.0).abs() < 1e-12);
        let v = et(10.0, 0.0, 10.0, 0.0, 0.5);
        assert!((v - 0.5 / 1.5).abs() < 1e-12);
        assert!(et(10.0, 1.0, 10.0, 0.0, 0.5).is_finite());
    }
}
