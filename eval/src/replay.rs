//! A what-if on a site's own history: the jobs of a `sacct` dump as they ran, the same
//! jobs under the best static layout and under a learned policy, and the lower bounds.
//!
//! What sacct records is used as measured: submit, start and end times, and the slice
//! each job held. Everything else is inferred, and [`Replay::inferred`] says how:
//! - **Per-slice times**: a job whose `Comment` names a known class
//!   (`smartmig:class=NAME`: a built-in class or a `[[routing.class]]` of the given
//!   smartmig.toml) gets that class's speed-up curve, scaled to its run time on the slice
//!   it held; any other job gets the sacct reader's conservative share model (no saving
//!   on a smaller slice than its history shows, see `workload::sacct`).
//! - **Deadlines**: the reader's, `min(Timelimit, 1.25 × the run time as ran)` after submit.
//! - **As-ran energy**: sacct does not say which GPU a slice was on, so the cluster's draw
//!   is bracketed by packing the busy compute slices onto as few GPUs as possible (slices
//!   of one job may be split: with a concave power curve no placement draws less) and by
//!   spreading the running jobs, each whole on one GPU and within its compute and memory
//!   slices, largest first onto the least busy GPU (a placement MIG allows); the estimate
//!   is the middle of that range. Power comes from the model catalogue's curve, not from
//!   a meter.

use std::path::PathBuf;

use rayon::prelude::*;
use serde::Serialize;

use super::compare::{run_policy, run_static, LayoutSpec, PolicySpec, STATIC_BEST};
use super::tune::tune_static_on;
use smartmig_bounds::{energy_day, relax, tardiness_bound, COMPARE_TARDINESS};
use smartmig_core::routing::JobClass;
use smartmig_policy::RuntimeError;
use smartmig_sim::metrics::Objective;
use smartmig_sim::scenario::ResolvedScenario;
use smartmig_sim::sched::Scheduler;
use smartmig_sim::workload::sacct::Ran;
use smartmig_sim::workload::{size_index, JobSet, ReadStats, SLICE_SIZES};
use smartmig_sim::RunResult;

/// A replay that cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The dump needs more GPUs than the scenario's cluster has.
    #[error(
        "{source_name}: up to {peak} compute slices were busy at once, more than the scenario's \
         {gpus} GPUs hold ({capacity}); describe the cluster with --set cluster.gpus=[...]"
    )]
    ClusterTooSmall {
        /// The dump.
        source_name: String,
        /// Most busy compute slices at one time.
        peak: u32,
        /// GPUs of the scenario.
        gpus: usize,
        /// Their compute slices.
        capacity: u32,
    },
}

/// The as-ran schedule's metrics.
#[derive(Debug, Clone, Serialize)]
pub struct AsRan {
    /// Estimated energy (middle of the placement range), W·min.
    pub energy_wmin: f64,
    /// Least energy of any placement (busy slices packed), W·min.
    pub energy_wmin_low: f64,
    /// Most energy of any placement (busy slices spread), W·min.
    pub energy_wmin_high: f64,
    /// Mean over jobs of max(end − deadline, 0), minutes.
    pub avg_tardiness_min: f64,
    /// Last end, minutes after the first submit.
    pub makespan_min: f64,
    /// Most compute slices busy at one time.
    pub peak_busy_slices: u32,
    /// Busy slice-minutes on 1g, 2g, 3g, 4g, 7g slices.
    pub slice_minutes: [f64; 5],
}

/// One simulated column of the what-if.
#[derive(Debug, Clone, Serialize)]
pub struct Column {
    /// `static-best` or `smart-mig`.
    pub name: String,
    /// The static layout, for `static-best`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<Vec<String>>,
    /// Energy, W·min.
    pub energy_wmin: f64,
    /// Mean tardiness, minutes.
    pub avg_tardiness_min: f64,
    /// ET against the as-ran schedule (energy weight of the scenario).
    pub et_vs_as_ran: f64,
    /// Last completion, minutes.
    pub makespan_min: f64,
    /// Configuration changes.
    pub repartitions: u64,
    /// Busy over available compute-slice time.
    pub utilisation: f64,
    /// Share of GPU time per configuration.
    pub config_share: Vec<(String, f64)>,
    /// Share of compute-slice capacity on 1g, 2g, 3g, 4g, 7g slices.
    pub slice_capacity_share: [f64; 5],
}

