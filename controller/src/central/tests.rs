//! The cycle on an in-memory Slurm with instant agents (the least powerful test that
//! shows the decisions; tests/ runs it on a real Slurm).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use smartmig_core::config::{Config, Mode, Resolved};

use super::fake::FakeSlurm;
use super::relayout::{Relayout, RelayoutError};
use super::status::Status;
use super::*;
use crate::slurm::SlurmApi;

const C2: &str = "4g.20gb@0 3g.20gb@4";
const C8: &str = "1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 3g.20gb@4";
const C5: &str = "3g.20gb@0 3g.20gb@4";

fn temp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("smartmig-central-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn resolved(dir: &std::path::Path, policy: &str) -> Resolved {
    let text = format!(
        "version = 1\n[gpu]\nmodels = [\"a100-40gb\"]\n[policy]\n{policy}\n\
         [controller]\nstate_dir = \"{d}/state\"\nsnapshot_path = \"{d}/run/snapshot.json\"\n\
         [controller.central]\nreport_timeout_s = 2\nnodes_include = \"{d}/nodes.conf\"\n",
        d = dir.display()
    );
    Config::parse(&text, "test.toml").unwrap().resolve(None).unwrap()
}

/// Records what Slurm was asked to learn.
type Batches = Arc<Mutex<Vec<Vec<(String, String)>>>>;

#[derive(Clone, Default)]
struct Recorder(Batches);

impl Relayout for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn apply(&mut self, _: &mut dyn SlurmApi, nodes: &[(String, String)]) -> Result<(), RelayoutError> {
        self.0.lock().unwrap().push(nodes.to_vec());
        Ok(())
    }
}

/// Node a: c2 with a job on its 4g (which c5 and c8 destroy); node b: c2 with a job on its 3g
/// (which c5 and c8 keep); node c: c2, idle. Slurm numbers devices by type name: 3g.20gb is
/// IDX 0, 4g.20gb IDX 1.
fn cluster() -> FakeSlurm {
    let mut s = FakeSlurm {
        auto_agent: true,
        ..FakeSlurm::default()
    };
    for n in ["a", "b", "c"] {
        s.nodes.push(FakeSlurm::node(n, &[("A100-SXM4-40GB", C2)]));
    }
    s.jobs.push(FakeSlurm::running(1, "a", "4g.20gb", 1));
    s.jobs.push(FakeSlurm::running(2, "b", "3g.20gb", 0));
    s
}

fn central(r: Resolved, s: FakeSlurm, mode: Mode, rec: Recorder) -> Central {
    let decider = Decider::new(&r, mode, 7);
    Central::new(r, Box::new(s), decider, Box::new(rec), mode).with_poll(std::time::Duration::from_millis(1))
}

fn layout_of(c: &mut Central, node: &str) -> String {
    let n = c
        .api()
        .nodes()
        .unwrap()
        .into_iter()
        .find(|n| n.name == node)
        .unwrap();
    crate::slurm::read_report(&n).unwrap().unwrap().gpus[0]
        .layout
        .clone()
}

