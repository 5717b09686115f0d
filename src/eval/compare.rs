//! Every baseline on the same job streams, against the static-CEDF reference.

use rayon::prelude::*;
use serde::Serialize;

use std::path::PathBuf;

use crate::bounds::{self, energy_day, relax, tardiness_bound, DayBounds, COMPARE_TARDINESS};
use crate::partition::mean_field::{scenario_metadata, MeanField, DEFAULT_EVERY_EVENTS};
use crate::partition::{Periodic, Repartitioner, Static};
use crate::policy::{OnnxRuntime, PolicyRuntime, RuntimeError, SamplingConfig, DEFAULT_TOP_K};
use crate::scenario::ResolvedScenario;
use crate::sched::Scheduler;
use crate::sim::{RunOptions, RunResult, Simulation};
use crate::workload::{self, JobSet, TraceError};

/// Name of the reference policy (static CEDF on the paper's layout).
pub const REFERENCE: &str = "static-cedf";

/// A policy to evaluate: a repartitioner and a scheduler.
#[derive(Debug, Clone)]
pub struct PolicySpec {
    /// Report name.
    pub name: String,
    /// Scheduler.
    pub scheduler: Scheduler,
    /// Layout source.
    pub layout: LayoutSpec,
}

/// Where a policy's layouts come from.
#[derive(Debug, Clone)]
pub enum LayoutSpec {
    /// Fixed configurations cycled over the GPUs.
    Static(Vec<String>),
    /// The scenario's periodic schedule.
    Periodic,
    /// A learned mean-field policy (ONNX, one file for the scenario's single GPU model),
    /// starting from the given layout.
    MeanField {
        /// The policy file.
        model: PathBuf,
        /// Starting layout.
        initial: Vec<String>,
    },
}

impl PolicySpec {
    fn new(name: &str, scheduler: Scheduler, layout: LayoutSpec) -> PolicySpec {
        PolicySpec {
            name: name.to_string(),
            scheduler,
            layout,
        }
    }

    /// A fresh repartitioner for one run (a learned policy is loaded and checked here).
    pub fn repartitioner(&self, sc: &ResolvedScenario) -> Result<Box<dyn Repartitioner>, RuntimeError> {
        Ok(match &self.layout {
            LayoutSpec::Static(l) => Box::new(Static::new(self.name.clone(), l.clone())),
            LayoutSpec::Periodic => Box::new(Periodic::new(sc, &sc.scenario.baselines.periodic)),
            LayoutSpec::MeanField { model, initial } => {
                let expected = scenario_metadata(sc, 0, DEFAULT_EVERY_EVENTS, DEFAULT_TOP_K as u32, 0);
                let rt = PolicyRuntime::load_with(&OnnxRuntime::init_or_fetch(None)?, model, &expected)?;
                let meta = rt.metadata().clone();
                let sampling = SamplingConfig {
                    top_k: meta.top_k as usize,
                    stay_threshold: 0.0,
                };
                let every = if meta.decision.events > 0 {
                    meta.decision.events
                } else {
                    DEFAULT_EVERY_EVENTS
                };
                let interval = meta.decision.seconds;
                Box::new(
                    MeanField::new(
                        sc,
                        vec![rt],
                        meta.feature_layout,
                        initial.clone(),
                        every,
                        sampling,
                    )
                    .with_interval(interval),
                )
            }
        })
    }
}

/// The baselines of docs/model.md §5 for a scenario; `best` adds `static-best`.
pub fn baselines(sc: &ResolvedScenario, best: Option<&[String]>) -> Vec<PolicySpec> {
    let reference = sc.scenario.baselines.reference_layout.clone();
    let mut v = vec![
        PolicySpec::new(
            "none",
            Scheduler::Cedf,
            LayoutSpec::Static(vec![crate::scenario::WHOLE_GPU.into()]),
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
    if let Some(best) = best {
        v.push(PolicySpec::new(
            "static-best",
            Scheduler::Cedf,
            LayoutSpec::Static(best.to_vec()),
        ));
    }
    if !sc.scenario.baselines.periodic.is_empty() {
        v.push(PolicySpec::new("periodic", Scheduler::Cedf, LayoutSpec::Periodic));
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
        scheduler,
        semantics: sc.scenario.repartition.semantics,
        seed,
        sample_every: sample,
    };
    Simulation::new(sc, &jobs.jobs, opts).run(policy)
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
    /// Mean over days of energy / E_LB − 1 (the energy lower bound of `crate::bounds`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy_above_lb: Option<f64>,
}

/// The comparison table.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Scenario name.
    pub scenario: String,
    /// Number of GPUs.
    pub gpus: usize,
    /// Mean jobs per seed.
    pub jobs: usize,
    /// Seeds of the job streams.
    pub seeds: Vec<u64>,
    /// The reference policy's name.
    pub reference: String,
    /// One entry per policy.
    pub policies: Vec<PolicySummary>,
    /// Lower bounds, means over days: `energy_wmin`, `energy_kwh`, `tardiness_min` and
    /// `tardiness_method` (`crate::bounds::summary`).
    pub bounds: Option<serde_json::Value>,
    /// Every run, for plots.
    #[serde(skip)]
    pub runs: Vec<Vec<RunResult>>,
}

/// One seed's runs of every policy and its lower bounds: what a sweep task computes.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Day {
    /// Seed of the job stream.
    pub seed: u64,
    /// Jobs in the stream.
    pub jobs: usize,
    /// One run per policy, in policy order.
    pub runs: Vec<RunResult>,
    /// The day's lower bounds.
    pub bounds: DayBounds,
}

