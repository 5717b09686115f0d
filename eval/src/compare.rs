//! Every baseline on the same job streams, against the static-CEDF reference.

use rayon::prelude::*;
use serde::Serialize;

use std::path::PathBuf;

use smartmig_bounds::{energy_day, relax, tardiness_bound, DayBounds, COMPARE_TARDINESS};
use smartmig_policy::{OnnxRuntime, PolicyRuntime, RuntimeError, SamplingConfig, DEFAULT_TOP_K};
use smartmig_sim::partition::mean_field::{scenario_metadata, MeanField, DEFAULT_EVERY_EVENTS};
use smartmig_sim::partition::{Periodic, Repartitioner, Static};
use smartmig_sim::scenario::{PeriodicSpec, ResolvedScenario};
use smartmig_sim::sched::Scheduler;
use smartmig_sim::workload::{self, JobSet, TraceError};
use smartmig_sim::{RunOptions, RunResult, Simulation};

/// Name of the reference policy (static CEDF on the paper's layout).
pub const REFERENCE: &str = "static-cedf";
/// Name of the best static layout's row; the paired gains are against it.
pub const STATIC_BEST: &str = "static-best";
/// Name of the best time-of-day schedule's row.
pub const PERIODIC_BEST: &str = "periodic-best";
/// Name of the learned policy's row.
pub const SMART_MIG: &str = "smart-mig";

/// A policy to evaluate: a repartitioner and a scheduler.
#[derive(Debug, Clone)]
pub struct PolicySpec {
    /// Report name.
    pub name: String,
    /// Scheduler.
    pub scheduler: Scheduler,
    /// Layout source.
    pub layout: LayoutSpec,
    /// A caveat printed with the row (e.g. a layout tuned for another scenario).
    pub note: Option<String>,
}

/// Where a policy's layouts come from.
#[derive(Debug, Clone)]
pub enum LayoutSpec {
    /// Fixed configurations cycled over the GPUs.
    Static(Vec<String>),
    /// A time-of-day schedule.
    Periodic(Vec<PeriodicSpec>),
    /// A learned mean-field policy (ONNX, one file for the scenario's single GPU model),
    /// starting from the given layout.
    MeanField {
        /// The policy file.
        model: PathBuf,
        /// Starting layout.
        initial: Vec<String>,
        /// How much likelier a move must be than staying (smartmigd's
        /// `policy.stay_threshold`; 0: off).
        stay_threshold: f64,
    },
}

impl PolicySpec {
    /// A policy without a caveat.
    pub fn new(name: &str, scheduler: Scheduler, layout: LayoutSpec) -> PolicySpec {
        PolicySpec {
            name: name.to_string(),
            scheduler,
            layout,
            note: None,
        }
    }

    /// The same policy with a caveat.
    pub fn with_note(mut self, note: Option<String>) -> PolicySpec {
        self.note = note;
        self
    }

    /// A fresh repartitioner for one run (a learned policy is loaded and checked here).
    pub fn repartitioner(&self, sc: &ResolvedScenario) -> Result<Box<dyn Repartitioner>, RuntimeError> {
        Ok(match &self.layout {
            LayoutSpec::Static(l) => Box::new(Static::new(self.name.clone(), l.clone())),
            LayoutSpec::Periodic(schedule) => Box::new(Periodic::named(&self.name, sc, schedule)),
            LayoutSpec::MeanField {
                model,
                initial,
                stay_threshold,
            } => {
                let expected = scenario_metadata(sc, 0, DEFAULT_EVERY_EVENTS, DEFAULT_TOP_K as u32, 0);
                let rt = PolicyRuntime::load_with(&OnnxRuntime::init_or_fetch(None)?, model, &expected)?;
                let meta = rt.metadata().clone();
                let sampling = SamplingConfig {
                    top_k: meta.top_k as usize,
                    stay_threshold: *stay_threshold,
                };
                let every = if meta.decision.events > 0 {
                    meta.decision.events
                } else {
                    DEFAULT_EVERY_EVENTS
                };
                let interval = meta.decision.seconds;
                let draw = meta.draw;
                Box::new(
                    MeanField::new(
                        sc,
                        vec![rt],
                        meta.feature_layout,
                        initial.clone(),
                        every,
                        sampling,
                    )
                    .with_interval(interval)
                    .with_draw(draw),
                )
            }
        })
    }
}

