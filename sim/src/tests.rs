//! Golden tests: tiny hand-built clusters where each heuristic's schedule, energy and
//! tardiness are worked out by hand (the arithmetic is in the comments).

use rand_chacha::ChaCha8Rng;

use super::*;
use crate::partition::{DecisionView, Repartitioner, Static};
use crate::scenario::{ResolvedScenario, Scenario, Semantics};
use crate::sched::Scheduler;
use crate::workload::Job;

/// A scenario of `n` A100-40GBs whose jobs the test supplies, without the daemon's
/// re-layout limits (a decision acts at once).
fn cluster(n: u32, layout: &[&str], penalty_s: f64) -> ResolvedScenario {
    limited(
        n,
        layout,
        penalty_s,
        &[
            "repartition.persist_cycles=1",
            "repartition.min_relayout_interval_s=0",
        ],
    )
}

/// [`cluster`] without the device-index rule either (`index_rule = "off"`).
fn cluster_without_index_rule(n: u32, layout: &[&str], penalty_s: f64) -> ResolvedScenario {
    limited(
        n,
        layout,
        penalty_s,
        &[
            "repartition.persist_cycles=1",
            "repartition.min_relayout_interval_s=0",
            "repartition.index_rule=off",
        ],
    )
}

/// [`cluster`] with drain holding the changing instances free of new jobs
/// (`drain_hold = "instances"`, a model smartmigd cannot deliver).
fn cluster_holding_instances(n: u32, layout: &[&str], penalty_s: f64) -> ResolvedScenario {
    limited(
        n,
        layout,
        penalty_s,
        &[
            "repartition.persist_cycles=1",
            "repartition.min_relayout_interval_s=0",
            "repartition.drain_hold=instances",
        ],
    )
}

/// The same with the given `--set` overrides instead.
fn limited(n: u32, layout: &[&str], penalty_s: f64, sets: &[&str]) -> ResolvedScenario {
    let layout: Vec<String> = layout.iter().map(|c| format!("\"{c}\"")).collect();
    let text = format!(
        "version = 1\nname = \"t\"\n[cluster]\ngpus = [{{ model = \"a100-40gb\", count = {n} }}]\n\
         [workload]\nsource = \"trace\"\ntrace = \"none\"\nformat = \"jobs\"\n\
         [baselines]\nreference_layout = [{}]\n[repartition]\npenalty_s = {penalty_s}\nreconfigure_s = {penalty_s}\n",
        layout.join(", ")
    );
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::parse(&text, "test", &sets).unwrap()
}

fn job(id: u32, release: f64, deadline: f64, times: [f64; 5]) -> Job {
    Job {
        id,
        release,
        deadline,
        times,
        class: 0,
    }
}

const LINEAR7: [f64; 5] = [7.0, 3.5, 7.0 / 3.0, 1.75, 1.0];
const FLAT: [f64; 5] = [1.1, 1.0, 1.0, 1.0, 1.0];
/// A100-40GB power by busy slices.
const P: [f64; 8] = [40.0, 119.0, 160.0, 205.3, 243.9, 247.7, 248.5, 248.5];

fn run(sc: &ResolvedScenario, jobs: &[Job], scheduler: Scheduler, semantics: Semantics) -> RunResult {
    let mut policy = Static::new("static", sc.scenario.baselines.reference_layout.clone());
    run_with(sc, jobs, scheduler, semantics, &mut policy)
}