#[test]
fn idle_instances_change_busy_ones_are_spared_and_slurm_is_refreshed_once() {
    let dir = temp("drain");
    let rec = Recorder::default();
    let mut c = central(
        resolved(&dir, "kind = \"static\"\nstatic_layout = [\"c5\"]"),
        cluster(),
        Mode::Drain,
        rec.clone(),
    );
    let r = c.cycle();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.nodes, vec!["b".to_string(), "c".to_string()]);
    assert_eq!((r.changed, r.skipped_busy), (2, 1));
    assert_eq!(layout_of(&mut c, "a"), C2, "a's 4g is busy: a keeps its layout");
    assert_eq!(layout_of(&mut c, "b"), C5);
    assert_eq!(layout_of(&mut c, "c"), C5);
    // One refresh for the batch, with the reported layouts.
    let batches = rec.0.lock().unwrap().clone();
    assert_eq!(batches.len(), 1);
    assert_eq!(
        batches[0],
        vec![
            ("b".to_string(), "gpu:3g.20gb:2".to_string()),
            ("c".to_string(), "gpu:3g.20gb:2".to_string())
        ]
    );
    let nodes = c.api().nodes().unwrap();
    assert!(nodes.iter().all(|n| !n.drain), "every node resumed");
    // a was never touched; b was drained with the generation's reason before anything else.
    let s = c.api().nodes().unwrap();
    assert!(s.iter().find(|n| n.name == "a").unwrap().extra.is_none());
    let status = Status::read(&dir.join("state")).unwrap();
    assert!(status
        .decisions
        .iter()
        .any(|d| d.gpu == "a/0" && d.action.starts_with("skip: busy 4g.20gb@0")));
    assert!(status
        .decisions
        .iter()
        .any(|d| d.gpu == "b/0" && d.action == "applied" && d.to == "c5"));
    assert_eq!(status.counters.get("repartitions"), Some(&2));
    assert!(status.pending_transitions.is_empty());
    let snap = Snapshot::parse(&std::fs::read(dir.join("run/snapshot.json")).unwrap()).unwrap();
    // 8 new 1g instances; the fake keeps job 2's device index 0 across the re-layout as
    // Slurm does, which now names a 1g (see the admin guide's note on device indices).
    assert!(snap.state("3g.20gb").free >= 2, "{snap:?}");
    assert_eq!(snap.state("4g.20gb").free, 0, "a's 4g is busy");
}

#[test]
fn the_drain_reason_names_the_generation_and_a_second_cycle_changes_nothing() {
    let dir = temp("gen");
    let mut c = central(
        resolved(&dir, "kind = \"static\"\nstatic_layout = [\"c5\"]"),
        cluster(),
        Mode::Drain,
        Recorder::default(),
    );
    c.cycle();
    let gen = c.status.generation;
    assert_eq!(gen, 1);
    let r = c.cycle();
    assert_eq!((r.changed, r.nodes.len()), (0, 0), "{r:?}");
    assert_eq!(c.status.generation, 1);
}