/// A tuned baseline to include: its layout or schedule, and a caveat when it was tuned
/// for a different scenario than the one being run.
#[derive(Debug, Clone, Default)]
pub struct Tuned {
    /// `static-best`'s layout.
    pub static_best: Option<(Vec<String>, Option<String>)>,
    /// `periodic-best`'s schedule.
    pub periodic_best: Option<(Vec<PeriodicSpec>, Option<String>)>,
}

/// The baselines of docs/model.md §5 for a scenario, and the tuned ones given.
///
/// `none` (every GPU whole) runs EDF: with one 7g per GPU, CEDF's class order only delays
/// urgent jobs behind long ones; EDF is what reproduces the paper's no-partitioning figures.
pub fn baselines(sc: &ResolvedScenario, tuned: &Tuned) -> Vec<PolicySpec> {
    let reference = sc.scenario.baselines.reference_layout.clone();
    let mut v = vec![
        PolicySpec::new(
            "none",
            Scheduler::Edf,
            LayoutSpec::Static(vec![smartmig_sim::scenario::WHOLE_GPU.into()]),
        ),
        PolicySpec::new(REFERENCE, Scheduler::Cedf, LayoutSpec::Static(reference.clone())),
        PolicySpec::new(
            "static-edf",
            Scheduler::Edf,
            LayoutSpec::Static(reference.clone()),
        ),
        PolicySpec::new(
            "static-met",
            Scheduler::Met,
            LayoutSpec::Static(reference.clone()),
        ),
        PolicySpec::new("static-random", Scheduler::Random, LayoutSpec::Static(reference)),
    ];
    if let Some((best, note)) = &tuned.static_best {
        v.push(
            PolicySpec::new(STATIC_BEST, Scheduler::Cedf, LayoutSpec::Static(best.clone()))
                .with_note(note.clone()),
        );
    }
    if !sc.scenario.baselines.periodic.is_empty() {
        v.push(PolicySpec::new(
            "periodic",
            Scheduler::Cedf,
            LayoutSpec::Periodic(sc.scenario.baselines.periodic.clone()),
        ));
    }
    if let Some((schedule, note)) = &tuned.periodic_best {
        v.push(
            PolicySpec::new(
                PERIODIC_BEST,
                Scheduler::Cedf,
                LayoutSpec::Periodic(schedule.clone()),
            )
            .with_note(note.clone()),
        );
    }
    v
}

/// Runs `policy` with `scheduler` on one job set, under the scenario's semantics.
fn simulate(
    sc: &ResolvedScenario,
    jobs: &JobSet,
    scheduler: Scheduler,
    seed: u64,
    sample: Option<f64>,
    policy: &mut dyn Repartitioner,
) -> RunResult {
    let opts = RunOptions {
        sample_every: sample,
        ..RunOptions::of(sc, scheduler, seed)
    };
    Simulation::new(sc, &jobs.jobs, opts).run(policy)
}

/// Each day (seed, jobs) with its reference run, the days in parallel: what searches
/// score their candidates against.
pub fn with_references(sc: &ResolvedScenario, days: Vec<(u64, JobSet)>) -> Vec<(u64, JobSet, RunResult)> {
    days.into_par_iter()
        .map(|(seed, jobs)| {
            let r = run_reference(sc, &jobs, seed);
            (seed, jobs, r)
        })
        .collect()
}

/// Runs one policy on one job set (a learned policy is loaded first, which can fail).
pub fn run_policy(
    sc: &ResolvedScenario,
    jobs: &JobSet,
    p: &PolicySpec,
    seed: u64,
    sample: Option<f64>,
) -> Result<RunResult, RuntimeError> {
    let mut r = p.repartitioner(sc)?;
    Ok(simulate(sc, jobs, p.scheduler, seed, sample, r.as_mut()))
}

