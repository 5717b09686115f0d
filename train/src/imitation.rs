//! Training by imitation: a teacher (the ladder controller of `smartmig_sim::partition::ladder`,
//! its thresholds and base rungs searched on training days) and a mean-field network that
//! learns to reproduce its decisions from the mean-field features.

use std::collections::HashMap;

use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use super::lookahead::{action_shares, actions, Label, Lookahead, LookaheadConfig, Score, SAMPLE_SEED_BASE};
use super::{Learner, PpoConfig, TrainError};
use smartmig_eval::compare::{run_reference, GuardVerdict, Paired};
use smartmig_eval::{TRAIN_SEED_BASE, VALIDATION_SEED_BASE};
use smartmig_policy::{Draw, FeatureLayout, PolicyNetwork, SamplingConfig};
use smartmig_sim::decision::{DecisionView, Repartitioner};
use smartmig_sim::partition::ladder::{Ladder, LadderParams};
use smartmig_sim::partition::mean_field::MeanField;
use smartmig_sim::partition::DAY_MIN;
use smartmig_sim::scenario::{PeriodicSpec, ResolvedScenario};
use smartmig_sim::sched::Scheduler;
use smartmig_sim::workload::{self, JobSet};
use smartmig_sim::{RunOptions, RunResult, Simulation};

/// The node pattern (configuration indices) of a layout given by names.
fn pattern(sc: &ResolvedScenario, names: &[String]) -> Vec<u16> {
    let configs = &sc.models[0].configurations;
    names
        .iter()
        .map(|n| configs.iter().position(|c| c.name == *n).unwrap_or(0) as u16)
        .collect()
}

/// `names` as a node layout of `per_node` GPUs (configuration indices), or why it is not
/// one.
pub fn node_layout(sc: &ResolvedScenario, names: &[String], per_node: usize) -> Result<Vec<u16>, TrainError> {
    let written = names.join(",");
    if names.len() != per_node {
        return Err(TrainError::Scenario(format!(
            "lookahead layout {written}: {} configurations, a node has {per_node} GPUs",
            names.len()
        )));
    }
    let model = &sc.models[0];
    names
        .iter()
        .map(|n| {
            model
                .configurations
                .iter()
                .position(|c| c.name == *n)
                .map(|i| i as u16)
                .ok_or_else(|| {
                    TrainError::Scenario(format!(
                        "lookahead layout {written}: {n} is not a configuration of the {}",
                        model.model.key
                    ))
                })
        })
        .collect()
}

