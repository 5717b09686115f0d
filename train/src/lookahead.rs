//! A causal lookahead teacher: every `plan_min` minutes it tries each of its actions (the
//! rungs of a base ladder, and any further node layouts it is given) for the next
//! `hold_min` minutes, followed by the base ladder (or by a learned policy, when given
//! one as its rollout), on `samples` futures drawn from the scenario's arrival model after
//! the present (the past is the day's own), and keeps the action with the best mean score.
//!
//! It knows what a controller could know, the jobs that have arrived and the arrival
//! model, never the day's future arrivals: the labels it gives are functions of what the
//! network could in principle learn, unlike a teacher refined on the day itself. It is
//! too slow for smartmigd (thousands of simulated days a day); the network learns it.

use rand_chacha::ChaCha8Rng;
use smartmig_policy::FeatureLayout;
use smartmig_sim::decision::{DecisionView, Repartitioner};
use smartmig_sim::partition::ladder::{propose, LadderParams};
use smartmig_sim::scenario::ResolvedScenario;
use smartmig_sim::sched::Scheduler;
use smartmig_sim::workload::JobSet;
use smartmig_sim::{Objective, RunOptions, RunResult, Simulation};

/// Seeds of the sampled futures start here (no training, validation or evaluation seed
/// is this large).
pub const SAMPLE_SEED_BASE: u64 = 7_000_000;

/// Settings of the lookahead teacher.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LookaheadConfig {
    /// Futures sampled per day (common to every candidate: common random numbers).
    pub samples: usize,
    /// Minutes between plans.
    pub plan_min: f64,
    /// Minutes a planned rung holds before the base ladder takes over.
    pub hold_min: f64,
    /// Weight of E/E_ref added to ET in the score (0: ET alone).
    pub energy_weight: f64,
}

impl Default for LookaheadConfig {
    fn default() -> Self {
        LookaheadConfig {
            samples: 16,
            plan_min: 15.0,
            hold_min: 60.0,
            energy_weight: 0.0,
        }
    }
}

/// What the lookahead scores a simulated day by: ET against mean reference values (a
/// controller does not know the day's own), plus the energy weight's term.
#[derive(Debug, Clone, Copy)]
pub struct Score {
    objective: Objective,
    e_ref: f64,
    t_ref: f64,
    energy_weight: f64,
}

impl Score {
    /// The score against the mean of `refs` (reference runs of training days).
    pub fn new(sc: &ResolvedScenario, refs: &[RunResult], energy_weight: f64) -> Score {
        let n = refs.len().max(1) as f64;
        let mean = |f: fn(&RunResult) -> f64| refs.iter().map(f).sum::<f64>() / n;
        Score {
            objective: Objective::new(&sc.scenario.objective, mean(|r| r.mean_full_gpu_min)),
            e_ref: mean(|r| r.energy_wmin),
            t_ref: mean(|r| r.avg_tardiness_min),
            energy_weight,
        }
    }

    /// The score of one run (lower is better).
    pub fn of(&self, r: &RunResult) -> f64 {
        let e = if self.e_ref > 0.0 {
            r.energy_wmin / self.e_ref
        } else {
            1.0
        };
        self.objective
            .et(r.energy_wmin, r.avg_tardiness_min, self.e_ref, self.t_ref)
            + self.energy_weight * e
    }
}

/// Waiting jobs per GPU, from the features of model 0 (None without features).
fn waiting(view: &DecisionView<'_>, layout: &FeatureLayout, buf: &mut Vec<f32>) -> Option<f64> {
    buf.clear();
    view.write_features(0, buf)
        .then(|| f64::from(buf[layout.queue_summary_offset()]))
}

/// A hypothetical day: the proposals a run made at its first decisions, replayed, then an
/// action held until a time, then the rollout policy if there is one, else the base ladder.
struct Replay<'a> {
    base: &'a LadderParams,
    rollout: Option<&'a mut dyn Repartitioner>,
    actions: &'a [Vec<u16>],
    layout: FeatureLayout,
    every: u32,
    initial: &'a [u16],
    recorded: &'a [Vec<(u32, u16)>],
    calls: usize,
    rung: usize,
    until: f64,
    buf: Vec<f32>,
}