/// Runs a static layout (configuration names the scenario has checked) with `scheduler`.
pub fn run_static(
    sc: &ResolvedScenario,
    jobs: &JobSet,
    scheduler: Scheduler,
    layout: &[String],
    seed: u64,
) -> RunResult {
    let mut policy = Static::new("static", layout.to_vec());
    simulate(sc, jobs, scheduler, seed, None, &mut policy)
}

/// The reference run ET is measured against: static CEDF on the scenario's reference layout.
pub fn run_reference(sc: &ResolvedScenario, jobs: &JobSet, seed: u64) -> RunResult {
    run_static(
        sc,
        jobs,
        Scheduler::Cedf,
        &sc.scenario.baselines.reference_layout,
        seed,
    )
}

/// A comparison that could not run.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// The jobs could not be generated or read.
    #[error(transparent)]
    Workload(#[from] TraceError),
    /// A learned policy could not be loaded.
    #[error(transparent)]
    Policy(#[from] RuntimeError),
    /// A day index beyond the trace's days.
    #[error("the trace has no day {0}")]
    NoSuchDay(u64),
}

/// One policy's results over every seed.
#[derive(Debug, Clone, Serialize)]
pub struct PolicySummary {
    /// Name.
    pub name: String,
    /// Scheduler.
    pub scheduler: Scheduler,
    /// Mean energy, W·min.
    pub energy_wmin: f64,
    /// Mean energy, kWh.
    pub energy_kwh: f64,
    /// Mean average tardiness, minutes.
    pub avg_tardiness_min: f64,
    /// Mean ET against the reference on the same days.
    pub et: f64,
    /// 1 − ET.
    pub et_gain: f64,
    /// Mean repartitions per day.
    pub repartitions: f64,
    /// Standard deviation of energy over seeds, W·min.
    pub energy_wmin_sd: f64,
    /// Standard deviation of tardiness over seeds, minutes.
    pub avg_tardiness_min_sd: f64,
    /// Standard deviation of ET over seeds.
    pub et_sd: f64,
    /// Mean preemptions per day.
    pub preemptions: f64,
    /// Mean utilisation of compute slices.
    pub utilisation: f64,
    /// Mean share of GPU time per configuration.
    pub config_share: Vec<(String, f64)>,
    /// Mean over days of energy / E_LB − 1 (the energy lower bound of `smartmig_bounds`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy_above_lb: Option<f64>,
    /// Mean re-layout batches per day.
    pub relayout_batches: f64,
    /// Paired against `static-best` on the same days, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_static_best: Option<Paired>,
    /// A caveat (e.g. a layout tuned for another scenario).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A per-day paired comparison: gain_d = 1 − ET_d / ET_other,d on each day d.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Paired {
    /// Mean gain over days.
    pub mean: f64,
    /// Its standard error (sample standard deviation / √days).
    pub se: f64,
    /// Days with a positive gain.
    pub better_days: usize,
    /// Days compared.
    pub days: usize,
}

impl Paired {
    /// The paired gain of `ets` over `others`, day by day.
    pub fn of(ets: &[f64], others: &[f64]) -> Paired {
        let gains: Vec<f64> = ets.iter().zip(others).map(|(e, o)| 1.0 - e / o).collect();
        let n = gains.len();
        let mean = gains.iter().sum::<f64>() / n.max(1) as f64;
        let var = gains.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n.max(2) - 1) as f64;
        Paired {
            mean,
            se: (var / n.max(1) as f64).sqrt(),
            better_days: gains.iter().filter(|&&g| g > 0.0).count(),
            days: n,
        }
    }

    /// `+4.9% ± 0.4% (20/20 days better)`.
    pub fn describe(&self) -> String {
        format!(
            "{:+.1}% ± {:.1}% ({}/{} days better)",
            100.0 * self.mean,
            100.0 * self.se,
            self.better_days,
            self.days
        )
    }
}