/// The lookahead's choices as `--lookahead-layout` writes them, each with its share
/// (`c2,c2,c2,c2,c2,c2,c6,c6 41%; ...`).
fn choices_summary(sc: &ResolvedScenario, acts: &[Vec<u16>], shares: &[(usize, f64)]) -> String {
    let model = &sc.models[0];
    shares
        .iter()
        .map(|&(a, share)| {
            let names: Vec<&str> = acts[a]
                .iter()
                .map(|&c| model.configurations[usize::from(c)].name.as_str())
                .collect();
            format!("{} {:.0}%", names.join(","), 100.0 * share)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// GPU instances of a node pattern.
fn instances(sc: &ResolvedScenario, p: &[u16]) -> usize {
    p.iter()
        .map(|&c| sc.models[0].configurations[usize::from(c)].sizes.len())
        .sum()
}

/// The ladder a schedule and a static layout suggest: their distinct node layouts, fewest
/// instances first, with each of `blocks` blocks based on the schedule's rung then.
pub fn ladder_from(
    sc: &ResolvedScenario,
    schedule: &[PeriodicSpec],
    static_layout: &[String],
    blocks: usize,
) -> LadderParams {
    let per_node = schedule
        .first()
        .map_or(static_layout.len(), |e| e.layout.len())
        .max(1);
    let mut rungs: Vec<Vec<u16>> = schedule.iter().map(|e| pattern(sc, &e.layout)).collect();
    let mut s = pattern(sc, static_layout);
    s.truncate(per_node);
    rungs.push(s);
    for r in &mut rungs {
        r.sort_unstable();
    }
    rungs.sort_by_key(|r| (instances(sc, r), r.clone()));
    rungs.dedup();
    let base = (0..blocks)
        .map(|b| {
            let minute = b as f64 * DAY_MIN / blocks as f64;
            let entry = schedule
                .iter()
                .rev()
                .find(|e| {
                    smartmig_core::config::parse_time_of_day(&e.at).is_ok_and(|m| f64::from(m) <= minute)
                })
                .or(schedule.last());
            let mut p = entry.map_or_else(|| rungs[0].clone(), |e| pattern(sc, &e.layout));
            p.sort_unstable();
            rungs.iter().position(|r| *r == p).unwrap_or(0)
        })
        .collect();
    LadderParams {
        rungs,
        base,
        up: f64::INFINITY,
        down: f64::NEG_INFINITY,
        step: 1,
    }
}

/// Runs the ladder controller on one day.
pub fn run_ladder(
    sc: &ResolvedScenario,
    jobs: &JobSet,
    params: &LadderParams,
    every: u32,
    seed: u64,
) -> RunResult {
    let k = sc.models[0].configurations.len();
    let mut policy = Ladder::new(params.clone(), k, every);
    let opts = RunOptions::of(sc, Scheduler::Cedf, seed);
    Simulation::new(sc, &jobs.jobs, opts).run(&mut policy)
}

/// ET per unit of energy above the cap of [`tune_ladder`]: large, so that the cap binds.
const ENERGY_CAP_PENALTY: f64 = 10.0;

/// Searches the ladder's thresholds, step and base rungs by coordinate descent on `days`
/// (seed, jobs), at most `rounds` rounds; `on_round` sees the start's score and each
/// improving round's. The score is the mean ET against static CEDF, plus a penalty for
/// mean energy above the energy lower bound beyond `energy_cap` (a fraction, e.g. 0.27)
/// when one is given. Returns the best parameters and their score.
pub fn tune_ladder(
    sc: &ResolvedScenario,
    days: &[(u64, JobSet)],
    start: LadderParams,
    every: u32,
    rounds: u32,
    energy_cap: Option<f64>,
    mut on_round: impl FnMut(u32, f64),
) -> (LadderParams, f64) {
    let refs: Vec<(RunResult, f64)> = days
        .par_iter()
        .map(|(s, j)| {
            let lb = energy_cap.map_or(0.0, |_| {
                smartmig_bounds::energy_day(sc, &j.jobs).energy.energy_wmin
            });
            (run_reference(sc, j, *s), lb)
        })
        .collect();
    let objective = &sc.scenario.objective;
    let mut cache: HashMap<String, f64> = HashMap::new();
    let mut score = |cands: Vec<LadderParams>| -> Vec<(LadderParams, f64)> {
        let todo: Vec<LadderParams> = cands
            .iter()
            .filter(|c| !cache.contains_key(&format!("{c:?}")))
            .cloned()
            .collect();
        let scored: Vec<(String, f64)> = todo
            .par_iter()
            .map(|c| {
                let n = days.len().max(1) as f64;
                let (et, above) =
                    days.iter()
                        .zip(&refs)
                        .fold((0.0, 0.0), |(et, above), ((s, j), (r, lb))| {
                            let run = run_ladder(sc, j, c, every, *s);
                            let a = if *lb > 0.0 {
                                run.energy_wmin / lb - 1.0
                            } else {
                                0.0
                            };
                            (et + run.et(r, objective), above + a)
                        });
                let excess = energy_cap.map_or(0.0, |cap| (above / n - cap).max(0.0));
                (format!("{c:?}"), et / n + ENERGY_CAP_PENALTY * excess)
            })
            .collect();
        cache.extend(scored);
        cands
            .into_iter()
            .map(|c| {
                let et = cache[&format!("{c:?}")];
                (c, et)
            })
            .collect()
    };
    let mut best = start.clone();
    let mut best_et = score(vec![start])[0].1;
    on_round(0, best_et);
    let thresholds = [0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0];
    for round in 1..=rounds {
        let mut cands = Vec::new();
        for &t in &thresholds {
            if t > best.down {
                cands.push(LadderParams {
                    up: t,
                    ..best.clone()
                });
            }
            if t < best.up {
                cands.push(LadderParams {
                    down: t,
                    ..best.clone()
                });
            }
        }
        cands.push(LadderParams {
            up: f64::INFINITY,
            ..best.clone()
        });
        cands.push(LadderParams {
            down: f64::NEG_INFINITY,
            ..best.clone()
        });
        for step in 1..=2 {
            cands.push(LadderParams { step, ..best.clone() });
        }
        for b in 0..best.base.len() {
            for d in [-1i64, 1] {
                let r = best.base[b] as i64 + d;
                if (0..best.rungs.len() as i64).contains(&r) {
                    let mut c = best.clone();
                    c.base[b] = r as usize;
                    cands.push(c);
                }
            }
        }
        match score(cands).into_iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
            Some((c, et)) if et < best_et - 1e-9 => {
                best = c;
                best_et = et;
                on_round(round, et);
            }
            _ => break,
        }
    }
    (best, best_et)
}

/// Blocks of the day of a teacher refined on one training day, unless told otherwise.
pub const DEFAULT_DAY_BLOCKS: usize = 24;

/// Search rounds per block of a teacher refined on one day (one move a round).
const DAY_ROUNDS_PER_BLOCK: u32 = 4;

/// `params` with its base rungs over `blocks` equal blocks of the day (each new block
/// takes the rung of the old block it starts in).
pub fn with_blocks(params: &LadderParams, blocks: usize) -> LadderParams {
    let old = params.base.len().max(1);
    let base = (0..blocks.max(1))
        .map(|b| params.base.get(b * old / blocks.max(1)).copied().unwrap_or(0))
        .collect();
    LadderParams {
        base,
        ..params.clone()
    }
}

/// Energy above the day's energy lower bound (a fraction) of `params` on `day`.
pub fn energy_above_bound(
    sc: &ResolvedScenario,
    day: &(u64, JobSet),
    params: &LadderParams,
    every: u32,
) -> f64 {
    let bound = smartmig_bounds::energy_day(sc, &day.1.jobs).energy.energy_wmin;
    run_ladder(sc, &day.1, params, every, day.0).energy_wmin / bound - 1.0
}

/// `teacher` refined on `day` by itself: base rungs over `blocks` blocks of the day and
/// thresholds searched there, held to `energy_cap` (a fraction above the bound) when
/// given. Returns the refined teacher, the start's score on the day and its own.
pub fn refine_on_day(
    sc: &ResolvedScenario,
    day: &(u64, JobSet),
    teacher: &LadderParams,
    blocks: usize,
    every: u32,
    energy_cap: Option<f64>,
) -> (LadderParams, f64, f64) {
    let start = with_blocks(teacher, blocks);
    let rounds = DAY_ROUNDS_PER_BLOCK * blocks as u32;
    let mut before = f64::NAN;
    let (p, score) = tune_ladder(
        sc,
        std::slice::from_ref(day),
        start,
        every,
        rounds,
        energy_cap,
        |r, s| {
            if r == 0 {
                before = s;
            }
        },
    );
    (p, before, score)
}

/// Settings of training by imitation.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ImitationConfig {
    /// Base seed: training days start at `TRAIN_SEED_BASE + 100,000·seed`; weights and
    /// minibatch order derive from it.
    pub seed: u64,
    /// Training days (the teacher's search and the student's data).
    pub train_days: u32,
    /// Validation days (model selection and the guard).
    pub validation_days: u32,
    /// Blocks of the day the teacher's base rung follows.
    pub blocks: usize,
    /// Decide every this many arrivals and completions.
    pub every_events: u32,
    /// Most rounds of the teacher's coordinate descent.
    pub teacher_rounds: u32,
    /// Rounds of the student: fit, run, relabel what it saw (DAgger).
    pub student_rounds: u32,
    /// Supervised epochs per round.
    pub epochs: usize,
    /// Adam learning rate.
    pub lr: f64,
    /// Hidden layer widths.
    pub hidden: Vec<usize>,
    /// Most mean energy above the energy lower bound the teacher may use (a fraction,
    /// e.g. 0.27); None: ET alone.
    #[serde(default)]
    pub energy_cap: Option<f64>,
    /// Blocks of a teacher refined on each training day by itself (it sees that day's
    /// arrivals: a privileged teacher the network, which sees only the queue, learns
    /// from); None: one teacher for every day.
    #[serde(default)]
    pub day_blocks: Option<usize>,
    /// A lookahead teacher over the tuned ladder instead of the ladder itself (and of
    /// teachers refined on each day).
    #[serde(default)]
    pub lookahead: Option<LookaheadConfig>,
    /// Node layouts (configuration names, one per GPU of a node) the lookahead tries
    /// besides the teacher's rungs.
    #[serde(default)]
    pub lookahead_layouts: Vec<Vec<String>>,
    /// How much a label's weight in the fit follows its stake (what a wrong choice there
    /// costs in the lookahead's score, relative to the mean stake): 0, every decision
    /// alike; 1, in proportion to the stake.
    #[serde(default)]
    pub stake_weight: f64,
    /// Soft targets: each decision is fitted to every scored action in proportion to
    /// `exp(-margin / (temperature × mean stake))` instead of to the chosen action alone
    /// (0: the chosen action alone).
    #[serde(default)]
    pub soft_temperature: f64,
}

impl Default for ImitationConfig {
    fn default() -> Self {
        ImitationConfig {
            seed: 0,
            train_days: 16,
            validation_days: 16,
            blocks: 6,
            every_events: 5,
            teacher_rounds: 30,
            student_rounds: 4,
            epochs: 40,
            lr: 3e-3,
            hidden: vec![64, 64],
            energy_cap: None,
            day_blocks: Some(DEFAULT_DAY_BLOCKS),
            lookahead: None,
            lookahead_layouts: Vec::new(),
            stake_weight: 0.0,
            soft_temperature: 0.0,
        }
    }
}

/// One round of the student.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct StudentRound {
    /// Round (1-based).
    pub round: u32,
    /// Decisions labelled so far.
    pub samples: usize,
    /// Mean row cross-entropy at the end of the round's fit.
    pub loss: f64,
    /// Mean ET on the training days.
    pub train_et: f64,
    /// Mean ET on the validation days.
    pub validation_et: f64,
    /// Under an energy cap: mean energy above the energy lower bound on the validation
    /// days (a fraction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_energy_above_bound: Option<f64>,
}