#[test]
fn dry_run_touches_nothing_and_reports_the_same_decisions() {
    let policy = "kind = \"static\"\nstatic_layout = [\"c5\"]";
    let dir = temp("dry");
    let mut dry = central(
        resolved(&dir, policy),
        cluster(),
        Mode::DryRun,
        Recorder::default(),
    );
    let r = dry.cycle();
    assert_eq!((r.changed, r.skipped_busy), (2, 1));
    let nodes = dry.api().nodes().unwrap();
    assert_eq!(nodes, cluster().nodes, "no node record changed");
    assert!(!dir.join("run/snapshot.json").exists(), "no snapshot in dry-run");
    let dry_status = Status::read(&dir.join("state")).unwrap();
    let dir2 = temp("dry-vs-drain");
    let mut real = central(
        resolved(&dir2, policy),
        cluster(),
        Mode::Drain,
        Recorder::default(),
    );
    real.cycle();
    let key = |s: &Status, prefix: &str| {
        let mut v: Vec<(String, String, bool)> = s
            .decisions
            .iter()
            .map(|d| {
                (
                    d.gpu.clone(),
                    d.to.clone(),
                    d.action.trim_start_matches(prefix).starts_with("skip"),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(key(&dry_status, "would "), key(&real.status, ""));
    assert!(dry_status
        .decisions
        .iter()
        .all(|d| d.action.starts_with("would ")));
}

#[test]
fn pending_jobs_whose_type_vanished_are_rerouted_to_a_present_type() {
    let dir = temp("reroute");
    let mut s = cluster();
    s.jobs.retain(|j| j.id != 1); // a is idle too: every 4g goes away
    s.jobs.push(FakeSlurm::pending(10, "gres:gpu:4g.20gb:1"));
    s.jobs.push(FakeSlurm::pending(11, "gres:gpu:3g.20gb:1"));
    let mut c = central(
        resolved(&dir, "kind = \"static\"\nstatic_layout = [\"c5\"]"),
        s,
        Mode::Drain,
        Recorder::default(),
    );
    let r = c.cycle();
    assert_eq!(r.rerouted, 1, "{r:?}");
    let jobs = c.api().jobs().unwrap();
    let j10 = jobs.iter().find(|j| j.id == 10).unwrap().tres[0].clone().unwrap();
    assert!(j10 == "gres:gpu:1g.5gb:1" || j10 == "gres:gpu:3g.20gb:1", "{j10}");
    assert_eq!(
        jobs.iter().find(|j| j.id == 11).unwrap().tres[0].as_deref(),
        Some("gres:gpu:3g.20gb:1")
    );
}

#[test]
fn a_missing_policy_file_falls_back_to_the_static_layout_and_says_why() {
    let dir = temp("fallback");
    let policy = format!(
        "kind = \"mean-field\"\nmodels_dir = \"{}/none\"\nstatic_layout = [\"c5\"]",
        dir.display()
    );
    let mut c = central(
        resolved(&dir, &policy),
        cluster(),
        Mode::Drain,
        Recorder::default(),
    );
    let r = c.cycle();
    assert_eq!(r.changed, 2);
    let src = &c.status.sources["a100-40gb"];
    assert!(src.starts_with("static (fallback:"), "{src}");
}

#[test]
fn a_failing_agent_is_reported_and_its_node_resumed_with_the_layout_it_reports() {
    let dir = temp("fail");
    let mut s = cluster();
    s.agent_fails = Some("IN_USE on 4g.20gb@0".into());
    let rec = Recorder::default();
    let mut c = central(
        resolved(&dir, "kind = \"static\"\nstatic_layout = [\"c5\"]"),
        s,
        Mode::Drain,
        rec.clone(),
    );
    let r = c.cycle();
    assert_eq!(r.changed, 0);
    assert!(r.errors.iter().any(|e| e.contains("IN_USE")), "{:?}", r.errors);
    assert_eq!(rec.0.lock().unwrap()[0][0].1, "gpu:3g.20gb:1,gpu:4g.20gb:1");
    assert!(c.api().nodes().unwrap().iter().all(|n| !n.drain));
    assert!(c
        .status
        .decisions
        .iter()
        .any(|d| d.action.starts_with("failed: IN_USE")));
}

#[test]
fn preempt_mode_requeues_the_jobs_on_changing_instances_only() {
    let dir = temp("preempt");
    let mut c = central(
        resolved(&dir, "kind = \"static\"\nstatic_layout = [\"c8\"]"),
        cluster(),
        Mode::Preempt,
        Recorder::default(),
    );
    let r = c.cycle();
    assert_eq!(r.changed, 3, "{r:?}");
    assert_eq!(layout_of(&mut c, "a"), C8);
    let jobs = c.api().jobs().unwrap();
    assert_eq!(
        jobs.iter().find(|j| j.id == 1).unwrap().state,
        crate::slurm::JobState::Pending
    );
    assert_eq!(
        jobs.iter().find(|j| j.id == 2).unwrap().state,
        crate::slurm::JobState::Running
    );
}

#[test]
fn an_onnx_policy_decides_through_onnx_runtime() {
    let dir = temp("onnx");
    let policy = format!(
        "kind = \"mean-field\"\nmodels_dir = \"{}\"\nstatic_layout = [\"c1\"]",
        dir.display()
    );
    let r = resolved(&dir, &policy);
    decide::write_preferring(&r, 0, Mode::Drain, 4).unwrap();
    let mut c = central(r, cluster(), Mode::Drain, Recorder::default());
    let rep = c.cycle();
    let src = &c.status.sources["a100-40gb"];
    if src.starts_with("static (fallback: ONNX Runtime library not found") {
        eprintln!("skipped: no ONNX Runtime here ({src})");
        return;
    }
    assert!(
        src.starts_with("onnx ") && src.ends_with("a100-40gb-drain.onnx"),
        "{src}"
    );
    assert_eq!((rep.changed, rep.skipped_busy), (2, 1), "every GPU asked for c8");
    assert_eq!(layout_of(&mut c, "c"), C5);
}

#[test]
fn a_corrupt_policy_file_falls_back_to_the_static_layout_with_the_reason_logged() {
    let dir = temp("corrupt");
    let policy = format!(
        "kind = \"mean-field\"\nmodels_dir = \"{}\"\nstatic_layout = [\"c5\"]",
        dir.display()
    );
    let r = resolved(&dir, &policy);
    std::fs::write(decide::policy_path(&r, 0, Mode::Drain), b"not an onnx file").unwrap();
    let mut c = central(r, cluster(), Mode::Drain, Recorder::default());
    let rep = c.cycle();
    let src = &c.status.sources["a100-40gb"];
    assert!(src.starts_with("static (fallback:"), "{src}");
    assert_eq!(rep.changed, 2, "the static layout applies");
}

#[test]
fn an_unwritable_snapshot_is_an_error_and_the_cycle_still_completes() {
    let dir = temp("snapshot");
    // `run` is a file, so `run/snapshot.json` cannot be written.
    std::fs::write(dir.join("run"), b"").unwrap();
    let mut c = central(
        resolved(&dir, "kind = \"static\"\nstatic_layout = [\"c5\"]"),
        cluster(),
        Mode::Drain,
        Recorder::default(),
    );
    let rep = c.cycle();
    assert_eq!(rep.changed, 2);
    assert!(
        rep.errors.iter().any(|e| e.contains("snapshot")),
        "{:?}",
        rep.errors
    );
    let status = Status::read(&dir.join("state")).unwrap();
    assert!(status
        .errors
        .iter()
        .any(|(_, e)| e.contains("cannot publish the snapshot")));
}

#[test]
fn slurmctld_down_while_waiting_for_reports_delays_the_cycle_but_does_not_break_it() {
    let dir = temp("outage");
    let mut s = cluster();
    // Reads 0-3 are the cycle's and the post-drain views; 4-7 fail while waiting for reports.
    s.outage = 4..8;
    let mut c = central(
        resolved(&dir, "kind = \"static\"\nstatic_layout = [\"c5\"]"),
        s,
        Mode::Drain,
        Recorder::default(),
    );
    let r = c.cycle();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.changed, 2);
    assert_eq!(layout_of(&mut c, "c"), C5);
}

#[test]
fn slurmctld_down_at_the_start_of_a_cycle_is_an_error_and_the_next_cycle_recovers() {
    let dir = temp("down");
    let mut s = cluster();
    s.outage = 0..1;
    let mut c = central(
        resolved(&dir, "kind = \"static\"\nstatic_layout = [\"c5\"]"),
        s,
        Mode::Drain,
        Recorder::default(),
    );
    let r = c.cycle();
    assert!(
        r.errors[0].contains("Unable to contact slurm controller"),
        "{:?}",
        r.errors
    );
    assert_eq!(r.changed, 0);
    let r = c.cycle();
    assert_eq!(r.changed, 2, "{r:?}");
}

#[test]
fn a_job_whose_device_index_names_another_type_after_a_relayout_keeps_its_type_busy() {
    let dir = temp("shifted");
    let mut s = cluster();
    // After a re-layout to c8, Slurm still says job 2 holds index 0 — now a 1g.5gb.
    s.nodes[1] = FakeSlurm::node("b", &[("A100-SXM4-40GB", C8)]);
    s.jobs[1].gres_detail = vec!["gpu:3g.20gb:1(IDX:0)".into()];
    let r = resolved(&dir, "kind = \"static\"\nstatic_layout = [\"c5\"]");
    let nodes = s.nodes.clone();
    let jobs = s.jobs.clone();
    let v = View::build(&r, nodes, jobs, &mut Default::default());
    let b = v.gpus.iter().find(|g| g.node == "b").unwrap();
    let m = &r.models[0].model;
    let busy: Vec<String> = b
        .busy
        .iter()
        .map(|i| smartmig_core::mig::layout::display_instance(m, i))
        .collect();
    assert_eq!(
        busy,
        vec!["3g.20gb@4".to_string()],
        "the 3g, not the 1g at index 0"
    );
    let mut c = central(r, s, Mode::Drain, Recorder::default());
    let rep = c.cycle();
    // c8 → c5 changes b's GPU count under a running job: Slurm 22.05 would kill it.
    assert_eq!(layout_of(&mut c, "b"), C8, "{rep:?}");
    assert!(c
        .status
        .decisions
        .iter()
        .any(|d| d.gpu == "b/0" && d.action.contains("GPU count would change")));
}

#[test]
fn a_resume_refused_for_a_not_yet_registered_node_that_is_undrained_anyway_is_no_error() {
    let dir = temp("unknown");
    let mut s = cluster();
    // After the re-layout's restart, c's slurmd has not registered when it is resumed.
    s.unknown_state = vec!["c".into()];
    let mut c = central(
        resolved(&dir, "kind = \"static\"\nstatic_layout = [\"c5\"]"),
        s,
        Mode::Drain,
        Recorder::default(),
    );
    let r = c.cycle();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.changed, 2);
    assert!(c.status.pending_transitions.is_empty(), "{:?}", c.status);
    assert!(c.api().nodes().unwrap().iter().all(|n| !n.drain));
}

#[test]
fn failed_agents_that_kept_their_layout_and_slurmd_cost_no_slurmctld_restart() {
    let dir = temp("fail-unchanged");
    let mut s = cluster();
    for n in &mut s.nodes {
        n.gres = "gpu:3g.20gb:1(S:0),gpu:4g.20gb:1(S:0)".into();
    }
    s.agent_fails = Some("NVML_ERROR_INSUFFICIENT_RESOURCES".into());
    let rec = Recorder::default();
    let mut c = central(
        resolved(&dir, "kind = \"static\"\nstatic_layout = [\"c5\"]"),
        s,
        Mode::Drain,
        rec.clone(),
    );
    let r = c.cycle();
    assert_eq!(r.changed, 0);
    assert!(
        rec.0.lock().unwrap().is_empty(),
        "Slurm already has these layouts"
    );
    let nodes = c.api().nodes().unwrap();
    assert!(nodes.iter().all(|n| !n.drain), "resumed");
    for n in &nodes {
        if let Some(Ok(d)) = crate::slurm::read_desired(n) {
            assert_eq!(
                d.phase,
                crate::channel::Phase::Apply,
                "{}: slurmd was never stopped",
                n.name
            );
        }
    }
    assert!(c.status.pending_transitions.is_empty(), "{:?}", c.status);
}

#[test]
fn a_node_an_earlier_cycle_left_drained_after_its_agent_answered_is_finished_and_resumed() {
    let dir = temp("leftover");
    let mut s = cluster();
    // An earlier cycle (gen 3) drained c and handed it c5; c's agent answered after that
    // cycle had given up: Slurm still has c2, slurmd is stopped.
    let c_node = &mut s.nodes[2];
    c_node.gres = "gpu:3g.20gb:1,gpu:4g.20gb:1".into();
    c_node.drain = true;
    c_node.reason = Some(format!("{DRAIN_PREFIX}3"));
    let desired = Desired {
        smartmig: CHANNEL_VERSION,
        generation: 3,
        phase: Phase::Apply,
        gpus: vec![GpuTarget {
            index: 0,
            model: "A100-SXM4-40GB".into(),
            from: C2.into(),
            to: C5.into(),
        }],
    };
    c_node.extra = Some(serde_json::to_string(&desired).unwrap());
    let mut answer = crate::slurm::read_report(c_node).unwrap().unwrap();
    answer.generation = 3;
    answer.phase = Phase::Apply;
    answer.gpus[0].layout = C5.into();
    answer.slurmd_running = false;
    c_node.comment = Some(serde_json::to_string(&answer).unwrap());
    let rec = Recorder::default();
    let mut c = central(resolved(&dir, "kind = \"none\""), s, Mode::Drain, rec.clone());
    let r = c.cycle();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.nodes, vec!["c".to_string()]);
    assert_eq!(
        rec.0.lock().unwrap().clone(),
        vec![vec![("c".to_string(), "gpu:3g.20gb:2".to_string())]]
    );
    let nodes = c.api().nodes().unwrap();
    let c_now = nodes.iter().find(|n| n.name == "c").unwrap();
    assert!(!c_now.drain);
    let rep = crate::slurm::read_report(c_now).unwrap().unwrap();
    assert_eq!(
        (rep.generation, rep.phase, rep.slurmd_running),
        (4, Phase::StartSlurmd, true)
    );
    assert!(c.status.pending_transitions.is_empty(), "{:?}", c.status);
}

#[test]
fn a_node_left_drained_whose_agent_has_not_answered_stays_drained_and_is_named() {
    let dir = temp("leftover-silent");
    let mut s = cluster();
    s.auto_agent = false;
    let c_node = &mut s.nodes[2];
    c_node.drain = true;
    c_node.reason = Some(format!("{DRAIN_PREFIX}3"));
    let desired = Desired {
        smartmig: CHANNEL_VERSION,
        generation: 3,
        phase: Phase::Apply,
        gpus: Vec::new(),
    };
    c_node.extra = Some(serde_json::to_string(&desired).unwrap());
    let mut c = central(
        resolved(&dir, "kind = \"none\""),
        s,
        Mode::Drain,
        Recorder::default(),
    );
    let r = c.cycle();
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("c: drained by smartmig") && e.contains("gen 3")),
        "{:?}",
        r.errors
    );
    assert!(
        c.api()
            .nodes()
            .unwrap()
            .iter()
            .find(|n| n.name == "c")
            .unwrap()
            .drain
    );
}