fn run_with(
    sc: &ResolvedScenario,
    jobs: &[Job],
    scheduler: Scheduler,
    semantics: Semantics,
    policy: &mut dyn Repartitioner,
) -> RunResult {
    let opts = RunOptions {
        scheduler,
        semantics,
        seed: 1,
        sample_every: None,
    };
    Simulation::new(sc, jobs, opts).run(policy)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn edf_gives_an_urgent_job_the_fastest_slice_and_a_loose_one_the_slowest_that_meets_its_deadline() {
    // One GPU in c2 (4g + 3g). J1 (d=1) is first by deadline; only a 7g would meet it, so
    // it takes the earliest finish, the 4g: 0..1.2, 0.2 late. J0 (d=3) fits on the 3g
    // (7/3 <= 3), the slowest slice meeting its deadline: 0..2.333.
    let sc = cluster(1, &["c2"], 4.0);
    let jobs = [
        job(0, 0.0, 3.0, LINEAR7),
        job(1, 0.0, 1.0, [4.0, 2.0, 1.5, 1.2, 1.0]),
    ];
    let r = run(&sc, &jobs, Scheduler::Edf, Semantics::Preempt);
    assert!(close(r.avg_tardiness_min, 0.1), "{}", r.avg_tardiness_min);
    assert!(close(r.makespan_min, 7.0 / 3.0));
    // 7 busy slices for 1.2 min, then 3 until 7/3.
    let e = P[7] * 1.2 + P[3] * (7.0 / 3.0 - 1.2);
    assert!(close(r.energy_wmin, e), "{} vs {e}", r.energy_wmin);
}

#[test]
fn edf_packs_onto_the_busiest_gpu_while_cedf_sends_linear_jobs_to_the_largest_slices() {
    // GPU0 in c12 (1g slices), GPU1 in c1 (one 7g). J0 linear (class 1, d=10), J1 flat
    // (class 4, d=5), both at 0.
    let sc = cluster(2, &["c12", "c1"], 4.0);
    let jobs = [job(0, 0.0, 10.0, LINEAR7), job(1, 0.0, 5.0, FLAT)];

    // EDF: J1 first (d=5) to GPU0 (tie on busy, lower index), its 1g: 0..1.1. Then J0 to
    // the busiest GPU with a slice meeting d=10: GPU0's 1g (7 <= 10): 0..7.
    let r = run(&sc, &jobs, Scheduler::Edf, Semantics::Preempt);
    let e = P[2] * 1.1 + P[1] * (7.0 - 1.1) + P[0] * 7.0;
    assert!(close(r.energy_wmin, e), "edf {} vs {e}", r.energy_wmin);
    assert!(close(r.makespan_min, 7.0));
    assert_eq!(r.avg_tardiness_min, 0.0);

    // CEDF: J0 first (class 1) to the GPU with the largest mean slice (GPU1, 7g): 0..1.
    // J1 to GPU0's 1g: 0..1.1. GPU1 idles 1..1.1.
    let r = run(&sc, &jobs, Scheduler::Cedf, Semantics::Preempt);
    let e = P[7] * 1.0 + P[0] * 0.1 + P[1] * 1.1;
    assert!(close(r.energy_wmin, e), "cedf {} vs {e}", r.energy_wmin);
    assert!(close(r.makespan_min, 1.1));
}

#[test]
fn met_puts_a_linear_job_on_a_7g_and_a_flat_job_on_a_1g() {
    // Same cluster. Linear J0: on a 1g ΔE/P7 = (119-40)·7/248.5 = 2.23; on the 7g
    // (208.5)·1/248.5 = 0.84 -> 7g. Flat J1: 1g (79·1.1/248.5 = 0.35) beats the 7g.
    let sc = cluster(2, &["c12", "c1"], 4.0);
    let jobs = [job(0, 0.0, 10.0, LINEAR7), job(1, 0.5, 5.0, FLAT)];
    let r = run(&sc, &jobs, Scheduler::Met, Semantics::Preempt);
    // J0 on GPU1's 7g 0..1; J1 on GPU0's 1g 0.5..1.6.
    let e = P[7] * 1.0 + P[0] * 0.6 + P[0] * 0.5 + P[1] * 1.1;
    assert!(close(r.energy_wmin, e), "{} vs {e}", r.energy_wmin);
    assert!(close(r.makespan_min, 1.6));
}

#[test]
fn random_on_a_single_slice_runs_jobs_in_deadline_order() {
    // One 7g: the only choice. J0 (d=1.5) runs 0..1; J1 (d=2) 1..2, on time; J2 (arrives
    // at 0.5, d=2.5) 2..3, 0.5 late.
    let sc = cluster(1, &["c1"], 4.0);
    let jobs = [
        job(0, 0.0, 1.5, LINEAR7),
        job(1, 0.0, 2.0, LINEAR7),
        job(2, 0.5, 2.5, LINEAR7),
    ];
    let r = run(&sc, &jobs, Scheduler::Random, Semantics::Preempt);
    assert!(close(r.avg_tardiness_min, 0.5 / 3.0), "{}", r.avg_tardiness_min);
    assert!(close(r.energy_wmin, P[7] * 3.0));
}

/// Switches every GPU to c12 at the first decision at or after t = 1.
struct SwitchAtOne(bool);

impl Repartitioner for SwitchAtOne {
    fn name(&self) -> String {
        "switch".into()
    }
    fn initial_layout(&mut self, sc: &ResolvedScenario) -> Vec<u16> {
        vec![0; sc.gpus.len()]
    }
    fn every_events(&self) -> Option<u32> {
        Some(1)
    }
    fn decide(&mut self, view: &DecisionView<'_>, _: &mut ChaCha8Rng) -> Vec<(u32, u16)> {
        if view.now >= 1.0 && !self.0 {
            self.0 = true;
            vec![(0, 11)]
        } else {
            Vec::new()
        }
    }
}

/// One GPU in c1 switched to c12 at minute 1 (4 s a switch), under `semantics` (drain
/// holding the changing instances): J0 (p1 = 14, p7 = 2) released at 0, J1 (flat,
/// deadline 50) at 1.
fn whole_gpu_switched_at_one(semantics: Semantics) -> RunResult {
    let sc = cluster_holding_instances(1, &["c1"], 4.0);
    let jobs = [
        job(0, 0.0, 100.0, [14.0, 7.0, 14.0 / 3.0, 3.5, 2.0]),
        job(1, 1.0, 50.0, FLAT),
    ];
    run_with(&sc, &jobs, Scheduler::Edf, semantics, &mut SwitchAtOne(false))
}

#[test]
fn preempt_stops_a_running_job_keeps_its_progress_and_charges_the_penalty() {
    // J0 (p1 = 14, p7 = 2) starts on the 7g at 0. At 1, J1 arrives and the GPU switches
    // to c12: J0 is preempted half done. The 1g slices are ready at 1 + 4 s. J1 (d=50)
    // goes first: 1.0667..2.1667; J0 (d=100) needs 0.5·14 = 7: 1.0667..8.0667.
    let r = whole_gpu_switched_at_one(Semantics::Preempt);
    let ready = 1.0 + 4.0 / 60.0;
    assert_eq!((r.repartitions, r.preemptions), (1, 1));
    assert!(close(r.makespan_min, ready + 7.0), "{}", r.makespan_min);
    let e = P[7] * 1.0 + P[0] * (ready - 1.0) + P[2] * 1.1 + P[1] * (7.0 - 1.1);
    assert!(close(r.energy_wmin, e), "{} vs {e}", r.energy_wmin);
    assert_eq!(r.avg_tardiness_min, 0.0);
}

#[test]
fn a_drain_holding_instances_waits_for_the_running_job_and_starts_nothing_on_a_draining_slice() {
    // Same jobs under drain: the 7g finishes J0 at 2, then the GPU switches; the 1g
    // slices are ready at 2 + 4 s and J1 runs until then + 1.1.
    let r = whole_gpu_switched_at_one(Semantics::Drain);
    let ready = 2.0 + 4.0 / 60.0;
    assert_eq!((r.repartitions, r.preemptions), (1, 0));
    assert!(close(r.makespan_min, ready + 1.1), "{}", r.makespan_min);
    let e = P[7] * 2.0 + P[0] * (ready - 2.0) + P[1] * 1.1;
    assert!(close(r.energy_wmin, e), "{} vs {e}", r.energy_wmin);
}

#[test]
fn smartmigd_drain_changes_a_gpu_only_at_a_decision_that_finds_it_idle_and_holds_nothing() {
    // One whole GPU, asked for c12 at every decision from 1. J0 (p7 = 2) runs 0..2; J1
    // (d = 50) and J2 (d = 60) arrive at 1 and 1.5 and wait for the 7g. Nothing is held:
    // Slurm starts J1 on the 7g as J0 ends (2..3), then J2 (3..4), and every decision until
    // then finds the 7g busy. At 4 it is idle and the GPU switches: makespan 4, where a
    // drain holding the 7g would switch at 2 and run J1, J2 on two 1g (2.067..3.167).
    let jobs = [
        job(0, 0.0, 100.0, [14.0, 7.0, 14.0 / 3.0, 3.5, 2.0]),
        job(1, 1.0, 50.0, FLAT),
        job(2, 1.5, 60.0, FLAT),
    ];
    let policy = || MoveFromOne {
        from: 0,
        gpu: 0,
        to: 11,
    };
    let sc = cluster(1, &["c1"], 4.0);
    let r = run_with(&sc, &jobs, Scheduler::Edf, Semantics::Drain, &mut policy());
    assert_eq!((r.repartitions, r.preemptions), (1, 0));
    assert!(close(r.makespan_min, 4.0), "{}", r.makespan_min);
    let held = run_with(
        &cluster_holding_instances(1, &["c1"], 4.0),
        &jobs,
        Scheduler::Edf,
        Semantics::Drain,
        &mut policy(),
    );
    assert!(
        close(held.makespan_min, 2.0 + 4.0 / 60.0 + 1.1),
        "{}",
        held.makespan_min
    );
}

#[test]
fn a_node_hold_keeps_every_slice_of_the_node_free_and_a_type_hold_only_the_destroyed_type() {
    // GPU0 in c1 runs J0 (p7 = 10) 0..10 and is asked for c12 from 1; GPU1 is in c2 (4g +
    // 3g). J1 (p7 = 1, d = 100) arrives at 1. Type hold: only 7g.40gb takes no new job, so
    // J1 runs on GPU1's 3g (1..3.33); node hold: nothing starts on the node until J0 ends
    // and GPU0 switches at 10, then J1 takes GPU0's slowest slice, a 1g (10..17). Smartmigd's
    // drain (no hold) makes the change at 10 too, with J1 on the 3g meanwhile.
    let jobs = [
        job(0, 0.0, 100.0, [70.0, 35.0, 70.0 / 3.0, 17.5, 10.0]),
        job(1, 1.0, 100.0, LINEAR7),
    ];
    let run = |hold: &str| {
        let sc = limited(
            2,
            &["c1", "c2"],
            0.0,
            &[
                "repartition.persist_cycles=1",
                "repartition.min_relayout_interval_s=0",
                "repartition.node_rule=instances",
                &format!("repartition.drain_hold={hold}"),
            ],
        );
        let mut policy = MoveFromOne {
            from: 0,
            gpu: 0,
            to: 11,
        };
        // The policy starts every GPU in `from`: give GPU1 its c2 through the layout.
        let mut policy = StartIn(vec![0, 1], &mut policy);
        run_with(&sc, &jobs, Scheduler::Edf, Semantics::Drain, &mut policy)
    };
    for hold in ["type", "instances", "none"] {
        let r = run(hold);
        assert_eq!(r.repartitions, 1, "{hold}");
        assert!(close(r.makespan_min, 10.0), "{hold}: {}", r.makespan_min);
    }
    let node = run("node");
    assert_eq!(node.repartitions, 1);
    assert!(close(node.makespan_min, 17.0), "{}", node.makespan_min);
}

/// A policy whose GPUs start in `.0` and which otherwise decides as `.1`.
struct StartIn<'a>(Vec<u16>, &'a mut dyn Repartitioner);