/// The round a training keeps: the best validation ET, among the rounds within
/// `energy_cap` on the validation days when there is a cap (the limit the admin asked
/// for comes first); if none is within it, the round closest to it.
pub fn kept_round(rounds: &[StudentRound], energy_cap: Option<f64>) -> Option<usize> {
    let excess = |r: &StudentRound| match (energy_cap, r.validation_energy_above_bound) {
        (Some(cap), Some(e)) => (e - cap).max(0.0),
        _ => 0.0,
    };
    (0..rounds.len()).min_by(|&a, &b| {
        let (ra, rb) = (&rounds[a], &rounds[b]);
        excess(ra)
            .total_cmp(&excess(rb))
            .then(ra.validation_et.total_cmp(&rb.validation_et))
    })
}

/// The teachers refined on each training day, scored there (ET, plus the energy penalty
/// under a cap) and averaged over the days.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct DayRefinement {
    /// Blocks of the day of each refined teacher.
    pub blocks: usize,
    /// The teacher's mean score on its own training days before the refinement.
    pub start_score: f64,
    /// The refined teachers' mean score.
    pub score: f64,
}

/// What training by imitation produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImitationOutcome {
    /// The tuned teacher.
    pub teacher: LadderParams,
    /// The teacher's score (mean ET on the training days, plus the energy cap's penalty)
    /// at the start and after each improving search round.
    pub teacher_curve: Vec<f64>,
    /// The teacher's mean ET on the validation days.
    pub teacher_validation_et: f64,
    /// With `day_blocks`: the teachers refined on each training day.
    pub day_refinement: Option<DayRefinement>,
    /// The student's rounds.
    pub rounds: Vec<StudentRound>,
    /// The round whose weights are kept ([`kept_round`]).
    pub kept_round: u32,
    /// `static-best`'s mean ET on the validation days.
    pub static_validation_et: f64,
    /// The kept student against `static-best` on the validation days.
    pub guard: GuardVerdict,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// The kept student.
    #[serde(skip)]
    pub network: Option<PolicyNetwork>,
}