/// The comparison table.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Scenario name.
    pub scenario: String,
    /// Number of GPUs.
    pub gpus: usize,
    /// Mean jobs per day.
    pub jobs: usize,
    /// Where the days come from: `seeds A..=B` or a trace's days.
    pub days_from: String,
    /// Seeds of the job streams (a trace's days: their index).
    pub seeds: Vec<u64>,
    /// The reference policy's name.
    pub reference: String,
    /// One entry per policy.
    pub policies: Vec<PolicySummary>,
    /// Lower bounds, means over days: `energy_wmin`, `energy_kwh`, `tardiness_min` and
    /// `tardiness_method` (`smartmig_bounds::summary`); None with `--no-bounds`.
    pub bounds: Option<serde_json::Value>,
    /// Every run, for plots.
    #[serde(skip)]
    pub runs: Vec<Vec<RunResult>>,
}

/// One day's runs of every policy and its lower bounds: what a sweep task computes.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Day {
    /// Seed of the job stream (a trace's day: its index).
    pub seed: u64,
    /// Jobs in the stream.
    pub jobs: usize,
    /// One run per policy, in policy order.
    pub runs: Vec<RunResult>,
    /// The day's lower bounds (None when not asked for).
    #[serde(default)]
    pub bounds: Option<DayBounds>,
}

/// Where the days of a comparison come from.
#[derive(Debug, Clone)]
pub enum Days {
    /// Generated by the scenario's workload (or its trace, once per seed), one per seed.
    Seeds(Vec<u64>),
    /// Days cut from one trace (`workload::split_days`), by index.
    Trace {
        /// The trace, for reports.
        name: String,
        /// Its days.
        days: Vec<JobSet>,
    },
}

impl Days {
    /// The days' labels (seeds, or indices into a trace).
    pub fn seeds(&self) -> Vec<u64> {
        match self {
            Days::Seeds(s) => s.clone(),
            Days::Trace { days, .. } => (0..days.len() as u64).collect(),
        }
    }

    /// How the days are described in reports.
    pub fn describe(&self) -> String {
        match self {
            Days::Seeds(s) => match (s.first(), s.last()) {
                (Some(a), Some(b)) if s.windows(2).all(|w| w[1] == w[0] + 1) => format!("seeds {a}..={b}"),
                _ => format!("seeds {s:?}"),
            },
            Days::Trace { name, days } => format!("{} days of trace {name}", days.len()),
        }
    }

    /// The jobs of the day labelled `seed`.
    pub fn jobs(
        &self,
        sc: &ResolvedScenario,
        seed: u64,
    ) -> Result<std::borrow::Cow<'_, JobSet>, CompareError> {
        match self {
            Days::Seeds(_) => Ok(std::borrow::Cow::Owned(workload::from_scenario(sc, seed, false)?)),
            Days::Trace { days, .. } => days
                .get(seed as usize)
                .map(std::borrow::Cow::Borrowed)
                .ok_or(CompareError::NoSuchDay(seed)),
        }
    }
}

/// Runs every policy on one day's jobs and, with `bounds`, bounds the day.
pub fn compare_jobs(
    sc: &ResolvedScenario,
    policies: &[PolicySpec],
    seed: u64,
    jobs: &JobSet,
    sample: Option<f64>,
    bounds: bool,
) -> Result<Day, CompareError> {
    let runs = policies
        .iter()
        .map(|p| run_policy(sc, jobs, p, seed, sample))
        .collect::<Result<Vec<_>, _>>()?;
    let lbs = bounds.then(|| {
        let mut lbs = energy_day(sc, &jobs.jobs);
        match tardiness_bound(&relax(&jobs.jobs), sc.gpus.len(), &COMPARE_TARDINESS) {
            Ok(t) => lbs.tardiness = Some(t),
            // A solver failure costs one day's tardiness bound, not the comparison.
            Err(e) => log::warn!("day {seed}: no tardiness bound: {e}"),
        }
        lbs
    });
    Ok(Day {
        seed,
        jobs: jobs.jobs.len(),
        runs,
        bounds: lbs,
    })
}