impl Repartitioner for StartIn<'_> {
    fn name(&self) -> String {
        self.1.name()
    }
    fn initial_layout(&mut self, _: &ResolvedScenario) -> Vec<u16> {
        self.0.clone()
    }
    fn every_events(&self) -> Option<u32> {
        self.1.every_events()
    }
    fn decide(&mut self, view: &DecisionView<'_>, rng: &mut ChaCha8Rng) -> Vec<(u32, u16)> {
        self.1.decide(view, rng)
    }
}

/// Starts every GPU in configuration `from` and moves GPU `gpu` to `to` at every
/// decision from t = 1 on.
struct MoveFromOne {
    from: u16,
    gpu: u32,
    to: u16,
}

impl Repartitioner for MoveFromOne {
    fn name(&self) -> String {
        "move".into()
    }
    fn initial_layout(&mut self, sc: &ResolvedScenario) -> Vec<u16> {
        vec![self.from; sc.gpus.len()]
    }
    fn every_events(&self) -> Option<u32> {
        Some(1)
    }
    fn decide(&mut self, view: &DecisionView<'_>, _: &mut ChaCha8Rng) -> Vec<(u32, u16)> {
        let g = &view.cluster.gpus[self.gpu as usize];
        if view.now >= 1.0 && g.config != self.to {
            vec![(self.gpu, self.to)]
        } else {
            Vec::new()
        }
    }
}

