//! Search for the best time-of-day schedule of a scenario: the day cut into equal blocks,
//! each with its own layout, found by coordinate descent on training days.
//!
//! A layout is, per GPU model, a count per configuration over a pattern of that model's
//! GPUs: whole nodes (`cluster.gpus_per_node`, or all its GPUs when fewer; on nodes of
//! fewer than 8 GPUs, as many whole nodes as cover 8), cycled over the model's GPUs as
//! smartmigd cycles `[[policy.periodic]]` layouts, so a schedule found on one node applies
//! to any number of them. (On a cluster of several models nodes are cut from the GPUs in
//! cluster order, so a model's pattern need not be whole nodes.) The search starts with
//! every block in the best static layout and, block by block, tries moving one GPU of a
//! model from one configuration to another (under Slurm 22.05's drain rule also two at
//! once keeping the instance count, of one model or of two models sharing a node, so the
//! node need not drain whole) and copying a neighbouring block's layout (which merges blocks and saves
//! re-layouts), keeping the best move while mean ET on the training days improves. Every
//! candidate runs through the simulator under the scenario's semantics and re-layout
//! limits, so what the search finds is what smartmigd can deliver. It is a local optimum,
//! not a proof of optimality.

use std::collections::HashMap;

use rayon::prelude::*;

use super::compare::{run_policy, with_references, LayoutSpec, PolicySpec, PERIODIC_BEST};
use smartmig_sim::partition::DAY_MIN;
use smartmig_sim::scenario::{NodeRule, PeriodicSpec, ResolvedScenario, Semantics};
use smartmig_sim::sched::Scheduler;
use smartmig_sim::workload::JobSet;
use smartmig_sim::RunResult;

/// Blocks of the day by default: every 4 h.
pub const DEFAULT_BLOCKS: u32 = 6;
/// Most passes over the blocks by default.
pub const DEFAULT_PASSES: u32 = 10;

/// Why a schedule cannot be searched.
#[derive(Debug, thiserror::Error)]
pub enum PeriodicTuneError {
    /// Blocks that do not cut the day into whole minutes.
    #[error("--blocks {0}: must be between 1 and 48 and divide the day's 1,440 minutes")]
    Blocks(u32),
    /// The starting layout is not one the scenario's GPUs can take.
    #[error("starting layout: {0}")]
    Start(String),
}

/// What the search found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PeriodicTuneResult {
    /// The schedule, adjacent equal blocks merged: ready for `[[policy.periodic]]`.
    pub schedule: Vec<PeriodicSpec>,
    /// Mean ET against static CEDF on the training days.
    pub et: f64,
    /// The starting (static) layout's mean ET on the same days.
    pub start_et: f64,
    /// The starting layout (the search's pattern: whole nodes' GPUs; on several GPU
    /// models every GPU, each model's pattern cycled over its GPUs).
    pub start: Vec<String>,
    /// GPUs in each model's pattern, in the scenario's model order.
    pub pattern_gpus: Vec<usize>,
    /// Whether `start` holds the static layout's mix in its proportions (else it is its
    /// nearest share, and `start_et` is that share's ET, not the static layout's).
    pub start_exact: bool,
    /// Mean re-layout batches per training day.
    pub relayout_batches: f64,
    /// Schedules simulated.
    pub evaluations: usize,
    /// Passes over the blocks.
    pub passes: u32,
    /// Training days (seeds).
    pub seeds: Vec<u64>,
}

/// One block's layout: per GPU model, GPUs of its pattern per configuration.
type Layout = Vec<Vec<u32>>;
/// A schedule: one layout per block.
type Blocks = Vec<Layout>;

struct Search<'a> {
    sc: &'a ResolvedScenario,
    days: Vec<(u64, JobSet, RunResult)>,
    cache: HashMap<Blocks, (f64, f64)>,
    block_min: f64,
}

/// A layout as the scenario's configuration names: one model's pattern as it is (the
/// scenario cycles it over the cluster); with several models, each model's pattern
/// cycled over its GPUs in cluster order, since the scenario cycles one list over all of
/// them.
fn layout_names(sc: &ResolvedScenario, layout: &Layout) -> Vec<String> {
    let patterns: Vec<Vec<&str>> = layout
        .iter()
        .zip(&sc.models)
        .map(|(counts, m)| {
            counts
                .iter()
                .zip(&m.configurations)
                .flat_map(|(&n, c)| std::iter::repeat_n(c.name.as_str(), n as usize))
                .collect()
        })
        .collect();
    if let [one] = patterns.as_slice() {
        return one.iter().map(|n| n.to_string()).collect();
    }
    let mut seen = vec![0; patterns.len()];
    sc.gpus
        .iter()
        .map(|g| {
            let p = &patterns[g.model];
            seen[g.model] += 1;
            p[(seen[g.model] - 1) % p.len()].to_string()
        })
        .collect()
}