impl Column {
    fn new(
        name: &str,
        layout: Option<Vec<String>>,
        r: &RunResult,
        sc: &ResolvedScenario,
        as_ran: &AsRan,
    ) -> Column {
        let objective = Objective::new(&sc.scenario.objective, r.mean_full_gpu_min);
        Column {
            name: name.to_string(),
            layout,
            energy_wmin: r.energy_wmin,
            avg_tardiness_min: r.avg_tardiness_min,
            et_vs_as_ran: objective.et(
                r.energy_wmin,
                r.avg_tardiness_min,
                as_ran.energy_wmin,
                as_ran.avg_tardiness_min,
            ),
            makespan_min: r.makespan_min,
            repartitions: r.repartitions,
            utilisation: r.utilisation,
            config_share: r.config_share.clone(),
            slice_capacity_share: capacity_share(sc, &r.config_share),
        }
    }
}

/// Lower bounds for the replayed jobs on the scenario's cluster.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayBounds {
    /// Energy lower bound, W·min.
    pub energy_wmin: f64,
    /// Mean tardiness lower bound, minutes (None when the solver failed).
    pub tardiness_min: Option<f64>,
    /// How the tardiness bound was obtained.
    pub tardiness_method: Option<String>,
}

/// One inferred (or measured) quantity and how far to trust it.
#[derive(Debug, Clone, Serialize)]
pub struct Inferred {
    /// What.
    pub quantity: String,
    /// Where it comes from.
    pub source: String,
    /// `measured`, `high`, `medium` or `low`.
    pub confidence: &'static str,
}

/// The whole what-if.
#[derive(Debug, Clone, Serialize)]
pub struct Replay {
    /// The dump.
    pub source: String,
    /// Scenario (the cluster) name.
    pub scenario: String,
    /// GPUs of the cluster.
    pub gpus: usize,
    /// Data rows of the dump.
    pub rows: u64,
    /// Jobs replayed.
    pub jobs: usize,
    /// Rows left out, by reason.
    pub skipped: Vec<(String, u64)>,
    /// Jobs per source of their per-slice times: a class name, or `share model`.
    pub speedup_sources: Vec<(String, usize)>,
    /// Jobs whose deadline is their `Timelimit` (the rest: the 1.25 slack).
    pub deadline_from_timelimit: usize,
    /// Energy weight of ET.
    pub energy_weight: f64,
    /// The jobs as they ran.
    pub as_ran: AsRan,
    /// Simulated columns (static-best, and smart-mig when a model was usable).
    pub columns: Vec<Column>,
    /// Why there is no smart-mig column, if there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smart_mig_missing: Option<String>,
    /// Lower bounds.
    pub bounds: ReplayBounds,
    /// What is measured and what inferred, with confidence.
    pub inferred: Vec<Inferred>,
    /// Seed of the simulated runs.
    pub seed: u64,
    /// Runs with time series, for plots: static-best, then smart-mig.
    #[serde(skip)]
    pub runs: Vec<RunResult>,
}

/// What [`replay`] takes.
#[derive(Debug, Clone)]
pub struct ReplayInput {
    /// Name of the dump in reports and errors.
    pub source: String,
    /// Jobs from the reader.
    pub jobs: JobSet,
    /// How they ran (`runs[i]` for `jobs.jobs[i]`).
    pub runs: Vec<Ran>,
    /// Reader statistics.
    pub stats: ReadStats,
    /// Classes whose curves apply to labelled jobs.
    pub classes: Vec<JobClass>,
    /// Learned policy for the smart-mig column, or why there is none.
    pub model: Result<PathBuf, String>,
    /// Seed of the simulated runs.
    pub seed: u64,
    /// Sampling interval for time series (minutes), when plots are wanted.
    pub sample_every: Option<f64>,
}