/// Runs every policy on one seed's job stream and bounds the day.
pub fn compare_day(
    sc: &ResolvedScenario,
    policies: &[PolicySpec],
    seed: u64,
    sample: Option<f64>,
) -> Result<Day, CompareError> {
    let jobs = workload::from_scenario(sc, seed, false)?;
    compare_jobs(sc, policies, seed, &jobs, sample, true)
}

/// Runs every policy on every day, in parallel over days.
pub fn compare(
    sc: &ResolvedScenario,
    policies: &[PolicySpec],
    days: &Days,
    sample: Option<f64>,
    bounds: bool,
    progress: &indicatif::ProgressBar,
) -> Result<Comparison, CompareError> {
    let results: Vec<Day> = days
        .seeds()
        .par_iter()
        .map(|&seed| {
            let day = days
                .jobs(sc, seed)
                .and_then(|jobs| compare_jobs(sc, policies, seed, &jobs, sample, bounds));
            progress.inc(1);
            day
        })
        .collect::<Result<_, CompareError>>()?;
    Ok(summarise(sc, policies, results, &days.describe()))
}

/// The comparison table from every day's runs (days in order, runs in policy order).
pub fn summarise(
    sc: &ResolvedScenario,
    policies: &[PolicySpec],
    days: Vec<Day>,
    days_from: &str,
) -> Comparison {
    let objective = &sc.scenario.objective;
    let ref_idx = policies.iter().position(|p| p.name == REFERENCE).unwrap_or(0);
    let best_idx = policies.iter().position(|p| p.name == STATIC_BEST);
    let seeds: Vec<u64> = days.iter().map(|d| d.seed).collect();
    let day_lbs: Option<Vec<DayBounds>> = days.iter().map(|d| d.bounds.clone()).collect();
    let per_seed: Vec<(usize, Vec<RunResult>)> = days.into_iter().map(|d| (d.jobs, d.runs)).collect();
    let n = seeds.len().max(1) as f64;
    let mean = |f: &dyn Fn(&[RunResult]) -> f64| per_seed.iter().map(|(_, r)| f(r)).sum::<f64>() / n;
    let sd = |f: &dyn Fn(&[RunResult]) -> f64| {
        let m = mean(f);
        (per_seed.iter().map(|(_, r)| (f(r) - m).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt()
    };
    let ets = |i: usize| -> Vec<f64> {
        per_seed
            .iter()
            .map(|(_, r)| r[i].et(&r[ref_idx], objective))
            .collect()
    };
    let summaries = policies
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let e = |r: &[RunResult]| r[i].energy_wmin;
            let t = |r: &[RunResult]| r[i].avg_tardiness_min;
            let etf = |r: &[RunResult]| r[i].et(&r[ref_idx], objective);
            let et = mean(&etf);
            let shares = per_seed
                .first()
                .map(|(_, r)| r[i].config_share.clone())
                .unwrap_or_default();
            let config_share = shares
                .iter()
                .enumerate()
                .map(|(k, (name, _))| (name.clone(), mean(&|r: &[RunResult]| r[i].config_share[k].1)))
                .collect();
            PolicySummary {
                name: p.name.clone(),
                scheduler: p.scheduler,
                energy_wmin: mean(&e),
                energy_kwh: mean(&e) / smartmig_sim::energy::WMIN_PER_KWH,
                avg_tardiness_min: mean(&t),
                et,
                et_gain: 1.0 - et,
                repartitions: mean(&|r: &[RunResult]| r[i].repartitions as f64),
                energy_wmin_sd: sd(&e),
                avg_tardiness_min_sd: sd(&t),
                et_sd: sd(&etf),
                preemptions: mean(&|r: &[RunResult]| r[i].preemptions as f64),
                utilisation: mean(&|r: &[RunResult]| r[i].utilisation),
                config_share,
                energy_above_lb: day_lbs.as_ref().map(|lbs| {
                    per_seed
                        .iter()
                        .zip(lbs)
                        .map(|((_, r), b)| r[i].energy_wmin / b.energy.energy_wmin - 1.0)
                        .sum::<f64>()
                        / n
                }),
                relayout_batches: mean(&|r: &[RunResult]| r[i].relayout_batches as f64),
                vs_static_best: best_idx.filter(|&b| b != i).map(|b| Paired::of(&ets(i), &ets(b))),
                note: p.note.clone(),
            }
        })
        .collect();
    Comparison {
        scenario: sc.scenario.name.clone(),
        gpus: sc.gpus.len(),
        jobs: (per_seed.iter().map(|(j, _)| *j).sum::<usize>() as f64 / n).round() as usize,
        days_from: days_from.to_string(),
        seeds,
        reference: REFERENCE.to_string(),
        policies: summaries,
        bounds: day_lbs.as_deref().map(smartmig_bounds::summary),
        runs: per_seed.into_iter().map(|(_, r)| r).collect(),
    }
}