impl Search<'_> {
    /// Adjacent equal blocks merged into schedule entries.
    fn schedule(&self, blocks: &Blocks) -> Vec<PeriodicSpec> {
        let mut out: Vec<PeriodicSpec> = Vec::new();
        let mut last: Option<&Layout> = None;
        for (b, counts) in blocks.iter().enumerate() {
            if last == Some(counts) {
                continue;
            }
            last = Some(counts);
            let minute = (b as f64 * self.block_min).round() as u32;
            out.push(PeriodicSpec {
                at: format!("{:02}:{:02}", minute / 60, minute % 60),
                layout: layout_names(self.sc, counts),
            });
        }
        out
    }

    /// Mean (ET, re-layout batches) of each candidate over the training days.
    fn evaluate_many(&mut self, cands: Vec<Blocks>) -> Vec<(Blocks, f64)> {
        let todo: Vec<Blocks> = cands
            .iter()
            .filter(|c| !self.cache.contains_key(*c))
            .cloned()
            .collect();
        let objective = &self.sc.scenario.objective;
        let scored: Vec<(Blocks, (f64, f64))> = todo
            .into_par_iter()
            .map(|c| {
                let spec = PolicySpec::new(
                    PERIODIC_BEST,
                    Scheduler::Cedf,
                    LayoutSpec::Periodic(self.schedule(&c)),
                );
                let n = self.days.len() as f64;
                let (et, batches) = self
                    .days
                    .iter()
                    .fold((0.0, 0.0), |(et, b), (seed, jobs, reference)| {
                        // A schedule policy has no file to load: running it cannot fail.
                        match run_policy(self.sc, jobs, &spec, *seed, None) {
                            Ok(r) => (et + r.et(reference, objective), b + r.relayout_batches as f64),
                            Err(_) => (f64::INFINITY, b),
                        }
                    });
                (c, (et / n, batches / n))
            })
            .collect();
        self.cache.extend(scored);
        cands
            .into_iter()
            .map(|c| {
                let et = self.cache[&c].0;
                (c, et)
            })
            .collect()
    }
}

/// Slurm 22.05's node rule as the search keeps it where a count change drains the whole
/// node: each model's configurations' instance counts, and the pairs of models whose GPUs
/// share a node.
struct CountRule {
    instances: Vec<Vec<usize>>,
    shared: Vec<(usize, usize)>,
}

impl CountRule {
    /// The rule on `sc`'s nodes (`cluster.gpus_per_node` GPUs each, in cluster order).
    fn of(sc: &ResolvedScenario) -> CountRule {
        let per_node = sc.scenario.cluster.gpus_per_node.max(1) as usize;
        let mut shared = Vec::new();
        for node in sc.gpus.chunks(per_node) {
            for (i, a) in node.iter().enumerate() {
                for b in &node[i + 1..] {
                    let pair = (a.model.min(b.model), a.model.max(b.model));
                    if pair.0 != pair.1 && !shared.contains(&pair) {
                        shared.push(pair);
                    }
                }
            }
        }
        CountRule {
            instances: sc
                .models
                .iter()
                .map(|m| m.configurations.iter().map(|c| c.sizes.len()).collect())
                .collect(),
            shared,
        }
    }
}