/// Replaces the per-slice times of jobs labelled with a known class by that class's
/// curve through their as-ran time; returns jobs per source of their times.
pub fn apply_class_curves(jobs: &mut JobSet, runs: &[Ran], classes: &[JobClass]) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    let labels = jobs.classes.clone();
    for (job, ran) in jobs.jobs.iter_mut().zip(runs) {
        let label = labels
            .get(usize::from(job.class))
            .map(String::as_str)
            .unwrap_or("");
        let source = match classes.iter().find(|c| c.name == label) {
            Some(class) => {
                let held = ran.end - ran.start;
                let s0 = class.speedup_on(ran.slices);
                job.times = SLICE_SIZES.map(|k| held * s0 / class.speedup_on(k));
                class.name.clone()
            }
            None => "share model".to_string(),
        };
        match counts.iter_mut().find(|(s, _)| *s == source) {
            Some((_, n)) => *n += 1,
            None => counts.push((source, 1)),
        }
    }
    counts
}

/// Power of a cluster with `busy` compute slices packed onto as few GPUs as possible
/// (a job's slices may be split: no placement draws less), W; GPUs in scenario order.
fn packed_power(curves: &[&[f64]], busy: u32) -> f64 {
    let mut packed = 0.0;
    let mut left = busy;
    for c in curves {
        let b = left.min(c.len() as u32 - 1);
        packed += c[b as usize];
        left -= b;
    }
    packed
}

/// Memory slices a GPU instance of `compute` compute slices takes on a GPU of `cap`
/// compute slices (docs/model.md §1): the 7-slice models have 8 memory slices and give
/// 3g and 4g half the memory; on the others memory follows compute.
fn memory_of(compute: u8, cap: u8) -> u8 {
    match (cap, compute) {
        (7, 3 | 4) => 4,
        (7, 7) => 8,
        _ => compute,
    }
}

/// Power of a cluster running jobs of the given slice sizes (`running[i]` jobs on slices
/// of `SLICE_SIZES[i]`), each whole on one GPU, spread: largest first onto the least busy
/// GPU where its compute and memory slices fit, W.
fn spread_power(curves: &[&[f64]], running: &[u32; 5]) -> f64 {
    let cap = |g: usize| (curves[g].len() - 1).min(7) as u8;
    let memory = |g: usize| if cap(g) == 7 { 8 } else { cap(g) };
    // (busy compute, used memory) per GPU.
    let mut gpus = vec![(0u8, 0u8); curves.len()];
    for (i, &k) in SLICE_SIZES.iter().enumerate().rev() {
        for _ in 0..running[i] {
            let fits = |g: usize| {
                let (b, m) = gpus[g];
                b + k <= cap(g) && m + memory_of(k, cap(g)) <= memory(g)
            };
            // As ran, the jobs fitted; if spreading left no room, fall back to the least busy.
            let pick = (0..gpus.len())
                .filter(|&g| fits(g))
                .min_by_key(|&g| gpus[g].0)
                .or_else(|| (0..gpus.len()).min_by_key(|&g| gpus[g].0));
            if let Some(g) = pick {
                gpus[g].0 = (gpus[g].0 + k).min(cap(g));
                gpus[g].1 = (gpus[g].1 + memory_of(k, cap(g))).min(memory(g));
            }
        }
    }
    curves.iter().zip(&gpus).map(|(c, &(b, _))| c[b as usize]).sum()
}

