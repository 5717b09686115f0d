//! Search for the best static layout of a scenario: a multiset of configurations per GPU
//! model, found by local search on training seeds.
//!
//! GPUs of one model are interchangeable, so a layout is a count per configuration.
//! The search starts from the best uniform layout (or the paper's reference, if better)
//! and moves `step` GPUs from one configuration to another while ET improves, with the
//! step shrinking from a quarter of the GPUs to one. It is a local optimum on the
//! training seeds, not a proof of optimality.

use std::collections::HashMap;

use rayon::prelude::*;

use super::compare::{run_static, with_references};
use smartmig_sim::scenario::ResolvedScenario;
use smartmig_sim::sched::Scheduler;
use smartmig_sim::workload::{self, JobSet, TraceError};
use smartmig_sim::RunResult;

/// What the search found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TuneResult {
    /// Configuration of every GPU, in scenario order.
    pub layout: Vec<String>,
    /// Mean ET against static CEDF on the training seeds.
    pub et: f64,
    /// The paper's reference layout's ET on the same seeds (1 by definition) for context.
    pub best_uniform: (String, f64),
    /// Layouts simulated.
    pub evaluations: usize,
    /// Training seeds used.
    pub seeds: Vec<u64>,
}

type Counts = Vec<Vec<u32>>;

struct Search<'a> {
    sc: &'a ResolvedScenario,
    days: Vec<(u64, JobSet, RunResult)>,
    cache: HashMap<Counts, f64>,
}

impl Search<'_> {
    fn names(&self, counts: &Counts) -> Vec<String> {
        let mut left = counts.clone();
        self.sc
            .gpus
            .iter()
            .map(|g| {
                let row = &mut left[g.model];
                let c = row.iter().position(|&n| n > 0).unwrap_or(0);
                row[c] = row[c].saturating_sub(1);
                self.sc.models[g.model].configurations[c].name.clone()
            })
            .collect()
    }

    fn evaluate_many(&mut self, cands: Vec<Counts>) -> Vec<(Counts, f64)> {
        let todo: Vec<Counts> = cands
            .iter()
            .filter(|c| !self.cache.contains_key(*c))
            .cloned()
            .collect();
        let objective = &self.sc.scenario.objective;
        let scored: Vec<(Counts, f64)> = todo
            .into_par_iter()
            .map(|c| {
                let layout = self.names(&c);
                let et = self
                    .days
                    .iter()
                    .map(|(seed, jobs, reference)| {
                        run_static(self.sc, jobs, Scheduler::Cedf, &layout, *seed).et(reference, objective)
                    })
                    .sum::<f64>()
                    / self.days.len() as f64;
                (c, et)
            })
            .collect();
        self.cache.extend(scored);
        cands
            .into_iter()
            .map(|c| {
                let et = self.cache[&c];
                (c, et)
            })
            .collect()
    }
}

/// Searches the best static layout with CEDF on `seeds`.
pub fn tune_static(
    sc: &ResolvedScenario,
    seeds: &[u64],
    progress: &indicatif::ProgressBar,
) -> Result<TuneResult, TraceError> {
    let days = seeds
        .par_iter()
        .map(|&seed| Ok((seed, workload::from_scenario(sc, seed, false)?)))
        .collect::<Result<Vec<_>, TraceError>>()?;
    Ok(tune_static_on(sc, days, progress))
}

