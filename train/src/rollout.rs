//! One training episode: a simulated day under the current policy, turned into the
//! per-decision samples PPO learns from.

use rand_chacha::ChaCha8Rng;
use smartmig_eval::compare::run_reference;

use smartmig_policy::{FeatureLayout, PolicyNetwork, SamplingConfig};
use smartmig_sim::partition::mean_field::{DecisionRecord, MeanField};
use smartmig_sim::partition::{DecisionView, Repartitioner};
use smartmig_sim::scenario::ResolvedScenario;
use smartmig_sim::sched::Scheduler;
use smartmig_sim::workload::{self, TraceError};
use smartmig_sim::Objective;
use smartmig_sim::{RunOptions, Simulation};

/// What one episode gives the learner.
#[derive(Debug, Clone)]
pub struct Episode {
    /// The day's seed.
    pub seed: u64,
    /// Decisions in order.
    pub steps: Vec<DecisionRecord>,
    /// Reward after each decision (until the next one or the end).
    pub rewards: Vec<f32>,
    /// ET of the policy against static CEDF on the same day.
    pub et: f64,
    /// ET of the same day with the starting layout kept (the rewards sum to
    /// `start_et - et`).
    pub start_et: f64,
    /// Energy, W·min.
    pub energy_wmin: f64,
    /// Average tardiness, minutes.
    pub avg_tardiness_min: f64,
    /// Configuration changes.
    pub repartitions: u64,
}

/// Settings of the policy during rollouts.
#[derive(Debug, Clone)]
pub struct RolloutSpec {
    /// Decide every this many arrivals and completions.
    pub every_events: u32,
    /// Top-k kept per row.
    pub top_k: usize,
    /// Starting layout.
    pub initial: Vec<String>,
}

/// Energy and lateness accrued over time by a run that keeps its starting layout.
struct Trace {
    /// (time, energy W·min, lateness job-minutes), at every arrival and completion.
    points: Vec<(f64, f64, f64)>,
    initial: Vec<String>,
    /// Configurations of the scenario's GPU model (the layout the tracker is built for).
    k: usize,
}

impl Repartitioner for Trace {
    fn name(&self) -> String {
        "trace".into()
    }
    fn initial_layout(&mut self, sc: &ResolvedScenario) -> Vec<u16> {
        sc.layout_configs(&self.initial)
    }
    fn every_events(&self) -> Option<u32> {
        Some(1)
    }
    fn feature_layout(&self) -> Option<FeatureLayout> {
        Some(smartmig_sim::features::layout(self.k))
    }
    fn decide(&mut self, view: &DecisionView<'_>, _: &mut ChaCha8Rng) -> Vec<(u32, u16)> {
        self.points.push((view.now, view.energy_wmin, view.lateness_min));
        Vec::new()
    }
}

impl Trace {
    /// Energy and lateness accrued by time `t` (linear between recorded points; the
    /// totals after the run ended).
    fn at(&self, t: f64) -> (f64, f64) {
        let i = self.points.partition_point(|p| p.0 <= t);
        match (i.checked_sub(1).map(|j| self.points[j]), self.points.get(i)) {
            (Some(a), Some(b)) if b.0 > a.0 => {
                let w = (t - a.0) / (b.0 - a.0);
                (a.1 + w * (b.1 - a.1), a.2 + w * (b.2 - a.2))
            }
            (Some(a), _) => (a.1, a.2),
            (None, _) => (0.0, 0.0),
        }
    }
}