/// Two whole GPUs on one node; J0 (p7 = 10) runs on GPU0 from 0; J1 and J2 arrive at 1
/// and 2 (each p7 = 1, deadline 100); GPU1 is asked for `to` from t = 1. The device-index
/// rule is `index_rule`, drain holds `hold`.
fn node_run(to: u16, rule: &str, index_rule: &str, hold: &str) -> RunResult {
    let sc = limited(
        2,
        &["c1"],
        0.0,
        &[
            "repartition.persist_cycles=1",
            "repartition.min_relayout_interval_s=0",
            &format!("repartition.node_rule=\"{rule}\""),
            &format!("repartition.index_rule=\"{index_rule}\""),
            &format!("repartition.drain_hold=\"{hold}\""),
        ],
    );
    let jobs = [
        job(0, 0.0, 100.0, [70.0, 35.0, 70.0 / 3.0, 17.5, 10.0]),
        job(1, 1.0, 100.0, LINEAR7),
        job(2, 2.0, 100.0, LINEAR7),
    ];
    run_with(
        &sc,
        &jobs,
        Scheduler::Edf,
        Semantics::Drain,
        &mut MoveFromOne { from: 0, gpu: 1, to },
    )
}

#[test]
fn under_slurm_22_05_a_node_whose_instance_count_changes_drains_whole_until_idle() {
    // c1 -> c2 on GPU1 raises the node's instances from 2 to 3: no job may start anywhere
    // on the node until J0 ends at 10; then GPU1 switches (no cost), J1 takes GPU0's 7g
    // (10..11) and J2 GPU1's 3g (10..12.33). (Without the index rule, which would hold
    // the move back altogether while J0 runs: see the next test.)
    let r = node_run(1, "slurm-22.05", "off", "instances");
    assert_eq!((r.repartitions, r.relayout_batches, r.preemptions), (1, 1, 0));
    assert!(close(r.makespan_min, 10.0 + 7.0 / 3.0), "{}", r.makespan_min);
    // Per-instance drain: GPU1 is idle, so it switches at 1 and J1, J2 run there at once.
    let r = node_run(1, "instances", "off", "instances");
    assert_eq!(r.repartitions, 1);
    assert!(close(r.makespan_min, 10.0), "J0 is last: {}", r.makespan_min);
}