/// Runs every policy on one seed's job stream and bounds the day.
pub fn compare_day(
    sc: &ResolvedScenario,
    policies: &[PolicySpec],
    seed: u64,
    sample: Option<f64>,
) -> Result<Day, CompareError> {
    let jobs = workload::from_scenario(sc, seed, false)?;
    let runs = policies
        .iter()
        .map(|p| run_policy(sc, &jobs, p, seed, sample))
        .collect::<Result<Vec<_>, _>>()?;
    let mut lbs = energy_day(sc, &jobs.jobs);
    match tardiness_bound(&relax(&jobs.jobs), sc.gpus.len(), &COMPARE_TARDINESS) {
        Ok(t) => lbs.tardiness = Some(t),
        // A solver failure costs one day's tardiness bound, not the comparison.
        Err(e) => log::warn!("seed {seed}: no tardiness bound: {e}"),
    }
    Ok(Day {
        seed,
        jobs: jobs.jobs.len(),
        runs,
        bounds: lbs,
    })
}

/// Runs every policy on every seed's job stream, in parallel over seeds.
pub fn compare(
    sc: &ResolvedScenario,
    policies: &[PolicySpec],
    seeds: &[u64],
    sample: Option<f64>,
    progress: &indicatif::ProgressBar,
) -> Result<Comparison, CompareError> {
    let days: Vec<Day> = seeds
        .par_iter()
        .map(|&seed| {
            let day = compare_day(sc, policies, seed, sample);
            progress.inc(1);
            day
        })
        .collect::<Result<_, CompareError>>()?;
    Ok(summarise(sc, policies, days))
}

/// The comparison table from every day's runs (days in seed order, runs in policy order).
pub fn summarise(sc: &ResolvedScenario, policies: &[PolicySpec], days: Vec<Day>) -> Comparison {
    let a = sc.scenario.objective.energy_weight;
    let ref_idx = policies.iter().position(|p| p.name == REFERENCE).unwrap_or(0);
    let seeds: Vec<u64> = days.iter().map(|d| d.seed).collect();
    let with_bounds: Vec<(usize, Vec<RunResult>, DayBounds)> =
        days.into_iter().map(|d| (d.jobs, d.runs, d.bounds)).collect();
    let day_lbs: Vec<DayBounds> = with_bounds.iter().map(|(_, _, b)| b.clone()).collect();
    let per_seed: Vec<(usize, Vec<RunResult>)> = with_bounds.into_iter().map(|(j, r, _)| (j, r)).collect();
    let n = seeds.len().max(1) as f64;
    let mean = |f: &dyn Fn(&[RunResult]) -> f64| per_seed.iter().map(|(_, r)| f(r)).sum::<f64>() / n;
    let sd = |f: &dyn Fn(&[RunResult]) -> f64| {
        let m = mean(f);
        (per_seed.iter().map(|(_, r)| (f(r) - m).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt()
    };
    let summaries = policies
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let e = |r: &[RunResult]| r[i].energy_wmin;
            let t = |r: &[RunResult]| r[i].avg_tardiness_min;
            let etf = |r: &[RunResult]| r[i].et(&r[ref_idx], a);
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
                energy_kwh: mean(&e) / crate::energy::WMIN_PER_KWH,
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
                energy_above_lb: Some(
                    per_seed
                        .iter()
                        .zip(&day_lbs)
                        .map(|((_, r), b)| r[i].energy_wmin / b.energy.energy_wmin - 1.0)
                        .sum::<f64>()
                        / n,
                ),
            }
        })
        .collect();
    Comparison {
        scenario: sc.scenario.name.clone(),
        gpus: sc.gpus.len(),
        jobs: (per_seed.iter().map(|(j, _)| *j).sum::<usize>() as f64 / n).round() as usize,
        seeds,
        reference: REFERENCE.to_string(),
        policies: summaries,
        bounds: Some(bounds::summary(&day_lbs)),
        runs: per_seed.into_iter().map(|(_, r)| r).collect(),
    }
}