/// Measures the as-ran schedule on the scenario's cluster.
pub fn as_ran(
    sc: &ResolvedScenario,
    source: &str,
    jobs: &JobSet,
    runs: &[Ran],
) -> Result<AsRan, ReplayError> {
    let curves: Vec<&[f64]> = sc
        .gpus
        .iter()
        .map(|g| sc.models[g.model].model.power_w.as_slice())
        .collect();
    let capacity = sc.total_slices();
    // Ends before starts at equal times, so back-to-back jobs do not overlap.
    let mut events: Vec<(f64, i64)> = runs
        .iter()
        .flat_map(|r| [(r.start, i64::from(r.slices)), (r.end, -i64::from(r.slices))])
        .collect();
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let makespan = runs.iter().map(|r| r.end).fold(0.0, f64::max);
    let (mut low, mut high) = (0.0, 0.0);
    let (mut t, mut busy, mut peak) = (0.0, 0i64, 0u32);
    let mut running = [0u32; 5];
    // Days repeat the same mixes of running jobs: place each mix once.
    let mut spread_of: std::collections::HashMap<[u32; 5], f64> = std::collections::HashMap::new();
    for (at, delta) in events {
        let p_high = *spread_of
            .entry(running)
            .or_insert_with(|| spread_power(&curves, &running));
        low += packed_power(&curves, busy as u32) * (at - t);
        high += p_high * (at - t);
        t = at;
        busy += delta;
        let size = size_index(delta.unsigned_abs().min(7) as u8);
        if delta > 0 {
            running[size] += 1;
        } else {
            running[size] = running[size].saturating_sub(1);
        }
        peak = peak.max(busy as u32);
    }
    if peak > capacity {
        return Err(ReplayError::ClusterTooSmall {
            source_name: source.to_string(),
            peak,
            gpus: sc.gpus.len(),
            capacity,
        });
    }
    let mut slice_minutes = [0.0; 5];
    for r in runs {
        slice_minutes[size_index(r.slices)] += f64::from(r.slices) * (r.end - r.start);
    }
    let n = jobs.jobs.len().max(1) as f64;
    let tardiness = jobs
        .jobs
        .iter()
        .zip(runs)
        .map(|(j, r)| (r.end - j.deadline).max(0.0))
        .sum::<f64>()
        / n;
    Ok(AsRan {
        energy_wmin: (low + high) / 2.0,
        energy_wmin_low: low,
        energy_wmin_high: high,
        avg_tardiness_min: tardiness,
        makespan_min: makespan,
        peak_busy_slices: peak,
        slice_minutes,
    })
}

/// Share of compute-slice capacity per slice size from a run's configuration shares.
fn capacity_share(sc: &ResolvedScenario, shares: &[(String, f64)]) -> [f64; 5] {
    let mut cap = [0.0; 5];
    for (name, share) in shares {
        let (model, config) = match name.split_once('/') {
            Some((m, c)) => (sc.models.iter().find(|x| x.model.key == m), c),
            None => (sc.models.first(), name.as_str()),
        };
        let Some(c) = model.and_then(|m| m.configurations.iter().find(|c| c.name == config)) else {
            continue;
        };
        for &s in &c.sizes {
            cap[size_index(s)] += share * f64::from(s);
        }
    }
    let total: f64 = cap.iter().sum();
    if total > 0.0 {
        cap.iter_mut().for_each(|x| *x /= total);
    }
    cap
}

