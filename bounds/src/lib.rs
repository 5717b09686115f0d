//! Lower bounds on energy and tardiness (docs/model.md §7): small pure functions, each of
//! whose docs says what it relaxes.
//!
//! Both bounds start from the same relaxation, [`relax`]: every job becomes *linear*
//! (it runs k times faster on k slices than on one) and every GPU becomes one machine of
//! seven slices that a job may use whole. Why that never raises energy or tardiness:
//!
//! - A job that finishes a fraction f of its work on a k-slice in time τ has
//!   τ = f·p_{j,k}, so it held k·τ = f·k·p_{j,k} slice-minutes. With
//!   w_j = min_k k·p_{j,k} (the job's *work*, in slice-minutes) that is ≥ f·w_j: no
//!   schedule can finish a job in fewer slice-minutes than w_j. For the paper's sublinear
//!   jobs (speed-up on k slices ≤ k) the minimum is at k = 1 and w_j = p_{j,1}, the
//!   linearisation p_{j,k} = p_{j,1}/k of docs/model.md §7; taking the minimum over sizes keeps
//!   the bound valid for traces with superlinear jobs too.
//! - Seen from a whole GPU, a job on a k-slice progresses at most at rate k/7 of a
//!   machine that processes w_j/7 minutes of work per job; the slices of one GPU add up
//!   to at most 7/7. Any simulated schedule (any layout, repartitions with preemption or
//!   drain, penalties that only waste time) is therefore a *processor-sharing* schedule
//!   of jobs of length w_j/7 on m machines, with each job at rate ≤ 1 and never before
//!   its release; cutting each interval between events with McNaughton's wrap-around
//!   turns it into a preemptive schedule with the same work per interval, so every
//!   completion time stays where it was. Bounds on preemptive schedules of the linear
//!   jobs on m identical machines with release dates are bounds on the simulator.
//! - Energy: with P concave, P[b] ≥ P[0] + b·(P[7] − P[0])/7 (the chord), so the draw
//!   of a GPU is at least its idle power plus a price per busy slice; see [`energy`].

pub mod energy;
pub mod tardiness;

use serde::Serialize;

use smartmig_sim::scenario::ResolvedScenario;
use smartmig_sim::workload::{Job, SLICE_SIZES};

pub use energy::{energy_bound, min_makespan, EnergyBound, EnergyModel};
pub use tardiness::{tardiness_bound, Method, TardinessBound, TardinessError, TardinessOptions};

/// A job of the relaxed problem: linear, on whole 7-slice machines.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RelaxedJob {
    /// Release time, minutes.
    pub release: f64,
    /// Soft deadline, minutes.
    pub deadline: f64,
    /// Processing time on one whole machine, minutes: [`slice_work`] / 7.
    pub length: f64,
}

/// The least slice-minutes a job can be finished in: min over slice sizes k of k·p_{j,k}.
pub fn slice_work(job: &Job) -> f64 {
    SLICE_SIZES
        .iter()
        .zip(job.times.iter())
        .map(|(&k, &t)| f64::from(k) * t)
        .fold(f64::INFINITY, f64::min)
}

/// Relaxes jobs to linear jobs on whole machines (see the module doc for why this
/// never raises energy or tardiness).
pub fn relax(jobs: &[Job]) -> Vec<RelaxedJob> {
    jobs.iter()
        .map(|j| RelaxedJob {
            release: j.release,
            deadline: j.deadline,
            length: slice_work(j) / 7.0,
        })
        .collect()
}

/// Both bounds for one job set on one scenario's cluster.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct DayBounds {
    /// The energy bound.
    pub energy: EnergyBound,
    /// Seconds spent on it (relaxation included).
    pub energy_s: f64,
    /// The tardiness bound, when asked for.
    pub tardiness: Option<TardinessBound>,
}

/// The energy bound of a job set on a scenario's cluster, timed; no tardiness bound yet.
pub fn energy_day(sc: &ResolvedScenario, jobs: &[Job]) -> DayBounds {
    let start = std::time::Instant::now();
    let energy = energy_bound(&relax(jobs), EnergyModel::from_scenario(sc));
    DayBounds {
        energy,
        energy_s: start.elapsed().as_secs_f64(),
        tardiness: None,
    }
}

/// Both bounds of a job set on a scenario's cluster.
pub fn day_bounds(
    sc: &ResolvedScenario,
    jobs: &[Job],
    tardiness: &TardinessOptions,
) -> Result<DayBounds, TardinessError> {
    let mut day = energy_day(sc, jobs);
    day.tardiness = Some(tardiness_bound(&relax(jobs), sc.gpus.len(), tardiness)?);
    Ok(day)
}

/// The tardiness bound `compare` computes for every day: the LP relaxation with a
/// small model (≤ 20,000 job-slot cells) and 5 s per day, so that a comparison stays a
/// matter of seconds; on days where preemptive EDF is optimal for the relaxation (no
/// job late), no model is built at all. `smartmig bounds` solves a finer model.
pub const COMPARE_TARDINESS: TardinessOptions = TardinessOptions {
    method: Method::Relaxed,
    time_limit_s: 5.0,
    exact_cells: 400,
    max_cells: 20_000,
    exact_max_jobs: 40,
};

/// The `bounds` entry of a comparison: means over days of the energy bound (W·min) and
/// the tardiness bound (minutes per job), and how the tardiness bounds were obtained
/// (`lp`, or `lp×3, edf-optimal×17` when days differ).
pub fn summary(days: &[DayBounds]) -> serde_json::Value {
    let n = days.len().max(1) as f64;
    let energy = days.iter().map(|d| d.energy.energy_wmin).sum::<f64>() / n;
    let tardy: Vec<&TardinessBound> = days.iter().filter_map(|d| d.tardiness.as_ref()).collect();
    let mut methods: Vec<(String, usize)> = Vec::new();
    for t in &tardy {
        match methods.iter_mut().find(|(m, _)| *m == t.method) {
            Some((_, c)) => *c += 1,
            None => methods.push((t.method.clone(), 1)),
        }
    }
    let method = match methods.as_slice() {
        [] => None,
        [(m, _)] => Some(m.clone()),
        many => Some(
            many.iter()
                .map(|(m, c)| format!("{m}×{c}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
    };
    let tardiness = (!tardy.is_empty())
        .then(|| tardy.iter().map(|t| t.avg_tardiness_min).sum::<f64>() / tardy.len() as f64);
    serde_json::json!({
        "energy_wmin": energy,
        "energy_kwh": energy / smartmig_sim::energy::WMIN_PER_KWH,
        "tardiness_min": tardiness,
        "tardiness_method": method,
    })
}

#[cfg(test)]
mod property_tests;
