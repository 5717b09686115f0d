//! No simulated policy beats either bound: random small clusters and job sets, every
//! scheduler, static layouts of random configurations, no partitioning, periodic
//! repartitioning, preempt and drain semantics.

use proptest::prelude::*;

use super::*;
use smartmig_sim::partition::{Periodic, Repartitioner, Static};
use smartmig_sim::scenario::{ResolvedScenario, Scenario, Semantics};
use smartmig_sim::sched::Scheduler;
use smartmig_sim::workload::Job;
use smartmig_sim::{RunOptions, RunResult, Simulation};

/// A scenario of `n` GPUs of `model` (plus one H200 when `mixed`) with a periodic
/// schedule switching at 00:05.
fn cluster(model: &str, n: u32, mixed: bool, periodic: [&str; 2]) -> ResolvedScenario {
    let extra = if mixed {
        ", { model = \"h200-141gb\", count = 1 }"
    } else {
        ""
    };
    let text = format!(
        "version = 1\nname = \"t\"\n[cluster]\ngpus = [{{ model = \"{model}\", count = {n} }}{extra}]\n\
         [workload]\nsource = \"trace\"\ntrace = \"none\"\nformat = \"jobs\"\n\
         [[baselines.periodic]]\nat = \"00:00\"\nlayout = [\"{}\"]\n\
         [[baselines.periodic]]\nat = \"00:05\"\nlayout = [\"{}\"]\n",
        periodic[0], periodic[1]
    );
    match Scenario::parse(&text, "test", &[]) {
        Ok(sc) => sc,
        Err(e) => panic!("test scenario: {e}"),
    }
}

/// What a job is drawn from: release, 1g time, speed-up factors, deadline factor.
type JobSeed = (f64, f64, [f64; 4], f64);

fn jobs_from(seeds: &[JobSeed]) -> Vec<Job> {
    let mut v: Vec<Job> = seeds
        .iter()
        .map(|&(release, p1, grow, slack)| {
            // Speed-ups non-decreasing, up to 1.2× linear: superlinear jobs exercise the
            // minimum over slice sizes in the work of a job.
            let mut speed = [1.0; 5];
            for (i, k) in [2.0, 3.0, 4.0, 7.0].iter().enumerate() {
                speed[i + 1] = (speed[i] + grow[i] * (1.2 * k - speed[i])).max(speed[i]);
            }
            let times = speed.map(|s| p1 / s);
            Job {
                id: 0,
                release,
                deadline: release + slack * times[4],
                times,
                class: 0,
            }
        })
        .collect();
    v.sort_by(|a, b| a.release.total_cmp(&b.release));
    for (i, j) in v.iter_mut().enumerate() {
        j.id = i as u32;
    }
    v
}

fn job_seed() -> impl Strategy<Value = JobSeed> {
    (
        0.0..12.0f64,
        0.5..25.0f64,
        prop::array::uniform4(0.0..1.0f64),
        0.3..2.5f64,
    )
}

fn scheduler() -> impl Strategy<Value = Scheduler> {
    prop_oneof![
        Just(Scheduler::Edf),
        Just(Scheduler::Met),
        Just(Scheduler::Cedf),
        Just(Scheduler::Random)
    ]
}

fn config() -> impl Strategy<Value = String> {
    (1u32..=12).prop_map(|c| format!("c{c}"))
}

/// Policy kind: 0 static (random configurations), 1 none, 2 periodic.
fn run(
    sc: &ResolvedScenario,
    jobs: &[Job],
    kind: u8,
    layout: &[String],
    scheduler: Scheduler,
    semantics: Semantics,
    seed: u64,
) -> RunResult {
    let mut policy: Box<dyn Repartitioner> = match kind {
        0 => Box::new(Static::new("static", layout.to_vec())),
        1 => Box::new(Static::none()),
        _ => Box::new(Periodic::new(sc, &sc.scenario.baselines.periodic)),
    };
    let opts = RunOptions {
        scheduler,
        semantics,
        seed,
        sample_every: None,
    };
    Simulation::new(sc, jobs, opts).run(policy.as_mut())
}

fn semantics() -> impl Strategy<Value = Semantics> {
    prop_oneof![Just(Semantics::Preempt), Just(Semantics::Drain)]
}

fn model() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("a100-40gb"), Just("h100-80gb")]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn no_simulated_policy_uses_less_energy_than_the_energy_bound(
        model in model(),
        gpus in 1u32..=3,
        mixed in any::<bool>(),
        seeds in prop::collection::vec(job_seed(), 3..=12),
        kind in 0u8..3,
        layout in prop::collection::vec(config(), 3),
        periodic in (config(), config()),
        scheduler in scheduler(),
        semantics in semantics(),
        seed in 0u64..1000,
    ) {
        let sc = cluster(model, gpus, mixed, [&periodic.0, &periodic.1]);
        let jobs = jobs_from(&seeds);
        let r = run(&sc, &jobs, kind, &layout, scheduler, semantics, seed);
        let b = energy_bound(&relax(&jobs), EnergyModel::from_scenario(&sc));
        prop_assert!(b.energy_wmin > 0.0);
        prop_assert!(
            r.energy_wmin >= b.energy_wmin * (1.0 - 1e-9),
            "{} {:?} {:?}: energy {} below the bound {}",
            r.policy, scheduler, semantics, r.energy_wmin, b.energy_wmin
        );
        prop_assert!(r.makespan_min >= b.makespan_min * (1.0 - 1e-9));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn no_simulated_policy_is_less_late_than_the_tardiness_bound(
        gpus in 1u32..=2,
        seeds in prop::collection::vec(job_seed(), 3..=12),
        kind in 0u8..3,
        layout in prop::collection::vec(config(), 2),
        periodic in (config(), config()),
        semantics in semantics(),
        seed in 0u64..1000,
    ) {
        let sc = cluster("a100-40gb", gpus, false, [&periodic.0, &periodic.1]);
        let jobs = jobs_from(&seeds);
        // Small MIPs with a short limit: a MIP stopped early reports its dual bound, which
        // must hold as well.
        let opts = TardinessOptions { exact_cells: 150, time_limit_s: 2.0, ..TardinessOptions::default() };
        let b = match tardiness_bound(&relax(&jobs), sc.gpus.len(), &opts) {
            Ok(b) => b,
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        };
        // One bound, every scheduler: the bound does not depend on the policy.
        for scheduler in [Scheduler::Edf, Scheduler::Met, Scheduler::Cedf, Scheduler::Random] {
            let r = run(&sc, &jobs, kind, &layout, scheduler, semantics, seed);
            prop_assert!(
                r.avg_tardiness_min >= b.avg_tardiness_min - 1e-6,
                "{} {:?} {:?}: tardiness {} below the bound {} ({})",
                r.policy, scheduler, semantics, r.avg_tardiness_min, b.avg_tardiness_min, b.method
            );
        }
    }
}