#[test]
fn a_policy_file_replaced_while_the_central_role_runs_is_reloaded_and_a_corrupt_one_falls_back() {
    let dir = temp("reload");
    let policy = format!(
        "kind = \"mean-field\"\nmodels_dir = \"{}\"\nstatic_layout = [\"c2\"]",
        dir.display()
    );
    let r = resolved(&dir, &policy);
    let path = decide::write_preferring(&r, 0, Mode::Drain, 4).unwrap();
    let mut c = central(r, cluster(), Mode::Drain, Recorder::default());
    c.cycle();
    let src = c.status.sources["a100-40gb"].clone();
    if src.starts_with("static (fallback: ONNX Runtime library not found") {
        eprintln!("skipped: no ONNX Runtime here ({src})");
        return;
    }
    assert!(src.starts_with("onnx "), "{src}");
    std::fs::write(&path, b"garbage, not ONNX").unwrap();
    c.cycle();
    let src = c.status.sources["a100-40gb"].clone();
    assert!(
        src.starts_with("static (fallback: ") && src.contains("a100-40gb-drain.onnx"),
        "{src}"
    );
    let r = resolved(&dir, &policy);
    decide::write_preferring(&r, 0, Mode::Drain, 4).unwrap();
    c.cycle();
    assert!(
        c.status.sources["a100-40gb"].starts_with("onnx "),
        "a fixed file is used again"
    );
}