/// Searches the best static layout with CEDF on given job sets, each with its run seed
/// (e.g. one replayed trace).
pub fn tune_static_on(
    sc: &ResolvedScenario,
    days: Vec<(u64, JobSet)>,
    progress: &indicatif::ProgressBar,
) -> TuneResult {
    let seeds: Vec<u64> = days.iter().map(|(s, _)| *s).collect();
    let days = with_references(sc, days);
    let mut s = Search {
        sc,
        days,
        cache: HashMap::new(),
    };
    let per_model: Vec<u32> = (0..sc.models.len())
        .map(|m| sc.gpus.iter().filter(|g| g.model == m).count() as u32)
        .collect();
    let available: Vec<Vec<usize>> = sc
        .models
        .iter()
        .enumerate()
        .map(|(i, m)| {
            (0..m.configurations.len())
                .filter(|&c| sc.searchable(i, c))
                .collect()
        })
        .collect();
    let k = sc
        .models
        .iter()
        .map(|m| m.configurations.len())
        .max()
        .unwrap_or(0);
    // Every GPU of model m as configuration `pick(m)`.
    let uniform = |pick: &dyn Fn(usize) -> Option<usize>| -> Counts {
        sc.models
            .iter()
            .enumerate()
            .map(|(m, cm)| {
                let mut row = vec![0; cm.configurations.len()];
                if let Some(c) = pick(m) {
                    row[c] = per_model[m];
                }
                row
            })
            .collect()
    };
    // Uniform layouts, by configuration index, and the reference.
    let mut starts: Vec<Counts> = (0..k)
        .filter(|&c| available.iter().all(|av| av.contains(&c)))
        .map(|c| uniform(&|_| Some(c)))
        .collect();
    let mut reference_counts: Counts = sc
        .models
        .iter()
        .map(|m| vec![0; m.configurations.len()])
        .collect();
    for (g, c) in sc
        .gpus
        .iter()
        .zip(sc.layout_indices(&sc.scenario.baselines.reference_layout))
    {
        reference_counts[g.model][c] += 1;
    }
    let uniform_count = starts.len();
    // The reference starts the search where the search may lay GPUs out as it (a site's
    // `cluster.configurations` may not hold it); else each model's first such layout.
    let searchable = reference_counts
        .iter()
        .zip(&available)
        .all(|(row, av)| row.iter().enumerate().all(|(c, &n)| n == 0 || av.contains(&c)));
    starts.push(if searchable {
        reference_counts.clone()
    } else {
        uniform(&|m| available[m].first().copied())
    });
    let scored = s.evaluate_many(starts);
    progress.inc(1);
    let best_uniform = scored[..uniform_count]
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(c, et)| (s.names(c)[0].clone(), *et))
        .unwrap_or_default();
    let (mut best, mut best_et) = scored
        .into_iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((reference_counts, 1.0));
    let max_gpus = per_model.iter().copied().max().unwrap_or(1);
    let mut steps: Vec<u32> = vec![(max_gpus / 4).max(1), (max_gpus / 16).max(1), 1];
    steps.dedup();
    for &step in &steps {
        for _pass in 0..50 {
            let mut neighbours = Vec::new();
            for (m, av) in available.iter().enumerate() {
                for &from in av {
                    if best[m][from] < step {
                        continue;
                    }
                    for &to in av {
                        if to != from {
                            let mut c = best.clone();
                            c[m][from] -= step;
                            c[m][to] += step;
                            neighbours.push(c);
                        }
                    }
                }
            }
            let scored = s.evaluate_many(neighbours);
            progress.inc(1);
            match scored.into_iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
                Some((c, et)) if et < best_et - 1e-12 => {
                    best = c;
                    best_et = et;
                }
                _ => break,
            }
        }
    }
    TuneResult {
        layout: s.names(&best),
        et: best_et,
        best_uniform,
        evaluations: s.cache.len(),
        seeds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::run_reference;
    use smartmig_sim::scenario::Scenario;

    #[test]
    fn the_search_is_never_worse_than_its_starting_points() {
        let sc = Scenario::reference(&[
            "cluster.gpus=[{model=\"a100-40gb\",count=3}]".into(),
            "workload.days=0.25".into(),
            "workload.multiplier=6".into(),
            "baselines.reference_layout=[\"c1\", \"c5\", \"c12\"]".into(),
        ])
        .unwrap();
        let t = tune_static(&sc, &[1, 2], &indicatif::ProgressBar::hidden()).unwrap();
        assert_eq!(t.layout.len(), 3);
        assert!(sc.check_layout(&t.layout).is_ok());
        // The reference scores 1 by definition, and the best uniform layout was a start.
        assert!(t.et <= 1.0 + 1e-12, "{}", t.et);
        assert!(
            t.et <= t.best_uniform.1 + 1e-12,
            "{} vs {:?}",
            t.et,
            t.best_uniform
        );
        assert!(t.evaluations > 12, "the search went beyond the uniform layouts");
        // Re-scoring the result on the same days reproduces the reported ET.
        let days: Vec<_> = [1u64, 2]
            .iter()
            .map(|&s| (s, workload::from_scenario(&sc, s, false).unwrap()))
            .collect();
        let objective = &sc.scenario.objective;
        let et = days
            .iter()
            .map(|(s, j)| {
                run_static(&sc, j, Scheduler::Cedf, &t.layout, *s).et(&run_reference(&sc, j, *s), objective)
            })
            .sum::<f64>()
            / 2.0;
        assert!((et - t.et).abs() < 1e-9, "{et} vs {}", t.et);
    }

    /// A site that lays its GPUs out as a few configurations gets a layout of those, even
    /// where the reference (a start elsewhere) names others.
    #[test]
    fn the_search_keeps_to_the_sites_configurations() {
        let sc = Scenario::reference(&[
            "cluster.gpus=[{model=\"a100-40gb\",count=3}]".into(),
            "workload.days=0.25".into(),
            "workload.multiplier=6".into(),
            "cluster.configurations=[\"c1\", \"c7\"]".into(),
        ])
        .unwrap();
        let t = tune_static(&sc, &[1], &indicatif::ProgressBar::hidden()).unwrap();
        assert!(t.layout.iter().all(|c| c == "c1" || c == "c7"), "{:?}", t.layout);
    }
}