/// Runs the what-if.
pub fn replay(
    sc: &ResolvedScenario,
    mut input: ReplayInput,
    progress: &indicatif::ProgressBar,
) -> Result<Replay, ReplayError> {
    let deadline_from_timelimit = input
        .jobs
        .jobs
        .iter()
        .zip(&input.runs)
        .filter(|(j, r)| {
            j.deadline - j.release < smartmig_sim::workload::DEADLINE_SLACK * (r.end - r.start) - 1e-9
        })
        .count();
    let speedup_sources = apply_class_curves(&mut input.jobs, &input.runs, &input.classes);
    let as_ran = as_ran(sc, &input.source, &input.jobs, &input.runs)?;
    let jobs = &input.jobs;
    let tuned = tune_static_on(sc, vec![(input.seed, jobs.clone())], progress);
    let mut specs = vec![PolicySpec::new(
        STATIC_BEST,
        Scheduler::Cedf,
        LayoutSpec::Static(tuned.layout.clone()),
    )];
    if let Ok(model) = &input.model {
        specs.push(PolicySpec::new(
            "smart-mig",
            Scheduler::Cedf,
            LayoutSpec::MeanField {
                model: model.clone(),
                initial: tuned.layout.clone(),
                stay_threshold: 0.0,
            },
        ));
    }
    let results: Vec<Result<RunResult, RuntimeError>> = specs
        .par_iter()
        .map(|p| run_policy(sc, jobs, p, input.seed, input.sample_every))
        .collect();
    let mut runs = Vec::new();
    let mut smart_mig_missing = input.model.as_ref().err().cloned();
    for (p, r) in specs.iter().zip(results) {
        match r {
            Ok(r) => runs.push(r),
            // Only the learned policy can fail to load; the report says why it is absent.
            Err(e) => smart_mig_missing = Some(format!("{}: {:#}", p.name, anyhow::Error::new(e))),
        }
    }
    if runs.is_empty() {
        // The static run cannot fail to load; keep the report whole anyway.
        runs.push(run_static(sc, jobs, Scheduler::Cedf, &tuned.layout, input.seed));
    }
    let columns = runs
        .iter()
        .map(|r| {
            let layout = (r.policy == STATIC_BEST).then(|| tuned.layout.clone());
            Column::new(&r.policy, layout, r, sc, &as_ran)
        })
        .collect();
    let energy = energy_day(sc, &jobs.jobs);
    let tardiness = match tardiness_bound(&relax(&jobs.jobs), sc.gpus.len(), &COMPARE_TARDINESS) {
        Ok(t) => Some(t),
        Err(e) => {
            log::warn!("{}: no tardiness bound: {e}", input.source);
            None
        }
    };
    let bounds = ReplayBounds {
        energy_wmin: energy.energy.energy_wmin,
        tardiness_min: tardiness.as_ref().map(|t| t.avg_tardiness_min),
        tardiness_method: tardiness.map(|t| t.method),
    };
    let inferred = inferred(
        jobs.jobs.len(),
        &speedup_sources,
        deadline_from_timelimit,
        &as_ran,
    );
    Ok(Replay {
        source: input.source,
        scenario: sc.scenario.name.clone(),
        gpus: sc.gpus.len(),
        rows: input.stats.rows,
        jobs: jobs.jobs.len(),
        skipped: input
            .stats
            .skipped
            .iter()
            .map(|(r, n)| (r.label().to_string(), *n))
            .collect(),
        speedup_sources,
        deadline_from_timelimit,
        energy_weight: sc.scenario.objective.energy_weight,
        as_ran,
        columns,
        smart_mig_missing,
        bounds,
        inferred,
        seed: input.seed,
        runs,
    })
}