#[test]
fn smartmigd_drain_leaves_a_count_change_for_an_idle_node_unless_padding_keeps_the_count() {
    // GPU1 c1 -> c2 from 1 raises the node's instances while J0 runs on GPU0 (0..10).
    // smartmigd holds nothing: J1 and J2 run on GPU1's 7g (1..2, 2..3), and the change
    // waits for the decision at J0's end (10), when the node is idle: no c2 time. With
    // padding the count never changes: GPU1 switches once it is idle, at J1's end (2),
    // and is in c2 for 2..10 (J2 takes its 3g).
    let r = node_run(1, "slurm-22.05", "off", "none");
    assert_eq!((r.repartitions, r.preemptions), (1, 0));
    assert!(close(r.makespan_min, 10.0), "{}", r.makespan_min);
    assert!(close(share(&r, "c2"), 0.0), "{}", share(&r, "c2"));
    let padded = node_run(1, "slurm-22.05", "padded", "none");
    assert_eq!(padded.repartitions, 1);
    assert!(
        close(share(&padded, "c2"), 8.0 / 20.0),
        "{}",
        share(&padded, "c2")
    );
}

/// Two GPUs on one node in c2 (4g.20gb + 3g.20gb); J0 (p4 = 17.5) runs on GPU0's 4g.20gb
/// from 0 (index 2: the node's `Gres` lists 3g.20gb first), J1 arrives at 1; GPU1 is
/// asked for c5 (two 3g.20gb) from t = 1, which would give the node a third 3g.20gb before
/// J0's device. `index_rule` as named.
fn index_run(index_rule: &str, semantics: Semantics, extra: &[&str]) -> RunResult {
    let rule = format!("repartition.index_rule=\"{index_rule}\"");
    let mut sets = vec![
        "repartition.persist_cycles=1",
        "repartition.min_relayout_interval_s=0",
        "repartition.node_rule=\"instances\"",
        "repartition.drain_hold=\"instances\"",
        &rule,
    ];
    sets.extend_from_slice(extra);
    let sc = limited(2, &["c2"], 0.0, &sets);
    let jobs = [
        job(0, 0.0, 20.0, [70.0, 35.0, 70.0 / 3.0, 17.5, 10.0]),
        job(1, 1.0, 100.0, LINEAR7),
    ];
    run_with(
        &sc,
        &jobs,
        Scheduler::Edf,
        semantics,
        &mut MoveFromOne {
            from: 1,
            gpu: 1,
            to: 4,
        },
    )
}