impl Repartitioner for Replay<'_> {
    fn name(&self) -> String {
        "lookahead-replay".into()
    }
    fn initial_layout(&mut self, _: &ResolvedScenario) -> Vec<u16> {
        self.initial.to_vec()
    }
    fn every_events(&self) -> Option<u32> {
        Some(self.every)
    }
    fn feature_layout(&self) -> Option<FeatureLayout> {
        Some(self.layout.clone())
    }
    fn decide(&mut self, view: &DecisionView<'_>, rng: &mut ChaCha8Rng) -> Vec<(u32, u16)> {
        let call = self.calls;
        self.calls += 1;
        if let Some(p) = self.recorded.get(call) {
            return p.clone();
        }
        if view.now >= self.until {
            if let Some(r) = self.rollout.as_deref_mut() {
                return r.decide(view, rng);
            }
        }
        let Some(w) = waiting(view, &self.layout, &mut self.buf) else {
            return Vec::new();
        };
        let rung = if view.now < self.until {
            self.rung
        } else {
            self.base.rung(view.now, w)
        };
        propose(view, &self.actions[rung])
    }
}

/// The lookahead's actions: the base ladder's rungs (so a rung's index is its action's),
/// then each of `extra` (a node layout, sorted as rungs are) that is not already one.
pub fn actions(base: &LadderParams, extra: &[Vec<u16>]) -> Vec<Vec<u16>> {
    let mut all = base.rungs.clone();
    for layout in extra {
        let mut l = layout.clone();
        l.sort_unstable();
        if !all.contains(&l) {
            all.push(l);
        }
    }
    all
}

/// One decision the lookahead labelled.
#[derive(Debug, Clone, PartialEq)]
pub struct Label {
    /// The features the deciding policy saw.
    pub features: Vec<f32>,
    /// The action the lookahead wants there (an index into its actions).
    pub action: usize,
    /// Each action's mean score above the chosen one's, per future, at the plan this
    /// decision follows (0 for the chosen action); empty where nothing was scored: the
    /// plan's hold is over and the base ladder decides, or a teacher that does not score
    /// its alternatives labelled it.
    pub margins: Vec<f32>,
}

impl Label {
    /// What getting it wrong costs: the mean margin of the actions not chosen (0 where
    /// nothing was scored or every action scored the same).
    pub fn stake(&self) -> f64 {
        let others = self.margins.len().saturating_sub(1);
        if others == 0 {
            return 0.0;
        }
        self.margins.iter().map(|&m| f64::from(m)).sum::<f64>() / others as f64
    }
}

/// How often each action was chosen: (action index, share of the choices), most chosen
/// first (the lower index on a tie); actions never chosen are left out.
pub fn action_shares(chosen: impl IntoIterator<Item = usize>) -> Vec<(usize, f64)> {
    let mut counts = std::collections::BTreeMap::<usize, usize>::new();
    for a in chosen {
        *counts.entry(a).or_default() += 1;
    }
    let total = counts.values().sum::<usize>().max(1) as f64;
    let mut shares: Vec<(usize, usize)> = counts.into_iter().collect();
    // Stable, so a tie keeps the lower index first.
    shares.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    shares.into_iter().map(|(i, n)| (i, n as f64 / total)).collect()
}

/// What the lookahead chose at its last plan.
#[derive(Debug, Clone)]
struct Plan {
    /// The action held.
    action: usize,
    /// When the base ladder takes over again.
    until: f64,
    /// Each action's mean score above it (see [`Label::margins`]).
    margins: Vec<f32>,
}

/// The lookahead on one day, acting itself or watching another policy (the student) act
/// and labelling what it sees.
pub struct Lookahead<'a> {
    sc: &'a ResolvedScenario,
    day: &'a JobSet,
    futures: &'a [JobSet],
    seed: u64,
    score: Score,
    cfg: LookaheadConfig,
    base: &'a LadderParams,
    actions: &'a [Vec<u16>],
    layout: FeatureLayout,
    every: u32,
    /// The policy that acts (None: the lookahead itself).
    actor: Option<Box<dyn Repartitioner + 'a>>,
    /// The policy imagined after a held action (None: the base ladder).
    rollout: Option<Box<dyn Repartitioner + 'a>>,
    initial: Vec<u16>,
    recorded: Vec<Vec<(u32, u16)>>,
    plan: Option<Plan>,
    next_plan: f64,
    buf: Vec<f32>,
    /// Every decision's features and the lookahead's action there.
    pub labels: Vec<Label>,
}