/// The minute of the day a feature vector was taken at (from its sin/cos features).
fn minute_of(layout: &FeatureLayout, x: &[f32]) -> f64 {
    let o = layout.time_of_day_offset();
    let angle = f64::from(x[o]).atan2(f64::from(x[o + 1]));
    (angle / std::f64::consts::TAU).rem_euclid(1.0) * DAY_MIN
}

/// The teacher's decision for a feature vector, as transition rows `[K, K]` and the
/// weight of each row: the transport that takes the GPU mix in `x` to the teacher's rung
/// with the fewest moves (rows of absent configurations point at the rung's mix, weighted
/// little).
pub fn teacher_rows(
    params: &LadderParams,
    layout: &FeatureLayout,
    k: usize,
    x: &[f32],
) -> (Vec<f32>, Vec<f32>) {
    rung_rows(&params.rungs[ladder_rung(params, layout, x)], k, x)
}

/// The ladder's rung for a feature vector.
fn ladder_rung(params: &LadderParams, layout: &FeatureLayout, x: &[f32]) -> usize {
    let waiting = f64::from(x[layout.queue_summary_offset()]);
    params.rung(minute_of(layout, x), waiting)
}

/// The transition rows `[K, K]` and row weights that take the GPU mix in `x` to the node
/// pattern `rung` with the fewest moves.
fn rung_rows(rung: &[u16], k: usize, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut want = vec![0f64; k];
    for &c in rung {
        want[usize::from(c)] += 1.0 / rung.len() as f64;
    }
    let mix: Vec<f64> = x[..k].iter().map(|&v| f64::from(v)).collect();
    let keep: Vec<f64> = (0..k).map(|c| mix[c].min(want[c])).collect();
    let deficit: Vec<f64> = (0..k).map(|c| want[c] - keep[c]).collect();
    let total_deficit: f64 = deficit.iter().sum();
    let mut rows = vec![0f32; k * k];
    let mut weights = vec![0f32; k];
    for c in 0..k {
        let row = &mut rows[c * k..(c + 1) * k];
        if mix[c] <= 1e-9 {
            for (r, w) in row.iter_mut().zip(&want) {
                *r = *w as f32;
            }
            weights[c] = 0.01;
            continue;
        }
        let surplus = mix[c] - keep[c];
        row[c] = (keep[c] / mix[c]) as f32;
        if total_deficit > 1e-12 {
            for (to, d) in deficit.iter().enumerate() {
                row[to] += (surplus * d / total_deficit / mix[c]) as f32;
            }
        } else {
            row[c] = 1.0;
        }
        weights[c] = (mix[c] + 0.01) as f32;
    }
    (rows, weights)
}

/// The labels' mean stake: the scale their weights and soft targets are measured in.
fn mean_stake(labels: &[Label]) -> f64 {
    labels.iter().map(Label::stake).sum::<f64>() / labels.len().max(1) as f64
}

/// Each label's weight in the fit: `1 - beta + beta * stake / mean` (1 for every label
/// when `beta` is 0 or no label has a stake), `mean` being [`mean_stake`].
fn label_weights(labels: &[Label], beta: f64, mean: f64) -> Vec<f32> {
    labels
        .iter()
        .map(|l| {
            if beta <= 0.0 || mean <= 0.0 {
                1.0
            } else {
                (1.0 - beta + beta * l.stake() / mean) as f32
            }
        })
        .collect()
}

/// The actions a label is fitted to, with their shares: the chosen one alone, or with a
/// `temperature` every scored action in proportion to `exp(-margin / (temperature ×
/// scale))` (shares below 0.1% left out, the rest summing to 1).
fn target_actions(l: &Label, temperature: f64, scale: f64) -> Vec<(usize, f32)> {
    if temperature <= 0.0 || scale <= 0.0 || l.margins.is_empty() {
        return vec![(l.action, 1.0)];
    }
    let odds: Vec<(usize, f64)> = l
        .margins
        .iter()
        .enumerate()
        .map(|(a, &m)| (a, (-f64::from(m) / (temperature * scale)).exp()))
        .filter(|&(_, o)| o >= 1e-3)
        .collect();
    // The chosen action's margin is 0: its odds are 1, so the sum is at least 1.
    let sum: f64 = odds.iter().map(|&(_, o)| o).sum();
    odds.into_iter().map(|(a, o)| (a, (o / sum) as f32)).collect()
}

/// The student as a repartition policy.
fn student(
    sc: &ResolvedScenario,
    net: &PolicyNetwork,
    start: &[String],
    every: u32,
) -> MeanField<PolicyNetwork> {
    let k = sc.models[0].configurations.len();
    MeanField::new(
        sc,
        vec![net.clone()],
        smartmig_sim::features::layout(k),
        start.to_vec(),
        every,
        SamplingConfig::default(),
    )
    .with_draw(Draw::Apportion)
}

/// Runs a student on one day.
fn run_student(
    sc: &ResolvedScenario,
    net: &PolicyNetwork,
    jobs: &JobSet,
    start: &[String],
    every: u32,
    seed: u64,
) -> RunResult {
    let opts = RunOptions::of(sc, Scheduler::Cedf, seed);
    Simulation::new(sc, &jobs.jobs, opts).run(&mut student(sc, net, start, every))
}

/// A policy that records the features of each decision it makes.
struct Recording<'p> {
    inner: &'p mut dyn Repartitioner,
    seen: Vec<Vec<f32>>,
    buf: Vec<f32>,
}

impl Repartitioner for Recording<'_> {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn initial_layout(&mut self, sc: &ResolvedScenario) -> Vec<u16> {
        self.inner.initial_layout(sc)
    }
    fn every_events(&self) -> Option<u32> {
        self.inner.every_events()
    }
    fn feature_layout(&self) -> Option<FeatureLayout> {
        self.inner.feature_layout()
    }
    fn decide(&mut self, view: &DecisionView<'_>, rng: &mut ChaCha8Rng) -> Vec<(u32, u16)> {
        self.buf.clear();
        if view.write_features(0, &mut self.buf) {
            self.seen.push(self.buf.clone());
        }
        self.inner.decide(view, rng)
    }
}