/// Standard errors by which a candidate's mean paired gain over `static-best` must clear
/// zero on validation days before it is deployed instead (the guard).
pub const GUARD_STANDARD_ERRORS: f64 = 2.0;

/// What the guard found on the validation days.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GuardVerdict {
    /// The candidate against `static-best`, paired by day.
    pub vs_static_best: Paired,
    /// Whether it may replace `static-best`.
    pub passed: bool,
}

/// The deployment guard: runs `candidate` and `static-best` (`static_layout`) on the
/// validation `days` (never trained or evaluated on) and lets the candidate replace the
/// static layout only when its paired gain is positive by [`GUARD_STANDARD_ERRORS`].
pub fn guard(
    sc: &ResolvedScenario,
    candidate: PolicySpec,
    static_layout: &[String],
    days: &Days,
) -> Result<GuardVerdict, CompareError> {
    let reference = sc.scenario.baselines.reference_layout.clone();
    let policies = vec![
        PolicySpec::new(REFERENCE, Scheduler::Cedf, LayoutSpec::Static(reference)),
        PolicySpec::new(
            STATIC_BEST,
            Scheduler::Cedf,
            LayoutSpec::Static(static_layout.to_vec()),
        ),
        candidate,
    ];
    let cmp = compare(
        sc,
        &policies,
        days,
        None,
        false,
        &indicatif::ProgressBar::hidden(),
    )?;
    let paired = cmp.policies[2].vs_static_best.unwrap_or(Paired::of(&[], &[]));
    Ok(GuardVerdict::of(paired))
}

impl GuardVerdict {
    /// The guard's rule applied to a paired comparison with `static-best`. One day has no
    /// standard error to clear, so fewer than two days never pass.
    pub fn of(paired: Paired) -> GuardVerdict {
        GuardVerdict {
            vs_static_best: paired,
            passed: paired.days >= 2 && paired.mean > 0.0 && paired.mean > GUARD_STANDARD_ERRORS * paired.se,
        }
    }

    /// `passed: +6.5% ± 0.5% over static-best on 16 validation days` (or `failed: …`).
    pub fn describe(&self) -> String {
        format!(
            "{}: {} over static-best on validation days",
            if self.passed { "passed" } else { "failed" },
            self.vs_static_best.describe()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_passes_a_gain_two_standard_errors_clear_of_zero_on_two_days_or_more() {
        let verdict = |ets: &[f64]| GuardVerdict::of(Paired::of(ets, &vec![1.0; ets.len()])).passed;
        assert!(verdict(&[0.9, 0.91]), "a steady 9-10% gain");
        assert!(!verdict(&[0.9]), "one day has no standard error");
        assert!(!verdict(&[0.9, 1.08]), "a gain within its noise");
        assert!(!verdict(&[1.1, 1.12]), "a loss");
    }
}