impl<'a> Lookahead<'a> {
    /// The lookahead on `day` (run with `seed`), over the base ladder `base` with
    /// `actions` (from [`actions`]: the base's rungs first), imagining `futures` (whole
    /// days of the arrival model: only their jobs after the present are used); `actor`,
    /// when given, acts instead of it.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        sc: &'a ResolvedScenario,
        day: &'a JobSet,
        futures: &'a [JobSet],
        seed: u64,
        score: Score,
        cfg: LookaheadConfig,
        base: &'a LadderParams,
        actions: &'a [Vec<u16>],
        every: u32,
        actor: Option<Box<dyn Repartitioner + 'a>>,
    ) -> Lookahead<'a> {
        let k = sc.models[0].configurations.len();
        Lookahead {
            sc,
            day,
            futures,
            seed,
            score,
            cfg,
            base,
            actions,
            layout: smartmig_sim::features::layout(k),
            every: every.max(1),
            actor,
            rollout: None,
            initial: Vec::new(),
            recorded: Vec::new(),
            plan: None,
            next_plan: 0.0,
            buf: Vec::new(),
            labels: Vec::new(),
        }
    }

    /// Imagines `policy` instead of the base ladder after each held action (it must be
    /// stateless between decisions: one instance serves every imagined day).
    pub fn with_rollout(mut self, policy: Box<dyn Repartitioner + 'a>) -> Self {
        self.rollout = Some(policy);
        self
    }

    /// The day's jobs released by `now`, then `sample`'s released after it.
    fn future(&self, now: f64, sample: &JobSet) -> JobSet {
        let mut jobs: Vec<_> = self
            .day
            .jobs
            .iter()
            .filter(|j| j.release <= now)
            .copied()
            .collect();
        jobs.extend(sample.jobs.iter().filter(|j| j.release > now).copied());
        let mut set = JobSet {
            jobs,
            classes: self.day.classes.clone(),
        };
        set.normalise();
        set
    }

    /// The last plan while its hold lasts.
    fn held(&self, now: f64) -> Option<&Plan> {
        self.plan.as_ref().filter(|p| now < p.until)
    }

    /// The action with the best mean score over the futures (`current` on a tie), and each
    /// action's mean score above it, per future.
    fn best_action(&mut self, now: f64, current: usize) -> (usize, Vec<f32>) {
        let futures: Vec<JobSet> = self.futures.iter().map(|s| self.future(now, s)).collect();
        let candidates = std::iter::once(current).chain((0..self.actions.len()).filter(|&r| r != current));
        let mut best = (f64::INFINITY, current);
        let mut totals = vec![0.0; self.actions.len()];
        for action in candidates {
            let total: f64 = futures
                .iter()
                .map(|f| {
                    let mut replay = Replay {
                        base: self.base,
                        rollout: self.rollout.as_deref_mut().map(|r| r as &mut dyn Repartitioner),
                        actions: self.actions,
                        layout: self.layout.clone(),
                        every: self.every,
                        initial: &self.initial,
                        recorded: &self.recorded,
                        calls: 0,
                        rung: action,
                        until: now + self.cfg.hold_min,
                        buf: Vec::new(),
                    };
                    let opts = RunOptions::of(self.sc, Scheduler::Cedf, self.seed);
                    self.score
                        .of(&Simulation::new(self.sc, &f.jobs, opts).run(&mut replay))
                })
                .sum();
            totals[action] = total;
            if total < best.0 - 1e-12 {
                best = (total, action);
            }
        }
        let samples = futures.len().max(1) as f64;
        let margins = totals
            .iter()
            .map(|t| ((t - best.0) / samples).max(0.0) as f32)
            .collect();
        (best.1, margins)
    }
}