/// The candidates of one block: one GPU of a model moved between its configurations
/// (`available`, per model), or a neighbour's layout; with `count` (when Slurm 22.05's
/// node rule makes a count change drain the whole node), also two GPUs moved at once
/// keeping the node's instance count: of one model, or of two models sharing a node.
fn neighbours(best: &Blocks, b: usize, available: &[Vec<usize>], count: Option<&CountRule>) -> Vec<Blocks> {
    let mut out = Vec::new();
    // Each model's moves (from, to) of one GPU.
    let moves: Vec<Vec<(usize, usize)>> = available
        .iter()
        .enumerate()
        .map(|(m, available)| {
            let here = &best[b][m];
            available
                .iter()
                .filter(|&&from| here[from] > 0)
                .flat_map(|&from| {
                    available
                        .iter()
                        .filter(move |&&to| to != from)
                        .map(move |&to| (from, to))
                })
                .collect()
        })
        .collect();
    let moved = |steps: &[(usize, (usize, usize))]| {
        let mut c = best.clone();
        for &(m, (from, to)) in steps {
            c[b][m][from] -= 1;
            c[b][m][to] += 1;
        }
        c
    };
    for (m, moves) in moves.iter().enumerate() {
        out.extend(moves.iter().map(|&step| moved(&[(m, step)])));
    }
    if let Some(rule) = count {
        let delta = |m: usize, (from, to): (usize, usize)| {
            rule.instances[m][to] as i64 - rule.instances[m][from] as i64
        };
        let keeps = |m1: usize, s1: (usize, usize), m2: usize, s2: (usize, usize)| {
            delta(m1, s1) != 0 && delta(m1, s1) + delta(m2, s2) == 0
        };
        for (m, moves) in moves.iter().enumerate() {
            let here = &best[b][m];
            for (i, &m1) in moves.iter().enumerate() {
                for &m2 in &moves[i + 1..] {
                    let room = m1.0 != m2.0 || here[m1.0] >= 2;
                    if keeps(m, m1, m, m2) && room {
                        out.push(moved(&[(m, m1), (m, m2)]));
                    }
                }
            }
        }
        for &(a, z) in &rule.shared {
            for &s1 in &moves[a] {
                for &s2 in &moves[z] {
                    if keeps(a, s1, z, s2) {
                        out.push(moved(&[(a, s1), (z, s2)]));
                    }
                }
            }
        }
    }
    let n = best.len();
    for other in [(b + n - 1) % n, (b + 1) % n] {
        if other != b && best[other] != best[b] {
            let mut c = best.clone();
            c[b] = best[other].clone();
            out.push(c);
        }
    }
    out
}

/// Fewest GPUs a search pattern covers: a mix is searched in eighths at least, as on one
/// node of the paper's eight GPUs.
const MIN_PATTERN_GPUS: usize = 8;

/// GPUs of `model` in the search's pattern: whole nodes (`cluster.gpus_per_node`, or all
/// the model's GPUs when fewer), as few as cover [`MIN_PATTERN_GPUS`] and no more than the
/// cluster has of the model. On nodes of 1, 2 or 4 GPUs one node cannot hold a mix like
/// `c2×6 c6×2`; a pattern of 8 can.
fn pattern_gpus(sc: &ResolvedScenario, model: usize) -> usize {
    let gpus = sc.gpus.iter().filter(|g| g.model == model).count().max(1);
    let node = (sc.scenario.cluster.gpus_per_node as usize).clamp(1, gpus);
    node * MIN_PATTERN_GPUS.div_ceil(node).min(gpus / node).max(1)
}

/// One node's share of a cluster-wide layout on the GPUs of `model`: configuration counts
/// over `pattern` GPUs, proportional to the layout's as it runs (cycled over the GPUs;
/// largest remainders), and whether the share is exact.
fn node_counts(sc: &ResolvedScenario, layout: &[String], model: usize, pattern: usize) -> (Vec<u32>, bool) {
    let k = sc.models[model].configurations.len();
    let mut whole = vec![0u32; k];
    let mut total = 0;
    for (c, g) in sc.layout_indices(layout).into_iter().zip(&sc.gpus) {
        if g.model == model {
            whole[c] += 1;
            total += 1;
        }
    }
    let total = total.max(1);
    let exact_share = whole.iter().all(|&n| (n as usize * pattern) % total == 0);
    let exact: Vec<f64> = whole
        .iter()
        .map(|&n| f64::from(n) * pattern as f64 / total as f64)
        .collect();
    let mut counts: Vec<u32> = exact.iter().map(|x| x.floor() as u32).collect();
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let mut left = pattern as u32 - counts.iter().sum::<u32>();
    for c in order {
        if left == 0 {
            break;
        }
        if exact[c] > 0.0 {
            counts[c] += 1;
            left -= 1;
        }
    }
    (counts, exact_share)
}