/// The share of GPU time in configuration `name`.
fn share(r: &RunResult, name: &str) -> f64 {
    r.config_share
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0.0, |c| c.1)
}

#[test]
fn a_move_that_would_change_a_running_jobs_device_index_waits_until_the_job_ends() {
    // While J0 runs (0..17.5) GPU1 stays in c2 and switches at J0's completion; without
    // the rule it switches at 1.
    let held = index_run("fixed", Semantics::Drain, &[]);
    assert_eq!(held.repartitions, 1);
    assert!(close(share(&held, "c5"), 0.0), "{}", share(&held, "c5"));
    let free = index_run("off", Semantics::Drain, &[]);
    assert!(share(&free, "c5") > 0.3, "{}", share(&free, "c5"));
}

#[test]
fn a_new_type_goes_after_the_nodes_types_so_a_running_jobs_index_holds_and_the_move_goes_ahead() {
    // GPU1 c1 -> c2 while J0 runs on GPU0's 7g.40gb (index 0): smartmigd lists 3g.20gb
    // and 4g.20gb after 7g.40gb (by name they would take indices 0 and 1), so the move
    // keeps J0's index and GPU1 is in c2 for 9 of the 20 GPU-minutes, as without the rule.
    let kept = node_run(1, "instances", "fixed", "instances");
    let free = node_run(1, "instances", "off", "instances");
    assert!(close(share(&kept, "c2"), 9.0 / 20.0), "{}", share(&kept, "c2"));
    assert!(close(share(&free, "c2"), 9.0 / 20.0), "{}", share(&free, "c2"));
}

#[test]
fn under_preempt_a_move_that_would_change_a_running_jobs_device_index_preempts_that_job() {
    // GPU1 c2 -> c5 from 1 under preempt: it switches at once, and J0, whose index the new
    // 3g.20gb would take, is preempted (progress kept).
    let r = index_run("fixed", Semantics::Preempt, &[]);
    assert_eq!((r.repartitions, r.preemptions), (1, 1));
    let off = index_run("off", Semantics::Preempt, &[]);
    assert_eq!((off.repartitions, off.preemptions), (1, 0), "no rule: J0 runs on");
}

#[test]
fn a_move_that_keeps_the_nodes_instance_count_drains_only_its_own_instances() {
    // Both GPUs in c2 (4g + 3g). J0 takes GPU0's 3g (0..23.33). At 1 GPU1 goes c2 -> c5
    // (two instances either way): only its 4g drains, and it is idle, so GPU1 switches at
    // once although the node is busy. c5's share of GPU time is then GPU1's 1..23.33.
    let sc = cluster_holding_instances(2, &["c2"], 0.0);
    let jobs = [
        job(0, 0.0, 100.0, [70.0, 35.0, 70.0 / 3.0, 17.5, 10.0]),
        job(1, 1.0, 100.0, LINEAR7),
    ];
    let r = run_with(
        &sc,
        &jobs,
        Scheduler::Edf,
        Semantics::Drain,
        &mut MoveFromOne {
            from: 1,
            gpu: 1,
            to: 4,
        },
    );
    assert_eq!((r.repartitions, r.relayout_batches), (1, 1));
    let end = 70.0 / 3.0;
    assert!(close(r.makespan_min, end), "{}", r.makespan_min);
    let c5 = r.config_share.iter().find(|(n, _)| n == "c5").unwrap().1;
    assert!(close(c5, (end - 1.0) / (2.0 * end)), "{c5}");
}