fn inferred(jobs: usize, sources: &[(String, usize)], from_limit: usize, a: &AsRan) -> Vec<Inferred> {
    let share = sources
        .iter()
        .find(|(s, _)| s == "share model")
        .map_or(0, |(_, n)| *n);
    let classed = jobs - share;
    let spread = if a.energy_wmin > 0.0 {
        100.0 * (a.energy_wmin_high - a.energy_wmin_low) / 2.0 / a.energy_wmin
    } else {
        0.0
    };
    let item = |q: &str, s: String, c: &'static str| Inferred {
        quantity: q.into(),
        source: s,
        confidence: c,
    };
    vec![
        item(
            "jobs, submit/start/end times, slice held",
            "sacct, one-second resolution".into(),
            "measured",
        ),
        item(
            "as-ran tardiness",
            format!(
                "end − deadline; deadline = Timelimit for {from_limit} of {jobs} jobs, 1.25 × run time as ran for the rest (Slurm records no soft deadline)"
            ),
            if from_limit * 2 >= jobs { "medium" } else { "low" },
        ),
        item(
            "as-ran energy",
            format!(
                "catalogue power curve over busy slice-minutes; which GPU each slice was on is unknown: ±{spread:.1}% between packed and spread placements"
            ),
            if spread < 5.0 { "high" } else { "medium" },
        ),
        item(
            "per-slice speed-ups",
            format!(
                "class curve for {classed} jobs labelled with a known class; conservative share model (no gain on smaller slices) for {share}"
            ),
            if classed * 2 >= jobs { "medium" } else { "low" },
        ),
        item(
            "static-best and smart-mig energy and tardiness",
            "simulated on the inferred jobs; static-best is searched on this same history (in-sample, so optimistic)".into(),
            "medium",
        ),
        item(
            "lower bounds",
            "exact for the inferred jobs under the bounds' relaxations; as good as the per-slice times".into(),
            "high",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartmig_sim::scenario::Scenario;
    use smartmig_sim::workload::sacct::read_sacct_runs;

    const DUMP: &str = "JobID|Submit|Start|End|State|AllocTRES|Timelimit|Comment\n\
        1|2026-11-30T00:00:00|2026-11-30T00:00:00|2026-11-30T01:00:00|COMPLETED|gres/gpu:3g.20gb=1|02:00:00|\n\
        2|2026-11-30T00:10:00|2026-11-30T00:30:00|2026-11-30T01:30:00|COMPLETED|gres/gpu:1g.5gb=1|00:40:00|smartmig:class=bert-train\n\
        2.batch|2026-11-30T00:10:00|2026-11-30T00:30:00|2026-11-30T01:30:00|COMPLETED|gres/gpu:1g.5gb=1||\n\
        3|2026-11-30T00:20:00|2026-11-30T00:20:00|2026-11-30T00:50:00|COMPLETED|gres/gpu=1|UNLIMITED|\n";

    fn cluster(gpus: u32) -> ResolvedScenario {
        Scenario::reference(&[
            format!("cluster.gpus=[{{model=\"a100-40gb\",count={gpus}}}]"),
            "baselines.reference_layout=[\"c1\"]".into(),
            "baselines.static_best=[\"c1\"]".into(),
        ])
        .unwrap()
    }

    fn input() -> (JobSet, ReadStats, Vec<Ran>) {
        read_sacct_runs(DUMP.as_bytes(), "dump", false).unwrap()
    }

    #[test]
    fn as_ran_energy_and_tardiness_follow_the_busy_slices_and_deadlines() {
        let sc = cluster(2);
        let (jobs, _, runs) = input();
        assert_eq!(runs.len(), 3);
        let a = as_ran(&sc, "dump", &jobs, &runs).unwrap();
        let p = &sc.models[0].model.power_w;
        // Minutes 0–20: 3 slices; 20–30: 3+7; 30–50: 3+7+1; 50–60: 3+1; 60–90: 1.
        let packed = 20.0 * (p[3] + p[0])
            + 10.0 * (p[7] + p[3])
            + 20.0 * (p[7] + p[4])
            + 10.0 * (p[4] + p[0])
            + 30.0 * (p[1] + p[0]);
        // Spread keeps each job whole: the 7g job fills one GPU, the others share the second.
        let spread = 20.0 * (p[3] + p[0])
            + 10.0 * (p[7] + p[3])
            + 20.0 * (p[7] + p[4])
            + 10.0 * (p[3] + p[1])
            + 30.0 * (p[1] + p[0]);
        assert!(
            (a.energy_wmin_low - packed).abs() < 1e-6,
            "{} vs {packed}",
            a.energy_wmin_low
        );
        assert!(
            (a.energy_wmin_high - spread).abs() < 1e-6,
            "{} vs {spread}",
            a.energy_wmin_high
        );
        assert_eq!(a.peak_busy_slices, 11);
        assert_eq!(a.makespan_min, 90.0);
        // Job 2: deadline 10 + 40 (its limit), ended at 90: 40 late. Job 1: limit 120 >
        // 1.25 × 60, ends 60 ≤ 75. Job 3: 20 + 37.5, ended 50.
        assert!(
            (a.avg_tardiness_min - 40.0 / 3.0).abs() < 1e-9,
            "{}",
            a.avg_tardiness_min
        );
        assert_eq!(a.slice_minutes, [60.0, 0.0, 180.0, 0.0, 210.0]);
    }

    #[test]
    fn spreading_never_splits_a_job_or_overfills_a_gpus_memory() {
        let p = cluster(2).models[0].model.power_w.clone();
        let curves = [p.as_slice(), p.as_slice()];
        // Two 3g jobs and a 1g: 3+3 fills a GPU's memory, so the 1g goes beside neither
        // 3g on a full-memory GPU: {3g} and {3g, 1g}.
        assert!((spread_power(&curves, &[1, 0, 2, 0, 0]) - (p[3] + p[4])).abs() < 1e-9);
        // One 7g job: one GPU busy, one idle, as packed.
        assert!((spread_power(&curves, &[0, 0, 0, 0, 1]) - packed_power(&curves, 7)).abs() < 1e-9);
    }

    #[test]
    fn an_unchanged_schedule_replays_as_no_gain() {
        // One whole-GPU job on one GPU, on time: static-best runs it the same way.
        let dump = "JobID|Submit|Start|End|State|AllocTRES|Timelimit|Comment\n\
            1|2026-11-30T00:00:00|2026-11-30T00:00:00|2026-11-30T01:00:00|COMPLETED|gres/gpu=1|02:00:00|\n";
        let (jobs, stats, runs) = read_sacct_runs(dump.as_bytes(), "one", false).unwrap();
        let r = replay(
            &cluster(1),
            ReplayInput {
                source: "one".into(),
                jobs,
                runs,
                stats,
                classes: smartmig_core::routing::builtin_classes(),
                model: Err("none".into()),
                seed: 1,
                sample_every: None,
            },
            &indicatif::ProgressBar::hidden(),
        )
        .unwrap();
        assert_eq!(
            r.as_ran.energy_wmin_low, r.as_ran.energy_wmin_high,
            "one placement only"
        );
        assert_eq!(r.as_ran.avg_tardiness_min, 0.0);
        let best = &r.columns[0];
        assert_eq!(best.avg_tardiness_min, 0.0);
        assert!((best.et_vs_as_ran - 1.0).abs() < 1e-9, "{}", best.et_vs_as_ran);
    }

    #[test]
    fn a_cluster_too_small_for_the_history_is_refused_with_the_numbers() {
        let (jobs, _, runs) = input();
        let e = as_ran(&cluster(1), "dump", &jobs, &runs).unwrap_err().to_string();
        assert!(
            e.starts_with("dump: up to 11 compute slices were busy at once"),
            "{e}"
        );
        assert!(e.contains("1 GPUs hold (7)"), "{e}");
    }

    #[test]
    fn a_known_class_gets_its_curve_through_the_time_it_ran() {
        let (mut jobs, _, runs) = input();
        let classes = smartmig_core::routing::builtin_classes();
        let sources = apply_class_curves(&mut jobs, &runs, &classes);
        assert_eq!(
            sources,
            vec![("share model".to_string(), 2), ("bert-train".to_string(), 1)]
        );
        let j = &jobs.jobs[1];
        assert_eq!(jobs.classes[usize::from(j.class)], "bert-train");
        // 60 min on 1g; bert-train runs 4.773× faster on 7g.
        assert!((j.times[0] - 60.0).abs() < 1e-9);
        assert!((j.times[4] - 60.0 / 4.773).abs() < 1e-9, "{:?}", j.times);
    }

    #[test]
    fn the_what_if_stays_above_its_bounds_and_skips_a_missing_model() {
        let sc = cluster(2);
        let (jobs, stats, runs) = input();
        let r = replay(
            &sc,
            ReplayInput {
                source: "dump".into(),
                jobs,
                runs,
                stats,
                classes: smartmig_core::routing::builtin_classes(),
                model: Err("no shipped model".into()),
                seed: 1,
                sample_every: None,
            },
            &indicatif::ProgressBar::hidden(),
        )
        .unwrap();
        assert_eq!(r.jobs, 3);
        assert_eq!(r.rows, 4);
        assert_eq!(r.deadline_from_timelimit, 1);
        assert_eq!(r.columns.len(), 1);
        assert_eq!(r.smart_mig_missing.as_deref(), Some("no shipped model"));
        let s = &r.columns[0];
        assert!(s.energy_wmin >= r.bounds.energy_wmin - 1e-6);
        assert!(r.as_ran.energy_wmin_low >= r.bounds.energy_wmin - 1e-6);
        if let Some(t) = r.bounds.tardiness_min {
            assert!(s.avg_tardiness_min >= t - 1e-6);
        }
        assert!((s.slice_capacity_share.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    }
}