#[test]
fn generations_continue_after_the_highest_an_agent_reports_when_extra_was_lost() {
    let dir = temp("gen-from-report");
    let mut s = cluster();
    // slurmctld lost every Extra (`slurmctld -c`); c's agent re-announced gen 7.
    let mut r = crate::slurm::read_report(&s.nodes[2]).unwrap().unwrap();
    r.generation = 7;
    s.nodes[2].comment = Some(serde_json::to_string(&r).unwrap());
    let mut c = central(
        resolved(&dir, "kind = \"static\"\nstatic_layout = [\"c5\"]"),
        s,
        Mode::Drain,
        Recorder::default(),
    );
    let rep = c.cycle();
    assert_eq!(rep.changed, 2, "{rep:?}");
    assert_eq!(c.status.generation, 8, "an agent ignores generations it answered");
}

#[test]
fn cached_node_views_equal_fresh_ones_and_a_changed_job_or_report_is_parsed_again() {
    let dir = temp("cache");
    let r = resolved(&dir, "kind = \"static\"\nstatic_layout = [\"c5\"]");
    let mut cache = super::view::NodeCache::default();
    let view = |s: &FakeSlurm, cache: &mut super::view::NodeCache| {
        let v = View::build(&r, s.nodes.clone(), s.jobs.clone(), cache);
        format!("{:?}", v.gpus)
    };
    let fresh = |s: &FakeSlurm| view(s, &mut Default::default());
    let mut s = cluster();
    let before = fresh(&s);
    assert_eq!(view(&s, &mut cache), before);
    assert_eq!(view(&s, &mut cache), before, "served from the cache");
    // Job 2 now holds node b's 4g (IDX 1) instead of its 3g: the busy instance moves.
    s.jobs[1].gres_detail = vec!["gpu:4g.20gb:1(IDX:1)".into()];
    let moved = fresh(&s);
    assert_ne!(moved, before);
    assert_eq!(view(&s, &mut cache), moved);
    // Node c's agent reports a new layout.
    s.nodes[2] = FakeSlurm::node("c", &[("A100-SXM4-40GB", C8)]);
    let relaid = fresh(&s);
    assert_ne!(relaid, moved);
    assert_eq!(view(&s, &mut cache), relaid);
}
