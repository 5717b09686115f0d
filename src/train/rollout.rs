//! One training episode: a simulated day under the current policy, turned into the
//! per-decision samples PPO learns from.

use crate::eval::compare::{baselines, run_baseline, REFERENCE};
use crate::partition::mean_field::{DecisionRecord, MeanField};
use crate::policy::{PolicyNetwork, SamplingConfig};
use crate::scenario::ResolvedScenario;
use crate::sched::Scheduler;
use crate::sim::metrics::MIN_T_REF;
use crate::sim::{RunOptions, Simulation};
use crate::workload::{self, TraceError};

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

/// Runs one day with `net` and returns its samples, rewards and outcome.
///
/// Reward of step t: −(ΔL/L_ref + a·ΔE/E_ref)/(1 + a), where ΔL is the lateness
/// (job-minutes past deadline) and ΔE the energy accrued between decision t and the next,
/// and L_ref, E_ref are the totals of static CEDF on the same day; the rewards of a day
/// sum to −ET (less the part before the first decision, which no action affects).
pub fn run_episode(
    sc: &ResolvedScenario,
    net: &PolicyNetwork,
    spec: &RolloutSpec,
    seed: u64,
) -> Result<Episode, TraceError> {
    let jobs = workload::from_scenario(sc, seed, false)?;
    let a = sc.scenario.objective.energy_weight;
    let reference = baselines(sc, None)
        .into_iter()
        .find(|p| p.name == REFERENCE)
        .map(|p| run_baseline(sc, &jobs, &p, seed));
    let (e_ref, t_ref) = match &reference {
        Some(r) => (r.energy_wmin, r.avg_tardiness_min),
        None => (1.0, 1.0),
    };
    let n = jobs.jobs.len().max(1) as f64;
    let l_ref = t_ref.max(MIN_T_REF) * n;
    let sampling = SamplingConfig {
        top_k: spec.top_k,
        stay_threshold: 0.0,
    };
    let k = sc.models[0].configurations.len();
    let mut policy = MeanField::new(
        sc,
        vec![net.clone()],
        crate::sim::features::layout(k),
        spec.initial.clone(),
        spec.every_events,
        sampling,
    );
    policy.record = Some(Vec::new());
    let opts = RunOptions {
        scheduler: Scheduler::Cedf,
        semantics: sc.scenario.repartition.semantics,
        seed,
        sample_every: None,
    };
    let result = Simulation::new(sc, &jobs.jobs, opts).run(&mut policy);
    let steps = policy.record.take().unwrap_or_default();
    let total_l = result.avg_tardiness_min * n;
    let mut rewards = Vec::with_capacity(steps.len());
    for (i, s) in steps.iter().enumerate() {
        let (e1, l1) = steps
            .get(i + 1)
            .map_or((result.energy_wmin, total_l), |x| (x.energy_wmin, x.lateness_min));
        let r = -((l1 - s.lateness_min) / l_ref + a * (e1 - s.energy_wmin) / e_ref) / (1.0 + a);
        rewards.push(r as f32);
    }
    let et = crate::sim::et(result.energy_wmin, result.avg_tardiness_min, e_ref, t_ref, a);
    Ok(Episode {
        seed,
        steps,
        rewards,
        et,
        energy_wmin: result.energy_wmin,
        avg_tardiness_min: result.avg_tardiness_min,
        repartitions: result.repartitions,
    })
}