#[test]
fn a_move_acts_only_once_it_persisted_for_the_set_number_of_decisions() {
    // GPU1 is asked for c2 at every decision from 1: at J1's arrival (1), J1's completion
    // (2) and J2's arrival (2). With persistence 3 the third commits it: J1 ran whole on
    // GPU1's 7g (1..2); J2 then takes the new 3g (2..4.33). GPU0 runs J0 0..10.
    let sets = [
        "repartition.persist_cycles=3",
        "repartition.min_relayout_interval_s=0",
        // Neither the index rule nor Slurm's count rule (which would requeue J0): this
        // test is about persistence alone.
        "repartition.index_rule=\"off\"",
        "repartition.node_rule=\"instances\"",
    ];
    let sc = limited(2, &["c1"], 0.0, &sets);
    let jobs = [
        job(0, 0.0, 100.0, [70.0, 35.0, 70.0 / 3.0, 17.5, 10.0]),
        job(1, 1.0, 100.0, LINEAR7),
        job(2, 2.0, 100.0, LINEAR7),
    ];
    let mut policy = MoveFromOne {
        from: 0,
        gpu: 1,
        to: 1,
    };
    let r = run_with(&sc, &jobs, Scheduler::Edf, Semantics::Preempt, &mut policy);
    assert_eq!((r.repartitions, r.preemptions), (1, 0));
    let e = P[7] * 10.0 + P[0] * 1.0 + P[7] * 1.0 + P[3] * (7.0 / 3.0) + P[0] * (10.0 - 2.0 - 7.0 / 3.0);
    assert!(close(r.energy_wmin, e), "{} vs {e}", r.energy_wmin);
    // Acting at once, J1 would have run on the 3g instead.
    let at_once = run_with(
        &cluster_without_index_rule(2, &["c1"], 0.0),
        &jobs,
        Scheduler::Edf,
        Semantics::Preempt,
        &mut MoveFromOne {
            from: 0,
            gpu: 1,
            to: 1,
        },
    );
    assert!(!close(at_once.energy_wmin, e));
}

#[test]
fn the_same_seed_gives_the_same_result_and_the_seed_is_recorded() {
    let sc = cluster(2, &["c6", "c12"], 4.0);
    let jobs: Vec<Job> = (0..200)
        .map(|i| job(i, f64::from(i) * 0.05, f64::from(i) * 0.05 + 3.0, LINEAR7))
        .collect();
    let a = run(&sc, &jobs, Scheduler::Random, Semantics::Preempt);
    let b = run(&sc, &jobs, Scheduler::Random, Semantics::Preempt);
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert_eq!(a.seed, 1);
    assert_eq!(a.completed, 200);
}

/// Records the lateness and features a learning policy would see at each decision.
struct Observer {
    lateness: Vec<f64>,
    dims: Vec<usize>,
}

impl Repartitioner for Observer {
    fn name(&self) -> String {
        "observer".into()
    }
    fn initial_layout(&mut self, sc: &ResolvedScenario) -> Vec<u16> {
        vec![5; sc.gpus.len()]
    }
    fn every_events(&self) -> Option<u32> {
        Some(1)
    }
    fn feature_layout(&self) -> Option<smartmig_policy::FeatureLayout> {
        Some(crate::features::layout(12))
    }
    fn decide(&mut self, view: &DecisionView<'_>, _: &mut ChaCha8Rng) -> Vec<(u32, u16)> {
        self.lateness.push(view.lateness_min);
        let mut f = Vec::new();
        assert!(view.write_features(0, &mut f));
        self.dims.push(f.len());
        Vec::new()
    }
}

#[test]
fn lateness_accrues_over_time_and_ends_at_the_total_tardiness() {
    let sc = cluster(2, &["c6"], 4.0);
    let jobs: Vec<Job> = (0..300)
        .map(|i| job(i, f64::from(i) * 0.02, f64::from(i) * 0.02 + 1.2, LINEAR7))
        .collect();
    let mut obs = Observer {
        lateness: Vec::new(),
        dims: Vec::new(),
    };
    let r = run_with(&sc, &jobs, Scheduler::Cedf, Semantics::Preempt, &mut obs);
    assert!(r.avg_tardiness_min > 1.0, "the test needs late jobs");
    assert!(
        obs.lateness.windows(2).all(|w| w[1] >= w[0] - 1e-9),
        "lateness never decreases"
    );
    let total = r.avg_tardiness_min * jobs.len() as f64;
    let last = *obs.lateness.last().unwrap();
    assert!((last - total).abs() < 1e-6 * total, "{last} vs {total}");
    assert!(obs.dims.iter().all(|&d| d == crate::features::feature_dim(12)));
}