/// Searches a schedule of `blocks` equal blocks on the given days (seed and jobs each),
/// starting from `start` (the best static layout). `progress` advances once per block
/// visited.
pub fn tune_periodic_on(
    sc: &ResolvedScenario,
    days: Vec<(u64, JobSet)>,
    start: &[String],
    blocks: u32,
    max_passes: u32,
    progress: &indicatif::ProgressBar,
) -> Result<PeriodicTuneResult, PeriodicTuneError> {
    if !(1..=48).contains(&blocks) || 1440 % blocks != 0 {
        return Err(PeriodicTuneError::Blocks(blocks));
    }
    sc.check_layout(start).map_err(PeriodicTuneError::Start)?;
    let seeds: Vec<u64> = days.iter().map(|(s, _)| *s).collect();
    let days = with_references(sc, days);
    let mut s = Search {
        sc,
        days,
        cache: HashMap::new(),
        block_min: DAY_MIN / f64::from(blocks),
    };
    let patterns: Vec<usize> = (0..sc.models.len()).map(|m| pattern_gpus(sc, m)).collect();
    let shares: Vec<(Vec<u32>, bool)> = patterns
        .iter()
        .enumerate()
        .map(|(m, &p)| node_counts(sc, start, m, p))
        .collect();
    let start_exact = shares.iter().all(|(_, exact)| *exact);
    let start_counts: Layout = shares.into_iter().map(|(counts, _)| counts).collect();
    let available: Vec<Vec<usize>> = (0..sc.models.len())
        .map(|m| {
            (0..sc.models[m].configurations.len())
                .filter(|&c| sc.searchable(m, c))
                .collect()
        })
        .collect();
    let rep = &sc.scenario.repartition;
    let count = (rep.semantics == Semantics::Drain
        && rep.node_rule == NodeRule::Slurm2205
        && !rep.index_rule.padded())
    .then(|| CountRule::of(sc));
    let mut best: Blocks = vec![start_counts.clone(); blocks as usize];
    let mut best_et = s.evaluate_many(vec![best.clone()])[0].1;
    let start_et = best_et;
    let mut passes = 0;
    while passes < max_passes {
        passes += 1;
        let mut improved = false;
        for b in 0..blocks as usize {
            let scored = s.evaluate_many(neighbours(&best, b, &available, count.as_ref()));
            progress.inc(1);
            if let Some((c, et)) = scored.into_iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
                if et < best_et - 1e-9 {
                    best = c;
                    best_et = et;
                    improved = true;
                }
            }
        }
        if !improved {
            break;
        }
    }
    Ok(PeriodicTuneResult {
        schedule: s.schedule(&best),
        et: best_et,
        start_et,
        start: layout_names(sc, &start_counts),
        pattern_gpus: patterns,
        start_exact,
        relayout_batches: s.cache[&best].1,
        evaluations: s.cache.len(),
        passes,
        seeds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::run_reference;
    use smartmig_sim::scenario::Scenario;

    /// Training days 1 and 2 of `sc`.
    fn two_days(sc: &ResolvedScenario) -> Vec<(u64, JobSet)> {
        [1u64, 2]
            .iter()
            .map(|&s| (s, smartmig_sim::workload::from_scenario(sc, s, false).unwrap()))
            .collect()
    }

    /// Mean ET of `layout` (CEDF) against static CEDF over `days`.
    fn mean_et(sc: &ResolvedScenario, days: &[(u64, JobSet)], layout: LayoutSpec) -> f64 {
        let spec = PolicySpec::new("p", Scheduler::Cedf, layout);
        days.iter()
            .map(|(seed, jobs)| {
                run_policy(sc, jobs, &spec, *seed, None)
                    .unwrap()
                    .et(&run_reference(sc, jobs, *seed), &sc.scenario.objective)
            })
            .sum::<f64>()
            / days.len() as f64
    }

    #[test]
    fn the_search_never_ends_worse_than_its_static_start_and_merges_equal_blocks() {
        let sc = Scenario::reference(&[
            "cluster.gpus=[{model=\"a100-40gb\",count=2}]".into(),
            "workload.multiplier=5".into(),
            "workload.days=0.25".into(),
        ])
        .unwrap();
        let days = two_days(&sc);
        let start = vec!["c2".to_string(), "c6".to_string()];
        let t = tune_periodic_on(&sc, days.clone(), &start, 4, 2, &indicatif::ProgressBar::hidden()).unwrap();
        assert!(t.et <= t.start_et + 1e-12, "{} vs {}", t.et, t.start_et);
        assert_eq!(t.schedule[0].at, "00:00");
        assert!(t.schedule.len() <= 4);
        assert!(
            t.schedule.windows(2).all(|w| w[0].layout != w[1].layout),
            "merged"
        );
        assert!(t
            .schedule
            .iter()
            .all(|e| e.layout.len() == 2 && sc.check_layout(&e.layout).is_ok()));
        // Re-running the written schedule on the same days reproduces the reported ET.
        let et = mean_et(&sc, &days, LayoutSpec::Periodic(t.schedule.clone()));
        assert!((et - t.et).abs() < 1e-9, "{et} vs {}", t.et);
    }

    #[test]
    fn a_cluster_layout_maps_to_one_nodes_share() {
        let sc = Scenario::reference(&["cluster.gpus=[{model=\"a100-40gb\",count=64}]".into()]).unwrap();
        let layout: Vec<String> = (0..64)
            .map(|i| if i < 48 { "c2" } else { "c6" }.to_string())
            .collect();
        let (counts, exact) = node_counts(&sc, &layout, 0, 8);
        assert!(exact);
        assert_eq!((counts[1], counts[5], counts.iter().sum::<u32>()), (6, 2, 8));
    }

    #[test]
    fn on_small_nodes_the_search_starts_from_the_static_layouts_own_mix() {
        // One GPU to a node: one node's share of c2×6 c6×2 would be c2 alone, a worse
        // start than the layout the result is compared with.
        let sc = Scenario::reference(&[
            "cluster.gpus_per_node=1".into(),
            "workload.multiplier=10".into(),
            "workload.days=0.25".into(),
        ])
        .unwrap();
        let days = two_days(&sc);
        let start: Vec<String> = ["c2", "c2", "c2", "c2", "c2", "c2", "c6", "c6"]
            .iter()
            .map(|c| c.to_string())
            .collect();
        let t = tune_periodic_on(&sc, days.clone(), &start, 2, 0, &indicatif::ProgressBar::hidden()).unwrap();
        assert!(t.start_exact);
        assert_eq!(t.start, start, "eight nodes hold the mix");
        let static_et = mean_et(&sc, &days, LayoutSpec::Static(start.clone()));
        assert!(
            (t.start_et - static_et).abs() < 1e-9,
            "{} vs {static_et}",
            t.start_et
        );
        // Three to a node: two nodes are all the cluster's 8 GPUs hold, and 6 GPUs cannot
        // hold 6:2; on a cluster of 9, three nodes can.
        let sc = Scenario::reference(&["cluster.gpus_per_node=3".into()]).unwrap();
        assert_eq!(pattern_gpus(&sc, 0), 6);
        assert!(!node_counts(&sc, &start, 0, 6).1);
        let nine = Scenario::reference(&[
            "cluster.gpus_per_node=3".into(),
            "cluster.gpus=[{model=\"a100-40gb\",count=9}]".into(),
        ])
        .unwrap();
        assert_eq!(pattern_gpus(&nine, 0), 9);
        // Nodes of 8: one node, even where only the whole cluster holds the mix exactly
        // (a search over a 64-GPU pattern moves in steps too small to gain).
        let big = Scenario::reference(&["cluster.gpus=[{model=\"a100-40gb\",count=64}]".into()]).unwrap();
        let layout: Vec<String> = (0..64)
            .map(|i| if i < 57 { "c2" } else { "c6" }.to_string())
            .collect();
        assert_eq!(pattern_gpus(&big, 0), 8);
        assert!(!node_counts(&big, &layout, 0, 8).1);
        // A layout shorter than the cluster runs cycled: c2 c2 c6 over 8 GPUs is c2×6 c6×2,
        // which one node of 8 holds.
        let eight = Scenario::reference(&[]).unwrap();
        let short = ["c2", "c2", "c6"].map(String::from);
        assert_eq!(pattern_gpus(&eight, 0), 8);
        assert!(node_counts(&eight, &short, 0, 8).1);
    }

    /// The shipped mixed scenario (4 A100s, 2 H100s, 2 A30s), a quarter of a day.
    fn mixed() -> ResolvedScenario {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../etc/scenarios/mixed-a100-h100-a30.toml");
        Scenario::load(&file, &["workload.days=0.25".into()]).unwrap()
    }

    #[test]
    fn on_a_mixed_cluster_every_model_gets_its_own_schedule() {
        let sc = mixed();
        let days = two_days(&sc);
        let start = sc.scenario.baselines.static_best.clone().unwrap();
        let t = tune_periodic_on(&sc, days.clone(), &start, 4, 2, &indicatif::ProgressBar::hidden()).unwrap();
        // Each model's share of the static layout, spelled out GPU by GPU in cluster order.
        assert!(t.start_exact);
        assert_eq!(t.start, start);
        let static_et = mean_et(&sc, &days, LayoutSpec::Static(start.clone()));
        assert!(
            (t.start_et - static_et).abs() < 1e-9,
            "{} vs {static_et}",
            t.start_et
        );
        assert!(t.et <= t.start_et + 1e-12, "{} vs {}", t.et, t.start_et);
        for e in &t.schedule {
            assert_eq!(e.layout.len(), sc.gpus.len(), "{:?}", e.layout);
            assert!(sc.check_layout(&e.layout).is_ok(), "{:?}", e.layout);
        }
        let et = mean_et(&sc, &days, LayoutSpec::Periodic(t.schedule.clone()));
        assert!((et - t.et).abs() < 1e-9, "{et} vs {}", t.et);
    }

    #[test]
    fn a_mixed_layout_cycles_each_models_pattern_over_its_own_gpus() {
        let sc = mixed();
        let counts = |m: usize, names: &[&str]| -> Vec<u32> {
            sc.models[m]
                .configurations
                .iter()
                .map(|c| names.iter().filter(|&&n| n == c.name).count() as u32)
                .collect()
        };
        let layout = vec![counts(0, &["c2", "c6"]), counts(1, &["c1"]), counts(2, &["q2"])];
        assert_eq!(
            layout_names(&sc, &layout),
            ["c2", "c6", "c2", "c6", "c1", "c1", "q2", "q2"]
        );
        assert_eq!(
            (0..3).map(|m| pattern_gpus(&sc, m)).collect::<Vec<_>>(),
            [4, 2, 2]
        );
    }

    #[test]
    fn on_a_mixed_cluster_moves_stay_within_one_model_unless_a_pair_keeps_a_shared_nodes_count() {
        let sc = mixed();
        let start = sc.scenario.baselines.static_best.clone().unwrap();
        let layout: Layout = (0..3)
            .map(|m| node_counts(&sc, &start, m, pattern_gpus(&sc, m)).0)
            .collect();
        let available: Vec<Vec<usize>> = sc
            .models
            .iter()
            .map(|m| (0..m.configurations.len()).collect())
            .collect();
        let cands = neighbours(&vec![layout.clone()], 0, &available, None);
        let changed = |c: &Blocks| -> Vec<usize> { (0..3).filter(|&m| c[0][m] != layout[m]).collect() };
        for m in 0..3 {
            assert!(cands.iter().any(|c| changed(c) == [m]), "no move on model {m}");
        }
        // Every candidate moves GPUs of one model, keeping each model's GPU count.
        assert!(cands.iter().all(|c| changed(c).len() == 1));
        assert!(cands
            .iter()
            .all(|c| (0..3).all(|m| { c[0][m].iter().sum::<u32>() == layout[m].iter().sum::<u32>() })));
        // Under Slurm 22.05's count rule, models sharing a node also move in pairs that keep
        // the node's instance count.
        let rule = CountRule::of(&sc);
        assert_eq!(rule.shared, [(0, 1), (0, 2), (1, 2)], "one node holds all three");
        let node_instances = |l: &Layout| -> usize {
            (0..3)
                .map(|m| {
                    l[m].iter()
                        .enumerate()
                        .map(|(c, &n)| n as usize * rule.instances[m][c])
                        .sum::<usize>()
                })
                .sum()
        };
        let paired = neighbours(&vec![layout.clone()], 0, &available, Some(&rule));
        let across: Vec<&Blocks> = paired.iter().filter(|c| changed(c).len() == 2).collect();
        assert!(!across.is_empty());
        assert!(across
            .iter()
            .all(|c| node_instances(&c[0]) == node_instances(&layout)));
        // The H100s (c2, 2 instances) can give one back to an A100 or an A30; those two,
        // each at its fewest (c1, q1), cannot pair with each other.
        assert_eq!((layout[0][0], layout[1][1], layout[2][0]), (4, 2, 2));
        let pairs: Vec<Vec<usize>> = across.iter().map(|c| changed(c)).collect();
        assert!(pairs.contains(&vec![0, 1]) && pairs.contains(&vec![1, 2]));
        assert!(!pairs.contains(&vec![0, 2]));
        // Models on nodes of their own never pair.
        let apart = Scenario::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../etc/scenarios/mixed-a100-h100-a30.toml"),
            &["cluster.gpus_per_node=2".into()],
        )
        .unwrap();
        assert_eq!(CountRule::of(&apart).shared, []);
    }

    #[test]
    fn blocks_must_cut_the_day_evenly() {
        let sc = Scenario::reference(&[]).unwrap();
        let e = tune_periodic_on(
            &sc,
            vec![],
            &["c2".into()],
            7,
            1,
            &indicatif::ProgressBar::hidden(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--blocks 7"), "{e}");
    }
}