/// Trains a mean-field network to imitate the ladder controller, which it first tunes
/// from `schedule` (periodic-best) and `static_layout` (static-best); `on_progress`
/// receives a line per stage.
pub fn train_imitation(
    sc: &ResolvedScenario,
    cfg: &ImitationConfig,
    schedule: &[PeriodicSpec],
    static_layout: &[String],
    mut on_progress: impl FnMut(&str),
) -> Result<ImitationOutcome, TrainError> {
    if sc.models.len() != 1 {
        return Err(TrainError::Scenario(format!(
            "training needs a scenario with one GPU model, this one has {}",
            sc.models.len()
        )));
    }
    let started = std::time::Instant::now();
    let k = sc.models[0].configurations.len();
    let layout = smartmig_sim::features::layout(k);
    let first = TRAIN_SEED_BASE.saturating_add(cfg.seed.saturating_mul(100_000));
    let load = |seeds: Vec<u64>| -> Result<Vec<(u64, JobSet)>, TrainError> {
        seeds
            .into_par_iter()
            .map(|s| Ok((s, workload::from_scenario(sc, s, false)?)))
            .collect()
    };
    let train = load((first..first + u64::from(cfg.train_days)).collect())?;
    let validation = load(
        (0..u64::from(cfg.validation_days))
            .map(|d| VALIDATION_SEED_BASE + d)
            .collect(),
    )?;
    if train.last().is_some_and(|(s, _)| *s >= VALIDATION_SEED_BASE) {
        return Err(TrainError::Scenario(
            "training days would reach the validation and evaluation seeds: use a smaller --seed".into(),
        ));
    }
    let objective = &sc.scenario.objective;
    let refs = |days: &[(u64, JobSet)]| -> Vec<RunResult> {
        days.par_iter().map(|(s, j)| run_reference(sc, j, *s)).collect()
    };
    let (train_refs, val_refs) = (refs(&train), refs(&validation));
    let mean_et = |runs: &[RunResult], refs: &[RunResult]| -> Vec<f64> {
        runs.iter().zip(refs).map(|(r, f)| r.et(f, objective)).collect()
    };
    let avg = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;

    // 1. The teacher.
    let start = ladder_from(sc, schedule, static_layout, cfg.blocks);
    let per_node = start.rungs.first().map_or(0, Vec::len);
    let extra: Vec<Vec<u16>> = cfg
        .lookahead_layouts
        .iter()
        .map(|names| node_layout(sc, names, per_node))
        .collect::<Result<_, _>>()?;
    let mut teacher_curve = Vec::new();
    let (teacher, _) = tune_ladder(
        sc,
        &train,
        start,
        cfg.every_events,
        cfg.teacher_rounds,
        cfg.energy_cap,
        |round, score| {
            teacher_curve.push(score);
            on_progress(&format!("teacher round {round}: training score {score:.4}"));
        },
    );
    let teacher_val: Vec<RunResult> = validation
        .par_iter()
        .map(|(s, j)| run_ladder(sc, j, &teacher, cfg.every_events, *s))
        .collect();
    let teacher_validation_et = avg(&mean_et(&teacher_val, &val_refs));
    let static_val: Vec<RunResult> = validation
        .par_iter()
        .map(|(s, j)| smartmig_eval::compare::run_static(sc, j, Scheduler::Cedf, static_layout, *s))
        .collect();
    let static_ets = mean_et(&static_val, &val_refs);
    on_progress(&format!(
        "teacher: validation ET {teacher_validation_et:.4} (static-best {:.4})",
        avg(&static_ets)
    ));

    // 1b. Optionally, the teacher refined on each training day by itself.
    let day_blocks = if cfg.lookahead.is_some() {
        None
    } else {
        cfg.day_blocks
    };
    let (day_teachers, day_refinement) = match day_blocks {
        None => (vec![teacher.clone(); train.len()], None),
        Some(n) => {
            let tuned: Vec<(LadderParams, f64, f64)> = train
                .par_iter()
                .map(|day| {
                    // Under a cap, a day may not use more energy than the teacher used
                    // on it: the teacher meets the cap on the mean, and so do they.
                    let cap = cfg
                        .energy_cap
                        .map(|_| energy_above_bound(sc, day, &teacher, cfg.every_events));
                    refine_on_day(sc, day, &teacher, n, cfg.every_events, cap)
                })
                .collect();
            let refinement = DayRefinement {
                blocks: n,
                start_score: avg(&tuned.iter().map(|t| t.1).collect::<Vec<_>>()),
                score: avg(&tuned.iter().map(|t| t.2).collect::<Vec<_>>()),
            };
            on_progress(&format!(
                "teacher refined on each training day ({n} blocks): mean day score {:.4} -> {:.4}",
                refinement.start_score, refinement.score
            ));
            (tuned.into_iter().map(|t| t.0).collect(), Some(refinement))
        }
    };

    // 2. The student: fit the teacher's decisions, then relabel what the student saw.
    let futures: Vec<Vec<JobSet>> = match cfg.lookahead {
        None => Vec::new(),
        Some(l) => (0..train.len() as u64)
            .map(|d| {
                load(
                    (0..l.samples as u64)
                        .map(|i| SAMPLE_SEED_BASE + d * 1_000 + i)
                        .collect(),
                )
            })
            .map(|days| days.map(|v| v.into_iter().map(|(_, j)| j).collect()))
            .collect::<Result<_, _>>()?,
    };
    let score = cfg
        .lookahead
        .map(|l| Score::new(sc, &train_refs, l.energy_weight));
    // What a label's index names: the teacher's rungs, then the lookahead's further layouts.
    let acts = match cfg.lookahead {
        Some(_) => actions(&teacher, &extra),
        None => teacher.rungs.clone(),
    };
    // Runs training day `d` with `actor` acting (None: the teacher), labelled by the
    // teacher: the run and every decision's features with the teacher's rung there.
    let labelled = |d: usize, actor: Option<Box<dyn Repartitioner + '_>>| -> (RunResult, Vec<Label>) {
        let (s, j) = &train[d];
        let opts = RunOptions::of(sc, Scheduler::Cedf, *s);
        match (cfg.lookahead, score) {
            (Some(l), Some(score)) => {
                let mut la = Lookahead::new(
                    sc,
                    j,
                    &futures[d],
                    *s,
                    score,
                    l,
                    &teacher,
                    &acts,
                    cfg.every_events,
                    actor,
                );
                let r = Simulation::new(sc, &j.jobs, opts).run(&mut la);
                (r, la.labels)
            }
            _ => {
                let ladder = &day_teachers[d];
                let (r, seen) = match actor {
                    None => {
                        let mut policy = Ladder::new(ladder.clone(), k, cfg.every_events);
                        policy.record = Some(Vec::new());
                        let r = Simulation::new(sc, &j.jobs, opts).run(&mut policy);
                        (r, policy.record.take().unwrap_or_default())
                    }
                    Some(mut a) => {
                        let mut rec = Recording {
                            inner: a.as_mut(),
                            seen: Vec::new(),
                            buf: Vec::new(),
                        };
                        let r = Simulation::new(sc, &j.jobs, opts).run(&mut rec);
                        (r, rec.seen)
                    }
                };
                let labels = seen.into_iter().map(|x| {
                    let action = ladder_rung(ladder, &layout, &x);
                    Label {
                        features: x,
                        action,
                        margins: Vec::new(),
                    }
                });
                (r, labels.collect())
            }
        }
    };
    let mut xs: Vec<Label> = (0..train.len())
        .into_par_iter()
        .flat_map(|d| labelled(d, None).1)
        .collect();
    let mask: Vec<f32> = (0..k * k)
        .map(|i| f32::from(u8::from(sc.models[0].configurations[i % k].is_available())))
        .collect();
    let ppo = PpoConfig {
        hidden: cfg.hidden.clone(),
        lr: cfg.lr,
        stay_bias: 0.0,
        minibatch: 256,
        ..PpoConfig::default()
    };
    let mut learner = Learner::new(layout.dim(), k, ppo, cfg.seed)?;
    let mut rng = <ChaCha8Rng as rand::SeedableRng>::seed_from_u64(cfg.seed.wrapping_mul(7_919));
    // Under a cap, each round's validation energy decides whether it may be kept.
    let val_bounds: Option<Vec<f64>> = cfg.energy_cap.map(|_| {
        validation
            .par_iter()
            .map(|(_, j)| smartmig_bounds::energy_day(sc, &j.jobs).energy.energy_wmin)
            .collect()
    });
    let mut rounds = Vec::new();
    let mut nets: Vec<(PolicyNetwork, Vec<f64>)> = Vec::new();
    for round in 1..=cfg.student_rounds.max(1) {
        let mut targets = Vec::with_capacity(xs.len() * k * k);
        let mut weights = Vec::with_capacity(xs.len() * k);
        let stake = mean_stake(&xs);
        let stake_scale = label_weights(&xs, cfg.stake_weight, stake);
        let mut chosen_share = 0.0;
        for (l, scale) in xs.iter().zip(stake_scale) {
            // A mixture of the actions' rows: each configuration's row is the share-weighted
            // mean of where each action would move it.
            let mut t = vec![0f32; k * k];
            let mut w = vec![0f32; k];
            for (a, share) in target_actions(l, cfg.soft_temperature, stake) {
                let (ta, wa) = rung_rows(&acts[a], k, &l.features);
                t.iter_mut().zip(ta).for_each(|(t, x)| *t += share * x);
                w.iter_mut().zip(wa).for_each(|(w, x)| *w += share * x);
                if a == l.action {
                    chosen_share += f64::from(share);
                }
            }
            targets.extend(t);
            weights.extend(w.into_iter().map(|w| w * scale));
        }
        if cfg.soft_temperature > 0.0 {
            on_progress(&format!(
                "  soft targets: the lookahead's choice carries {:.0}% of a decision on average (mean stake {stake:.4})",
                100.0 * chosen_share / xs.len().max(1) as f64
            ));
        }
        let flat: Vec<f32> = xs.iter().flat_map(|l| &l.features).copied().collect();
        let loss = learner.imitate(&flat, &targets, &weights, &mask, cfg.epochs, &mut rng)?;
        let net = learner.policy()?;
        let start_layout = static_layout.to_vec();
        let on_train: Vec<(RunResult, Vec<Label>)> = (0..train.len())
            .into_par_iter()
            .map(|d| {
                labelled(
                    d,
                    Some(Box::new(student(sc, &net, &start_layout, cfg.every_events))),
                )
            })
            .collect();
        let on_val: Vec<RunResult> = validation
            .par_iter()
            .map(|(s, j)| run_student(sc, &net, j, &start_layout, cfg.every_events, *s))
            .collect();
        let train_runs: Vec<RunResult> = on_train.iter().map(|(r, _)| r.clone()).collect();
        let val_ets = mean_et(&on_val, &val_refs);
        let point = StudentRound {
            round,
            samples: xs.len(),
            loss,
            train_et: avg(&mean_et(&train_runs, &train_refs)),
            validation_et: avg(&val_ets),
            validation_energy_above_bound: val_bounds.as_ref().map(|lbs| {
                avg(&on_val
                    .iter()
                    .zip(lbs)
                    .map(|(r, lb)| r.energy_wmin / lb - 1.0)
                    .collect::<Vec<_>>())
            }),
        };
        let energy = point
            .validation_energy_above_bound
            .map(|e| format!(", energy {:+.1}% above the bound", 100.0 * e))
            .unwrap_or_default();
        on_progress(&format!(
            "student round {round}: {} decisions, loss {loss:.4}, training ET {:.4}, validation ET {:.4}{energy}",
            point.samples, point.train_et, point.validation_et
        ));
        if cfg.lookahead.is_some() {
            let chosen = on_train
                .iter()
                .flat_map(|(_, seen)| seen.iter().map(|l| l.action));
            on_progress(&format!(
                "  the lookahead's choices on the student's days: {}",
                choices_summary(sc, &acts, &action_shares(chosen))
            ));
        }
        rounds.push(point);
        nets.push((net, val_ets));
        xs.extend(on_train.into_iter().flat_map(|(_, seen)| seen));
    }
    let kept = kept_round(&rounds, cfg.energy_cap)
        .ok_or_else(|| TrainError::Internal("no student round ran".into()))?;
    let kept_round = rounds[kept].round;
    let (network, val_ets) = nets.swap_remove(kept);
    Ok(ImitationOutcome {
        teacher,
        teacher_curve,
        teacher_validation_et,
        day_refinement,
        rounds,
        kept_round,
        static_validation_et: avg(&static_ets),
        guard: GuardVerdict::of(Paired::of(&val_ets, &static_ets)),
        seconds: started.elapsed().as_secs_f64(),
        network: Some(network),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartmig_sim::scenario::Scenario;

    /// A label whose two other actions score `stake` above the chosen one.
    fn label(stake: f64) -> Label {
        Label {
            features: Vec::new(),
            action: 0,
            margins: vec![0.0, stake as f32, stake as f32],
        }
    }

    #[test]
    fn soft_targets_share_a_decision_among_actions_by_their_margins() {
        let l = Label {
            features: Vec::new(),
            action: 1,
            margins: vec![0.5, 0.0, 20.0],
        };
        // Hard: the chosen action alone, whatever the margins.
        assert_eq!(target_actions(&l, 0.0, 1.0), vec![(1, 1.0)]);
        // Soft: odds exp(-0.5) : 1, the action 20 mean stakes worse left out.
        let soft = target_actions(&l, 1.0, 1.0);
        let odds = (-0.5f64).exp();
        assert_eq!(soft.len(), 2);
        assert_eq!(soft[1].0, 1);
        assert!((f64::from(soft[1].1) - 1.0 / (1.0 + odds)).abs() < 1e-6);
        assert!((f64::from(soft[0].1) - odds / (1.0 + odds)).abs() < 1e-6);
        // A hotter temperature evens the shares out; a label nothing scored stays hard.
        assert!(target_actions(&l, 10.0, 1.0)[0].1 > soft[0].1);
        let unscored = Label {
            margins: Vec::new(),
            ..l
        };
        assert_eq!(target_actions(&unscored, 1.0, 1.0), vec![(1, 1.0)]);
    }

    #[test]
    fn a_labels_weight_follows_its_stake_as_far_as_asked() {
        let labels = [label(0.0), label(1.0), label(3.0)];
        assert_eq!(label_weights(&labels, 0.0, mean_stake(&labels)), vec![1.0; 3]);
        // In proportion: the mean stake (4/3) weighs 1, a decision that costs nothing 0.
        assert_eq!(
            label_weights(&labels, 1.0, mean_stake(&labels)),
            vec![0.0, 0.75, 2.25]
        );
        let half = label_weights(&labels, 0.5, mean_stake(&labels));
        assert_eq!(half, vec![0.5, 0.875, 1.625]);
        // No label at stake: every decision alike, whatever the weight.
        let calm = [label(0.0), label(0.0)];
        assert_eq!(label_weights(&calm, 1.0, mean_stake(&calm)), vec![1.0; 2]);
    }

    #[test]
    fn a_capped_training_keeps_the_best_round_within_the_cap_and_else_the_closest() {
        let round = |round, validation_et, e: Option<f64>| StudentRound {
            round,
            samples: 0,
            loss: 0.0,
            train_et: 0.0,
            validation_et,
            validation_energy_above_bound: e,
        };
        let rounds = [
            round(1, 0.62, Some(0.268)),
            round(2, 0.60, Some(0.272)),
            round(3, 0.61, Some(0.269)),
        ];
        // Without a cap the best ET wins, energy or not.
        assert_eq!(kept_round(&rounds, None), Some(1));
        // Under 27% the best ET among the rounds within it.
        assert_eq!(kept_round(&rounds, Some(0.27)), Some(2));
        // None within the cap: the one that exceeds it least.
        assert_eq!(kept_round(&rounds, Some(0.26)), Some(0));
        // Equal ET: the earlier round, as before energy was measured.
        let tied = [round(1, 0.6, None), round(2, 0.6, None)];
        assert_eq!(kept_round(&tied, Some(0.27)), Some(0));
        assert_eq!(kept_round(&[], None), None);
    }

    #[test]
    fn a_lookahead_layout_is_read_by_name_and_a_wrong_one_is_refused_by_name() {
        let sc = Scenario::reference(&[]).expect("reference scenario");
        let names = |l: &str| l.split(',').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            node_layout(&sc, &names("c1,c2,c6,c9"), 4).expect("a layout"),
            vec![0, 1, 5, 8]
        );
        let unknown = node_layout(&sc, &names("c1,c2,c6,c13"), 4).expect_err("c13");
        assert!(
            unknown.to_string().contains("c13 is not a configuration"),
            "{unknown}"
        );
        let short = node_layout(&sc, &names("c1,c2"), 8).expect_err("too short");
        assert!(
            short
                .to_string()
                .contains("c1,c2: 2 configurations, a node has 8 GPUs"),
            "{short}"
        );
    }

    #[test]
    fn the_lookaheads_choices_are_written_as_the_layout_flag_reads_them() {
        let sc = Scenario::reference(&[]).expect("reference scenario");
        let names = |l: &str| l.split(',').map(String::from).collect::<Vec<_>>();
        let acts: Vec<Vec<u16>> = ["c1,c1,c2,c2", "c2,c2,c6,c9"]
            .iter()
            .map(|l| node_layout(&sc, &names(l), 4).expect("a layout"))
            .collect();
        assert_eq!(
            choices_summary(&sc, &acts, &[(1, 0.75), (0, 0.25)]),
            "c2,c2,c6,c9 75%; c1,c1,c2,c2 25%"
        );
    }

    #[test]
    fn teacher_rows_move_the_surplus_to_the_deficit_with_the_fewest_moves() {
        let sc = Scenario::reference(&[]).unwrap();
        let k = sc.models[0].configurations.len();
        let layout = smartmig_sim::features::layout(k);
        // One rung: half c1 (0), half c6 (5).
        let params = LadderParams {
            rungs: vec![vec![0, 0, 5, 5]],
            base: vec![0],
            up: f64::INFINITY,
            down: f64::NEG_INFINITY,
            step: 1,
        };
        let mut x = vec![0f32; layout.dim()];
        x[1] = 0.75; // c2
        x[5] = 0.25; // c6
        let o = layout.time_of_day_offset();
        x[o + 1] = 1.0; // midnight
        let (rows, w) = teacher_rows(&params, &layout, k, &x);
        // c2 (0.75) keeps nothing: two thirds of its GPUs to c1 (0.5), one third to c6 (0.25).
        let c2 = &rows[k..2 * k];
        assert!(
            (c2[0] - 2.0 / 3.0).abs() < 1e-6 && (c2[5] - 1.0 / 3.0).abs() < 1e-6,
            "{c2:?}"
        );
        // c6 (0.25) is short of its 0.5: it stays whole.
        assert!((rows[5 * k + 5] - 1.0).abs() < 1e-6);
        // An absent configuration's row points at the rung's mix, weighted little.
        assert!((rows[0] - 0.5).abs() < 1e-6 && (rows[5] - 0.5).abs() < 1e-6);
        assert!(w[0] < 0.05 && w[1] > 0.7);
        for c in 0..k {
            let sum: f32 = rows[c * k..(c + 1) * k].iter().sum();
            assert!((sum - 1.0).abs() < 1e-5, "row {c} sums to {sum}");
        }
    }

    #[test]
    fn a_teacher_refined_on_each_training_day_scores_better_there() {
        let sc = Scenario::reference(&[]).unwrap();
        let b = &sc.scenario.baselines;
        let cfg = ImitationConfig {
            train_days: 2,
            validation_days: 2,
            teacher_rounds: 2,
            student_rounds: 1,
            epochs: 2,
            day_blocks: Some(24),
            energy_cap: Some(0.27),
            ..ImitationConfig::default()
        };
        let layout = b.static_best.clone().unwrap();
        let out = train_imitation(&sc, &cfg, &b.periodic, &layout, |_| {}).unwrap();
        let r = out.day_refinement.expect("refined teachers");
        assert_eq!(r.blocks, 24);
        // Each day starts from the common teacher, held to the energy it used there (no
        // penalty at the start); the search keeps only what scores better on that day.
        assert!(r.score < r.start_score, "{r:?}");
        let common = ImitationConfig {
            day_blocks: None,
            ..cfg
        };
        let out = train_imitation(&sc, &common, &b.periodic, &layout, |_| {}).unwrap();
        assert!(out.day_refinement.is_none());
    }

    #[test]
    fn finer_blocks_keep_the_rung_of_the_block_they_start_in() {
        let p = LadderParams {
            rungs: vec![vec![0], vec![1], vec![5]],
            base: vec![0, 2, 1],
            up: 1.0,
            down: 0.2,
            step: 1,
        };
        let fine = with_blocks(&p, 6);
        assert_eq!(fine.base, vec![0, 0, 2, 2, 1, 1]);
        for minute in [0.0, 300.0, 500.0, 1000.0, 1439.0] {
            for waiting in [0.0, 0.5, 2.0] {
                assert_eq!(
                    fine.rung(minute, waiting),
                    p.rung(minute, waiting),
                    "{minute} {waiting}"
                );
            }
        }
    }

    #[test]
    fn the_minute_of_day_comes_back_from_the_time_features() {
        let layout = smartmig_sim::features::layout(12);
        let o = layout.time_of_day_offset();
        for minute in [0.0, 240.0, 719.5, 1200.0] {
            let a = (minute / DAY_MIN * std::f64::consts::TAU) as f32;
            let mut x = vec![0f32; layout.dim()];
            x[o] = a.sin();
            x[o + 1] = a.cos();
            assert!((minute_of(&layout, &x) - minute).abs() < 0.01, "{minute}");
        }
    }
}