/// `n` whole GPUs on one node; J0 (p4 = 17.5, due at `due`) runs on GPU 0 from 0, J1
/// arrives at 1; from t = 1 GPU `gpu` is asked for c2 (4g.20gb + 3g.20gb). Preempt, no
/// switch cost, no persistence, with `sets`.
fn move_run(n: u32, gpu: u32, due: f64, sets: &[&str]) -> RunResult {
    let mut all = vec![
        "repartition.persist_cycles=1",
        "repartition.min_relayout_interval_s=0",
    ];
    all.extend_from_slice(sets);
    let sc = limited(n, &["c1"], 0.0, &all);
    let jobs = [
        job(0, 0.0, due, [70.0, 35.0, 70.0 / 3.0, 17.5, 10.0]),
        job(1, 1.0, 100.0, LINEAR7),
    ];
    run_with(
        &sc,
        &jobs,
        Scheduler::Edf,
        Semantics::Preempt,
        &mut MoveFromOne { from: 0, gpu, to: 1 },
    )
}

/// [`move_run`] on one GPU, J0 due at 20: the change destroys J0's 7g.40gb.
fn requeue_run(sets: &[&str]) -> RunResult {
    move_run(1, 0, 20.0, sets)
}

#[test]
fn a_requeued_job_resumes_its_progress_or_with_restart_starts_over() {
    // J0 is stopped at 1 having done 1/10 of its work and runs again on the 4g.20gb:
    // resumed, its last 0.9 take 0.9 × 17.5; restarted, all 17.5.
    let resume = requeue_run(&[]);
    assert_eq!(resume.preemptions, 1);
    assert!(
        close(resume.makespan_min, 1.0 + 0.9 * 17.5),
        "{}",
        resume.makespan_min
    );
    let restart = requeue_run(&["repartition.requeued=\"restart\""]);
    assert_eq!(restart.preemptions, 1);
    assert!(
        close(restart.makespan_min, 1.0 + 17.5),
        "{}",
        restart.makespan_min
    );
}

#[test]
fn with_a_run_time_limit_a_change_waits_for_a_job_that_ran_longer_and_stops_a_younger_one() {
    // At 1 J0 has run 60 s: a 30 s limit keeps it (the GPU switches at its end, 10, and
    // J1 waits for it); a 120 s limit stops it as without a limit.
    let held = requeue_run(&["repartition.requeue_max_run_s=30"]);
    assert_eq!((held.preemptions, held.repartitions), (0, 1));
    assert!(
        close(held.makespan_min, 10.0 + 7.0 / 3.0),
        "{}",
        held.makespan_min
    );
    let stopped = requeue_run(&["repartition.requeue_max_run_s=120"]);
    assert_eq!(stopped.preemptions, 1);
    assert!(
        close(stopped.makespan_min, 1.0 + 0.9 * 17.5),
        "{}",
        stopped.makespan_min
    );
}

#[test]
fn under_preempt_slurm_requeues_every_job_of_a_node_whose_gpu_count_changes_unless_padded() {
    // J0 on GPU0's 7g.40gb; GPU1 c1 -> c2 at 1 takes the node from 2 to 3 instances.
    // J0's device keeps its index (the new types come after 7g.40gb), yet Slurm requeues
    // it at the node's registration; padding records keep the count, and J0 runs on.
    let run = |index_rule: &str| {
        move_run(
            2,
            1,
            100.0,
            &[&format!("repartition.index_rule=\"{index_rule}\"")],
        )
    };
    let fixed = run("fixed");
    assert_eq!((fixed.repartitions, fixed.preemptions), (1, 1));
    let padded = run("padded");
    assert_eq!((padded.repartitions, padded.preemptions), (1, 0));
}