impl Repartitioner for Lookahead<'_> {
    fn name(&self) -> String {
        "lookahead".into()
    }
    fn initial_layout(&mut self, sc: &ResolvedScenario) -> Vec<u16> {
        self.initial = match self.actor.as_mut() {
            Some(a) => a.initial_layout(sc),
            None => self.base.initial_layout(sc.gpus.len()),
        };
        self.initial.clone()
    }
    fn every_events(&self) -> Option<u32> {
        Some(self.every)
    }
    fn feature_layout(&self) -> Option<FeatureLayout> {
        Some(self.layout.clone())
    }
    fn decide(&mut self, view: &DecisionView<'_>, rng: &mut ChaCha8Rng) -> Vec<(u32, u16)> {
        let Some(w) = waiting(view, &self.layout, &mut self.buf) else {
            return Vec::new();
        };
        // The held plan; past its hold, the base ladder's rung, which nothing was scored
        // against.
        let rung = self.base.rung(view.now, w);
        if view.now >= self.next_plan {
            let current = self.held(view.now).map_or(rung, |p| p.action);
            let (action, margins) = self.best_action(view.now, current);
            self.plan = Some(Plan {
                action,
                until: view.now + self.cfg.hold_min,
                margins,
            });
            self.next_plan = view.now + self.cfg.plan_min;
        }
        let (action, margins) = self
            .held(view.now)
            .map_or((rung, Vec::new()), |p| (p.action, p.margins.clone()));
        self.labels.push(Label {
            features: self.buf.clone(),
            action,
            margins,
        });
        let proposals = match self.actor.as_mut() {
            Some(a) => a.decide(view, rng),
            None => propose(view, &self.actions[action]),
        };
        self.recorded.push(proposals.clone());
        proposals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartmig_sim::partition::ladder::Ladder;
    use smartmig_sim::scenario::Scenario;

    fn base(sc: &ResolvedScenario) -> LadderParams {
        let schedule = sc.scenario.baselines.periodic_best.clone().unwrap_or_default();
        let layout = sc.scenario.baselines.static_best.clone().unwrap_or_default();
        crate::imitation::ladder_from(sc, &schedule, &layout, 6)
    }

    /// One sampled future, a plan every 4 hours held for 4, ET alone: quick to run.
    fn one_future_every_4_hours() -> LookaheadConfig {
        LookaheadConfig {
            samples: 1,
            plan_min: 240.0,
            hold_min: 240.0,
            energy_weight: 0.0,
        }
    }

    #[test]
    fn a_replayed_day_is_the_day_itself() {
        replays_the_day(&["workload.multiplier=12".into()]);
    }

    #[test]
    fn a_replayed_drain_day_with_padding_is_the_day_itself() {
        replays_the_day(&[
            "workload.multiplier=16".into(),
            "repartition.semantics=\"drain\"".into(),
            "repartition.index_rule=\"padded-assigned\"".into(),
        ]);
    }

    fn replays_the_day(sets: &[String]) {
        // The lookahead imagines each candidate by replaying the decisions made so far:
        // with the day's own future and the rung the run then kept, the replay must be
        // the run, or every candidate would be scored from a wrong present.
        let sc = Scenario::reference(sets).expect("reference scenario");
        let day = smartmig_sim::workload::from_scenario(&sc, 3, false).expect("jobs");
        let base = base(&sc);
        let refs = [smartmig_eval::compare::run_reference(&sc, &day, 3)];
        let cfg = one_future_every_4_hours();
        let futures = [smartmig_sim::workload::from_scenario(&sc, SAMPLE_SEED_BASE, false).expect("jobs")];
        let score = Score::new(&sc, &refs, 0.0);
        let acts = actions(&base, &[]);
        let mut la = Lookahead::new(&sc, &day, &futures, 3, score, cfg, &base, &acts, 5, None);
        let run = Simulation::new(&sc, &day.jobs, RunOptions::of(&sc, Scheduler::Cedf, 3)).run(&mut la);
        assert!(la.labels.len() > 100, "{} decisions", la.labels.len());
        assert!(run.repartitions > 0, "a day with no re-layout proves nothing");
        let mut replay = Replay {
            base: &base,
            rollout: None,
            actions: &acts,
            layout: la.layout.clone(),
            every: 5,
            initial: &la.initial,
            recorded: &la.recorded,
            calls: 0,
            rung: 0,
            until: f64::NEG_INFINITY,
            buf: Vec::new(),
        };
        let again = Simulation::new(&sc, &day.jobs, RunOptions::of(&sc, Scheduler::Cedf, 3)).run(&mut replay);
        assert_eq!(again.energy_wmin, run.energy_wmin);
        assert_eq!(again.avg_tardiness_min, run.avg_tardiness_min);
        assert_eq!(again.repartitions, run.repartitions);
    }

    /// A policy that never moves and notes when it was asked.
    struct Still {
        asked: Vec<f64>,
    }

    impl Repartitioner for Still {
        fn name(&self) -> String {
            "still".into()
        }
        fn initial_layout(&mut self, _: &ResolvedScenario) -> Vec<u16> {
            Vec::new()
        }
        fn every_events(&self) -> Option<u32> {
            Some(5)
        }
        fn feature_layout(&self) -> Option<FeatureLayout> {
            None
        }
        fn decide(&mut self, view: &DecisionView<'_>, _: &mut ChaCha8Rng) -> Vec<(u32, u16)> {
            self.asked.push(view.now);
            Vec::new()
        }
    }

    #[test]
    fn a_rollout_policy_decides_from_the_end_of_the_held_action_instead_of_the_base_ladder() {
        let sc = Scenario::reference(&["workload.multiplier=12".into()]).expect("reference scenario");
        let day = smartmig_sim::workload::from_scenario(&sc, 6, false).expect("jobs");
        let base = base(&sc);
        let k = sc.models[0].configurations.len();
        let acts = actions(&base, &[]);
        let initial = base.initial_layout(sc.gpus.len());
        let until = 360.0;
        let run = |replay: &mut Replay<'_>| {
            Simulation::new(&sc, &day.jobs, RunOptions::of(&sc, Scheduler::Cedf, 6)).run(replay)
        };
        let replay = |rollout| Replay {
            base: &base,
            rollout,
            actions: &acts,
            layout: smartmig_sim::features::layout(k),
            every: 5,
            initial: &initial,
            recorded: &[],
            calls: 0,
            rung: 0,
            until,
            buf: Vec::new(),
        };
        let plain = run(&mut replay(None));
        // The base ladder as the rollout is the plain replay.
        let mut ladder = Ladder::new(base.clone(), k, 5);
        let as_ladder = run(&mut replay(Some(&mut ladder)));
        assert_eq!(as_ladder.energy_wmin, plain.energy_wmin);
        assert_eq!(as_ladder.repartitions, plain.repartitions);
        // A rollout that never moves is asked only from the end of the held action on,
        // and its day keeps the held layout where the ladder's moved.
        let mut still = Still { asked: Vec::new() };
        let held = run(&mut replay(Some(&mut still)));
        assert!(!still.asked.is_empty(), "the rollout was never asked");
        assert!(
            still.asked.iter().all(|&t| t >= until),
            "asked before the held action ended"
        );
        assert!(
            held.repartitions < plain.repartitions,
            "{} re-layouts with a rollout that never moves, {} with the ladder",
            held.repartitions,
            plain.repartitions
        );
    }

    #[test]
    fn watching_a_policy_labels_its_decisions_without_changing_them() {
        let sc = Scenario::reference(&["workload.multiplier=12".into()]).expect("reference scenario");
        let day = smartmig_sim::workload::from_scenario(&sc, 4, false).expect("jobs");
        let base = base(&sc);
        let k = sc.models[0].configurations.len();
        // The actor: the base ladder one rung up (another policy than the lookahead's).
        let mut other = base.clone();
        other
            .base
            .iter_mut()
            .for_each(|b| *b = (*b + 1).min(other.rungs.len() - 1));
        let opts = RunOptions::of(&sc, Scheduler::Cedf, 4);
        let alone = Simulation::new(&sc, &day.jobs, opts.clone()).run(&mut Ladder::new(other.clone(), k, 5));
        let futures = [smartmig_sim::workload::from_scenario(&sc, SAMPLE_SEED_BASE, false).expect("jobs")];
        let cfg = LookaheadConfig {
            samples: 1,
            plan_min: 360.0,
            hold_min: 60.0,
            energy_weight: 0.0,
        };
        let score = Score::new(&sc, &[], 0.0);
        let actor = Box::new(Ladder::new(other, k, 5));
        let acts = actions(&base, &[]);
        let mut la = Lookahead::new(&sc, &day, &futures, 4, score, cfg, &base, &acts, 5, Some(actor));
        let watched = Simulation::new(&sc, &day.jobs, opts).run(&mut la);
        assert_eq!(watched.energy_wmin, alone.energy_wmin);
        assert_eq!(watched.avg_tardiness_min, alone.avg_tardiness_min);
        assert_eq!(la.labels.len(), la.recorded.len(), "one label a decision");
        assert!(la
            .labels
            .iter()
            .all(|l| l.action < base.rungs.len() && !l.features.is_empty()));
    }

    #[test]
    fn an_imagined_future_keeps_the_past_and_none_of_the_days_future() {
        let sc = Scenario::reference(&[]).expect("reference scenario");
        let day = smartmig_sim::workload::from_scenario(&sc, 1, false).expect("jobs");
        let sample = smartmig_sim::workload::from_scenario(&sc, SAMPLE_SEED_BASE, false).expect("jobs");
        let base = base(&sc);
        let score = Score::new(&sc, &[], 0.0);
        let acts = actions(&base, &[]);
        let la = Lookahead::new(
            &sc,
            &day,
            &[],
            1,
            score,
            LookaheadConfig::default(),
            &base,
            &acts,
            5,
            None,
        );
        let now = 600.0;
        let f = la.future(now, &sample);
        let past: Vec<_> = day.jobs.iter().filter(|j| j.release <= now).collect();
        assert!(!past.is_empty());
        for (a, b) in f.jobs.iter().zip(&past) {
            assert_eq!((a.release, a.deadline, a.times), (b.release, b.deadline, b.times));
        }
        let later: Vec<_> = f.jobs[past.len()..]
            .iter()
            .map(|j| (j.release, j.times))
            .collect();
        let sampled: Vec<_> = sample
            .jobs
            .iter()
            .filter(|j| j.release > now)
            .map(|j| (j.release, j.times))
            .collect();
        assert_eq!(later, sampled, "after the present, only the sample's jobs");
        assert!(f.jobs.iter().enumerate().all(|(i, j)| j.id as usize == i));
    }

    #[test]
    fn action_shares_count_each_choice_most_chosen_first() {
        let shares = action_shares([2, 0, 2, 5, 2, 0]);
        let order: Vec<usize> = shares.iter().map(|s| s.0).collect();
        assert_eq!(order, vec![2, 0, 5]);
        assert!((shares[0].1 - 0.5).abs() < 1e-12);
        assert!((shares[2].1 - 1.0 / 6.0).abs() < 1e-12);
        assert!(action_shares([]).is_empty());
    }

    #[test]
    fn further_actions_follow_the_rungs_sorted_and_once() {
        let base = LadderParams {
            rungs: vec![vec![0, 0, 1], vec![1, 1, 5]],
            base: vec![0],
            up: f64::INFINITY,
            down: f64::NEG_INFINITY,
            step: 1,
        };
        // One extra is a rung written in another order, one is new and unsorted.
        let all = actions(&base, &[vec![1, 0, 0], vec![5, 0, 1], vec![1, 0, 5]]);
        assert_eq!(all, vec![vec![0, 0, 1], vec![1, 1, 5], vec![0, 1, 5]]);
    }

    #[test]
    fn a_further_action_is_chosen_where_it_scores_better_than_every_rung() {
        // The base ladder has one rung, the paper's reference layout; whole GPUs score
        // better at this load in some block of the day, so the lookahead must take the
        // further action there, and act on it.
        let sc = Scenario::reference(&["workload.multiplier=12".into()]).expect("reference scenario");
        let day = smartmig_sim::workload::from_scenario(&sc, 5, false).expect("jobs");
        let reference: Vec<u16> = vec![0, 0, 1, 2, 2, 4, 4, 9];
        let base = LadderParams {
            rungs: vec![reference],
            base: vec![0],
            up: f64::INFINITY,
            down: f64::NEG_INFINITY,
            step: 1,
        };
        let acts = actions(&base, &[vec![0; 8]]);
        let cfg = one_future_every_4_hours();
        let futures = [smartmig_sim::workload::from_scenario(&sc, SAMPLE_SEED_BASE, false).expect("jobs")];
        let refs = [smartmig_eval::compare::run_reference(&sc, &day, 5)];
        let score = Score::new(&sc, &refs, 0.0);
        let mut la = Lookahead::new(&sc, &day, &futures, 5, score, cfg, &base, &acts, 5, None);
        let run = Simulation::new(&sc, &day.jobs, RunOptions::of(&sc, Scheduler::Cedf, 5)).run(&mut la);
        assert!(
            la.labels.iter().any(|l| l.action == 1),
            "the further action was never chosen"
        );
        assert!(la.labels.iter().all(|l| l.action < acts.len()));
        assert!(run.repartitions > 0, "the chosen action was not acted on");
        // Where the further action was chosen, the rung it beat scored worse: a stake.
        assert!(la.labels.iter().any(|l| l.action == 1 && l.stake() > 0.0));
        // The chosen action is the best scored: its margin is 0, no other's below it (so
        // every stake is finite and 0 or more).
        for l in la.labels.iter().filter(|l| !l.margins.is_empty()) {
            assert_eq!(l.margins[l.action], 0.0);
            assert!(l.margins.iter().all(|&m| m >= 0.0 && m.is_finite()));
        }
    }
}