/// Runs one day with `net` and returns its samples, rewards and outcome.
///
/// Reward of step t: −((ΔL − ΔL₀)/L_ref + a·(ΔE − ΔE₀)/E_ref)/(1 + a), where ΔL is the
/// lateness (job-minutes past deadline) and ΔE the energy accrued between decision t and
/// the next, ΔL₀ and ΔE₀ the same over the same interval for the day run with the
/// starting layout kept, and L_ref, E_ref the totals of static CEDF on the same day. The
/// rewards of a day sum to ET(starting layout) − ET(policy); subtracting what the day
/// costs anyway removes the rush hours' noise from the credit each decision gets.
pub fn run_episode(
    sc: &ResolvedScenario,
    net: &PolicyNetwork,
    spec: &RolloutSpec,
    seed: u64,
) -> Result<Episode, TraceError> {
    let jobs = workload::from_scenario(sc, seed, false)?;
    let reference = run_reference(sc, &jobs, seed);
    let objective = Objective::new(&sc.scenario.objective, reference.mean_full_gpu_min);
    let a = objective.energy_weight;
    let (e_ref, t_ref) = (reference.energy_wmin, reference.avg_tardiness_min);
    let n = jobs.jobs.len().max(1) as f64;
    // ET's tardiness term is (t + τ)/(t_ref + τ): lateness counts per (t_ref + τ)·n.
    let l_ref = (t_ref + objective.tolerance_min) * n;
    let sampling = SamplingConfig {
        top_k: spec.top_k,
        stay_threshold: 0.0,
    };
    let k = sc.models[0].configurations.len();
    let mut policy = MeanField::new(
        sc,
        vec![net.clone()],
        smartmig_sim::features::layout(k),
        spec.initial.clone(),
        spec.every_events,
        sampling,
    );
    policy.record = Some(Vec::new());
    let opts = RunOptions::of(sc, Scheduler::Cedf, seed);
    let result = Simulation::new(sc, &jobs.jobs, opts.clone()).run(&mut policy);
    let steps = policy.record.take().unwrap_or_default();
    let mut kept = Trace {
        points: Vec::new(),
        initial: spec.initial.clone(),
        k,
    };
    let kept_result = Simulation::new(sc, &jobs.jobs, opts).run(&mut kept);
    let total_l = result.avg_tardiness_min * n;
    let mut rewards = Vec::with_capacity(steps.len());
    for (i, s) in steps.iter().enumerate() {
        let (t1, e1, l1) = steps
            .get(i + 1)
            .map_or((f64::INFINITY, result.energy_wmin, total_l), |x| {
                (x.now, x.energy_wmin, x.lateness_min)
            });
        let (e0a, l0a) = kept.at(s.now);
        let (e0b, l0b) = kept.at(t1);
        let dl = (l1 - s.lateness_min) - (l0b - l0a);
        let de = (e1 - s.energy_wmin) - (e0b - e0a);
        rewards.push((-(dl / l_ref + a * de / e_ref) / (1.0 + a)) as f32);
    }
    let et = objective.et(result.energy_wmin, result.avg_tardiness_min, e_ref, t_ref);
    let start_et = objective.et(
        kept_result.energy_wmin,
        kept_result.avg_tardiness_min,
        e_ref,
        t_ref,
    );
    Ok(Episode {
        seed,
        steps,
        rewards,
        et,
        start_et,
        energy_wmin: result.energy_wmin,
        avg_tardiness_min: result.avg_tardiness_min,
        repartitions: result.repartitions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use smartmig_eval::compare::run_static;
    use smartmig_policy::Activation;

    #[test]
    fn a_days_rewards_sum_to_the_et_it_gained_over_keeping_the_start_layout() {
        let sc = smartmig_sim::scenario::Scenario::reference(&["workload.days=0.25".into()]).unwrap();
        let k = sc.models[0].configurations.len();
        let dim = smartmig_sim::features::feature_dim(k);
        // An untrained network with no stay bias moves GPUs often: a day unlike the start.
        let net = PolicyNetwork::init(
            &[dim, 16, k * k],
            Activation::Tanh,
            &mut ChaCha8Rng::seed_from_u64(3),
        );
        let initial = vec!["c2".to_string(), "c6".to_string()];
        let spec = RolloutSpec {
            every_events: 5,
            top_k: 3,
            initial: initial.clone(),
        };
        let ep = run_episode(&sc, &net, &spec, 11).unwrap();
        assert!(ep.repartitions > 0, "the test needs a policy that moves");
        assert_eq!(ep.rewards.len(), ep.steps.len());
        let jobs = workload::from_scenario(&sc, 11, false).unwrap();
        let kept = run_static(&sc, &jobs, Scheduler::Cedf, &initial, 11)
            .et(&run_reference(&sc, &jobs, 11), &sc.scenario.objective);
        let sum: f64 = ep.rewards.iter().map(|&r| f64::from(r)).sum();
        assert!(
            (ep.start_et - kept).abs() < 1e-9,
            "the kept run is the static run"
        );
        assert!(
            (sum - (kept - ep.et)).abs() < 1e-3,
            "rewards {sum} vs ET gain {}",
            kept - ep.et
        );
    }
}
