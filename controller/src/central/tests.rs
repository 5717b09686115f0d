//! The cycle on an in-memory Slurm with instant agents (the least powerful test that
//! shows the decisions and every way back; controller/tests runs it on a real Slurm).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use smartmig_core::config::{Config, Mode, Resolved};
use smartmig_core::routing::{RoutedFrom, Snapshot};

use super::batch::{NodeState, BATCH_FILE, DRAIN_PREFIX, HELD_PREFIX};
use super::fake::{FakeSlurm, NodeChange};
use super::relayout::{CatchUpError, Disagreement, LeftBehind, Relayout, RelayoutError};
use super::status::Status;
use super::*;
use crate::channel::{self, Desired, Phase};
use crate::slurm::{read_desired, read_report, JobState, SlurmApi, SlurmNode};

const C2: &str = "4g.20gb@0 3g.20gb@4";
const C8: &str = "1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 3g.20gb@4";
const C5: &str = "3g.20gb@0 3g.20gb@4";
const TO_C5: &str = "kind = \"static\"\nstatic_layout = [\"c5\"]";

/// A test's own directory, removed when the test ends, passed or failed.
struct TestDir(tempfile::TempDir);

impl std::ops::Deref for TestDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        self.0.path()
    }
}

fn temp(tag: &str) -> TestDir {
    let prefix = format!("smartmig-central-{tag}-");
    TestDir(tempfile::Builder::new().prefix(&prefix).tempdir().unwrap())
}

/// A config acting at once: no minimum interval, no persistence, any batch size.
fn resolved(dir: &std::path::Path, policy: &str) -> Resolved {
    resolved_with(dir, policy, "min_relayout_interval_s = 0\npersist_cycles = 1\n")
}

fn resolved_with(dir: &std::path::Path, policy: &str, central: &str) -> Resolved {
    let text = format!(
        "version = 1\n[gpu]\nmodels = [\"a100-40gb\"]\n[policy]\n{policy}\n\
         [controller]\nmode = \"drain\"\nstate_dir = \"{d}/state\"\nsnapshot_path = \"{d}/run/snapshot.json\"\n\
         [controller.central]\nreport_timeout_s = 2\nnodes_include = \"{d}/nodes.conf\"\n{central}",
        d = dir.display()
    );
    Config::parse(&text, "test.toml").unwrap().resolve(None).unwrap()
}

/// Records what Slurm was asked to learn, and tells the in-memory Slurm (as a restart
/// would); fails when `fail` holds a message.
/// The node → GRES lists Slurm was asked to learn, one per refresh.
type Batches = Arc<Mutex<Vec<Vec<(String, String)>>>>;

#[derive(Clone, Default)]
struct Recorder {
    batches: Batches,
    fail: Arc<Mutex<Option<String>>>,
    undone: Arc<Mutex<u32>>,
    reloads: Arc<Mutex<u32>>,
    /// The state directory whose ledger each undo finds written ahead (`Undoing`).
    ledger_dir: Arc<Mutex<Option<PathBuf>>>,
    /// The reconfigure path (slurmd keeps running) instead of the restart path.
    reconfigure: Arc<Mutex<bool>>,
    /// The reconfigure path's undo, in order: `put back`, then `reload` with the phase
    /// each node's agent had answered by then.
    undo_steps: Arc<Mutex<Vec<String>>>,
    /// The refresh failed before the include held the batch's values: nothing to put back.
    include_unwritten: Arc<Mutex<bool>>,
    /// The reload's answer is lost (Slurm may have reloaded).
    reload_lost: Arc<Mutex<bool>>,
    /// Putting the include back fails (the controller's file system full or read-only).
    put_back_fails: Arc<Mutex<bool>>,
    /// The nodes of each call to bring the node file in line with slurmctld.
    agreed: Arc<Mutex<Vec<Vec<String>>>>,
    /// Bringing the node file in line fails (it cannot be read).
    agree_fails: Arc<Mutex<bool>>,
    /// Every load after the first fails (a put-back's, after the batch's went through).
    later_loads_fail: Arc<Mutex<bool>>,
    /// What each call to load the node file again for nodes slurmctld is left behind on
    /// was given.
    caught_up: Arc<Mutex<Vec<Vec<LeftBehind>>>>,
    /// The nodes whose line in the node file has what their agents report.
    file_as_reported: Arc<Mutex<Vec<String>>>,
    /// The nodes whose line in the node file says otherwise than slurmctld shows.
    would_change: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    /// The error of a put-back that fails, if `put_back_fails`.
    fn put_back_error(&self) -> Result<(), RelayoutError> {
        if *self.put_back_fails.lock().unwrap() {
            return Err(RelayoutError::Write(smartmig_core::durable::DurableError {
                path: "nodes.conf".into(),
                what: "write the temporary file",
                source: std::io::Error::from_raw_os_error(28),
            }));
        }
        Ok(())
    }
}

impl Relayout for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn stops_slurmd(&self) -> bool {
        !*self.reconfigure.lock().unwrap()
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }
    fn check(&self, nodes: &[String]) -> Result<(), RelayoutError> {
        match nodes.iter().find(|n| n.starts_with("unlisted")) {
            Some(n) => Err(RelayoutError::NoNodeLine {
                path: "nodes.conf".into(),
                node: n.clone(),
            }),
            None => Ok(()),
        }
    }
    fn apply(&mut self, api: &mut dyn SlurmApi, nodes: &[(String, String)]) -> Result<(), RelayoutError> {
        self.batches.lock().unwrap().push(nodes.to_vec());
        if let Some(why) = self.fail.lock().unwrap().clone() {
            return Err(RelayoutError::NoAnswer(Duration::from_secs(1), why));
        }
        if *self.later_loads_fail.lock().unwrap() && self.batches.lock().unwrap().len() > 1 {
            return Err(RelayoutError::NoAnswer(
                Duration::from_secs(1),
                "refused (test)".into(),
            ));
        }
        shown_by_slurm(api, nodes);
        Ok(())
    }
    fn undo(
        &mut self,
        _: &mut dyn SlurmApi,
        _: &[(String, String)],
        reload: bool,
    ) -> Result<bool, RelayoutError> {
        *self.undone.lock().unwrap() += 1;
        self.put_back_error()?;
        *self.reloads.lock().unwrap() += u32::from(reload);
        if let Some(dir) = self.ledger_dir.lock().unwrap().as_ref() {
            let b = batch::Ledger::load(dir).unwrap().batch.unwrap();
            assert!(
                matches!(b.slurm, batch::SlurmStep::Undoing { .. }),
                "{:?}",
                b.slurm
            );
        }
        Ok(true)
    }
    fn put_back(&mut self, _: &[(String, String)]) -> Result<bool, RelayoutError> {
        self.put_back_error()?;
        let put = !*self.include_unwritten.lock().unwrap();
        self.undo_steps.lock().unwrap().push(format!("put back: {put}"));
        Ok(put)
    }
    fn reload(&mut self, api: &mut dyn SlurmApi) -> Result<(), RelayoutError> {
        let phases: Vec<String> = api
            .nodes()
            .unwrap()
            .iter()
            .filter_map(|n| {
                read_report(n)
                    .and_then(Result::ok)
                    .map(|r| format!("{}:{:?}", n.name, r.phase))
            })
            .collect();
        self.undo_steps
            .lock()
            .unwrap()
            .push(format!("reload {}", phases.join(" ")));
        if *self.reload_lost.lock().unwrap() {
            return Err(RelayoutError::Reconfigure(crate::slurm::SlurmError::Call {
                call: "slurm_reconfigure".into(),
                errno: 1002,
                message: "Communication receive failure".into(),
            }));
        }
        Ok(())
    }
    /// As if the node file had what the agents of `file_as_reported` report (a put-back
    /// wrote it).
    fn catch_up(&mut self, api: &mut dyn SlurmApi, left: &[LeftBehind]) -> Result<Vec<String>, CatchUpError> {
        self.caught_up.lock().unwrap().push(left.to_vec());
        let file = self.file_as_reported.lock().unwrap().clone();
        let behind: Vec<(String, String)> = left
            .iter()
            .filter(|l| file.contains(&l.node))
            .map(|l| (l.node.clone(), l.reported.clone()))
            .collect();
        if behind.is_empty() {
            return Ok(Vec::new());
        }
        if *self.later_loads_fail.lock().unwrap() {
            return Err(CatchUpError::Load {
                nodes: behind.into_iter().map(|(n, _)| n).collect(),
                source: RelayoutError::NoAnswer(Duration::from_secs(1), "refused (test)".into()),
            });
        }
        shown_by_slurm(api, &behind);
        Ok(behind.into_iter().map(|(n, _)| n).collect())
    }
    fn would_change(&mut self, _: &[(String, String)]) -> Result<Vec<String>, RelayoutError> {
        Ok(self.would_change.lock().unwrap().clone())
    }
    fn agree(&mut self, shown: &[(String, String)]) -> Result<Vec<Disagreement>, RelayoutError> {
        let mut nodes: Vec<String> = shown.iter().map(|(n, _)| n.clone()).collect();
        nodes.sort();
        self.agreed.lock().unwrap().push(nodes);
        if *self.agree_fails.lock().unwrap() {
            return Err(RelayoutError::Read {
                path: "nodes.conf".into(),
                source: std::io::Error::from_raw_os_error(13),
            });
        }
        Ok(Vec::new())
    }
}

/// Slurm showing each node of `nodes` with its MIG GRES, as when it loads a node file
/// whose line was rewritten: the types keep their places.
fn shown_by_slurm(api: &mut dyn SlurmApi, nodes: &[(String, String)]) {
    for (node, gres) in nodes {
        let before = api.node(node).unwrap().map(|n| n.gres).unwrap_or_default();
        let managed = crate::slurm::parse_gres(&format!("{before},{gres}"), "test")
            .unwrap()
            .into_iter()
            .map(|e| e.gpu_type)
            .collect();
        let u = crate::slurm::NodeUpdate {
            node: node.clone(),
            gres: Some(crate::slurm::merge_mig_gres(&before, gres, &managed)),
            ..Default::default()
        };
        api.update_node(&u).unwrap();
    }
}

impl Recorder {
    fn batches(&self) -> Vec<Vec<(String, String)>> {
        self.batches.lock().unwrap().clone()
    }
}

/// Node a: c2 with a job on its 4g (which c5 and c8 destroy); node b: GPU 0 in c5 with a
/// job on its 3g.20gb@4, GPU 1 in c2, idle (its change to c5 keeps the job's device
/// index); node c: c2, idle. Slurm numbers devices by type name (equal lengths:
/// alphabetically), then GPU by GPU: on a, 3g.20gb is IDX 0, 4g.20gb IDX 1; on b the job's
/// 3g.20gb@4 of GPU 0 is IDX 1.
fn cluster() -> FakeSlurm {
    let mut s = FakeSlurm {
        auto_agent: true,
        ..FakeSlurm::default()
    };
    for n in ["a", "b", "c"] {
        let gpus: &[(&str, &str)] = match n {
            "b" => &[("A100-SXM4-40GB", C5), ("A100-SXM4-40GB", C2)],
            _ => &[("A100-SXM4-40GB", C2)],
        };
        s.nodes.push(FakeSlurm::node(n, gpus));
    }
    s.jobs.push(FakeSlurm::running(1, "a", "4g.20gb", 1));
    s.jobs.push(FakeSlurm::running(2, "b", "3g.20gb", 1));
    s
}

fn central(r: Resolved, s: FakeSlurm, mode: Mode, rec: Recorder) -> Central {
    central_over(r, Box::new(s), mode, rec)
}

/// [`central`] over any Slurm (the in-memory one wrapped in injected faults).
fn central_over(r: Resolved, api: Box<dyn SlurmApi>, mode: Mode, rec: Recorder) -> Central {
    let decider = Decider::new(&r, mode, 7);
    Central::new(r, api, decider, Box::new(rec), mode).unwrap()
}

impl Central {
    /// The in-memory Slurm under the central role.
    fn api_fake(&mut self) -> &mut FakeSlurm {
        self.api
            .as_any()
            .downcast_mut::<FakeSlurm>()
            .expect("a FakeSlurm")
    }
}

/// What the last cycle did with GPU `gpu` (`node/index`).
fn action(c: &Central, gpu: &str) -> String {
    let d = c.status.decisions.iter().find(|d| d.gpu == gpu);
    d.map(|d| d.action.clone())
        .unwrap_or_else(|| panic!("no decision for {gpu}"))
}

/// `--once`: a deciding cycle and the ones that finish its batch.
fn once(c: &mut Central) -> CycleReport {
    c.run_once(Duration::ZERO, Duration::from_secs(20))
}

fn node(c: &mut Central, name: &str) -> crate::slurm::SlurmNode {
    c.api().node(name).unwrap().unwrap()
}

/// The layout of node `name`'s last GPU (the one that may change: on b the first holds the
/// job and is in c5 already).
fn layout_of(c: &mut Central, name: &str) -> String {
    let report = read_report(&node(c, name)).unwrap().unwrap();
    report.gpus.last().unwrap().layout.clone()
}

#[test]
fn idle_instances_change_busy_ones_are_spared_and_slurm_is_refreshed_once() {
    let dir = temp("drain");
    let rec = Recorder::default();
    let mut c = central(resolved(&dir, TO_C5), cluster(), Mode::Drain, rec.clone());
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.nodes, vec!["b".to_string(), "c".to_string()]);
    assert_eq!((r.changed, r.skipped_busy), (2, 1));
    assert_eq!(layout_of(&mut c, "a"), C2, "a's 4g is busy: a keeps its layout");
    assert_eq!(layout_of(&mut c, "b"), C5);
    assert_eq!(layout_of(&mut c, "c"), C5);
    assert_eq!(
        rec.batches(),
        vec![vec![
            ("b".to_string(), "gpu:3g.20gb:4".to_string()),
            ("c".to_string(), "gpu:3g.20gb:2".to_string())
        ]],
        "one refresh for the batch, with the reported layouts"
    );
    let nodes = c.api().nodes().unwrap();
    assert!(nodes.iter().all(|n| !n.drain), "every node resumed");
    assert!(read_desired(&node(&mut c, "a")).is_none(), "a was never touched");
    let d = read_desired(&node(&mut c, "b")).unwrap().unwrap();
    assert_eq!((d.generation, d.phase), (1, Phase::Start));
    let status = Status::read(&dir.join("state")).unwrap();
    assert!(status
        .decisions
        .iter()
        .any(|d| d.gpu == "a/0" && d.action.starts_with("skip: busy 4g.20gb@0")));
    assert!(status
        .decisions
        .iter()
        .any(|d| d.gpu == "b/1" && d.action == "applied" && d.to == "c5"));
    assert_eq!(status.counters.repartitions, 2);
    assert!(status.pending_transitions.is_empty());
    assert!(!c.in_flight());
    let snap = Snapshot::parse(&std::fs::read(dir.join("run/snapshot.json")).unwrap()).unwrap();
    assert!(snap.state("3g.20gb").free >= 2, "{snap:?}");
    assert_eq!(snap.state("4g.20gb").free, 0, "a's 4g is busy");
}

/// The idle test cluster after a cycle that started a batch to c5 (no 4g.20gb) whose node
/// c has not answered Apply: c still has its 4g.20gb.
fn batch_in_flight_taking_cs_4g(dir: &std::path::Path) -> Central {
    let mut s = cluster();
    s.jobs.clear();
    s.slow_apply = vec!["c".into()];
    let mut c = central(resolved(dir, TO_C5), s, Mode::Drain, Recorder::default());
    c.cycle();
    assert!(c.in_flight(), "c's agent has not answered Apply");
    c
}

#[test]
fn while_a_batch_is_in_flight_the_snapshot_lists_the_types_the_gpus_will_have() {
    let dir = temp("snapshot-in-flight");
    let mut c = batch_in_flight_taking_cs_4g(&dir);
    assert_eq!(layout_of(&mut c, "c"), C2, "c still has its 4g.20gb");
    let read = || Snapshot::parse(&std::fs::read(dir.join("run/snapshot.json")).unwrap()).unwrap();
    let snap = read();
    // Routed there now, a job would wait for a type about to go.
    assert!(!snap.types.contains_key("4g.20gb"), "{snap:?}");
    assert!(snap.types.contains_key("3g.20gb"), "{snap:?}");
    c.api_fake().slow_apply.clear();
    for _ in 0..10 {
        if !c.in_flight() {
            break;
        }
        c.cycle_with(false);
    }
    assert!(!c.in_flight());
    c.cycle_with(false); // a view read with every node back in service
    let snap = read();
    assert!(
        !snap.types.contains_key("4g.20gb") && snap.state("3g.20gb").free == 8,
        "{snap:?}"
    );
}

#[test]
fn a_batch_target_that_no_longer_parses_leaves_its_gpus_types_as_seen_in_the_snapshot() {
    let dir = temp("snapshot-bad-target");
    let mut c = batch_in_flight_taking_cs_4g(&dir);
    let view = c.read_view().unwrap();
    assert!(!c.snapshot(&view, 0.0).types.contains_key("4g.20gb"));
    // Only a hand-edited ledger holds such a target: c's GPUs keep the types they have.
    let batch = c.ledger.batch.as_mut().unwrap();
    for t in &mut batch.nodes.get_mut("c").unwrap().targets {
        t.to = "not a layout".into();
    }
    let snap = c.snapshot(&view, 0.0);
    assert!(snap.types.contains_key("4g.20gb"), "{snap:?}");
}

#[test]
fn the_steps_follow_the_transaction_order_and_slurmd_is_stopped_only_around_the_refresh() {
    let dir = temp("order");
    let rec = Recorder::default();
    let mut s = cluster();
    s.jobs.clear();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec);
    once(&mut c);
    let updates = c.api_fake().node_updates.clone();
    let on_c: Vec<String> = updates
        .iter()
        .filter(|u| u.node == "c")
        .map(|u| {
            if u.drain.is_some() {
                "drain".to_string()
            } else if u.resume {
                "resume".to_string()
            } else if u.gres.is_some() {
                "slurm refreshed".to_string()
            } else if let Some(e) = &u.extra {
                let d: Desired = channel::parse(Some(e), "x").unwrap().unwrap();
                format!("{:?}", d.phase)
            } else {
                "other".into()
            }
        })
        .collect();
    assert_eq!(
        on_c,
        ["drain", "Apply", "Install", "slurm refreshed", "Start", "resume"]
    );
}

#[test]
fn the_drain_reason_names_the_generation_and_a_second_cycle_changes_nothing() {
    let dir = temp("gen");
    let mut c = central(resolved(&dir, TO_C5), cluster(), Mode::Drain, Recorder::default());
    once(&mut c);
    let drains: Vec<String> = c
        .api_fake()
        .node_updates
        .iter()
        .filter_map(|u| u.drain.clone())
        .collect();
    assert_eq!(drains, [format!("{DRAIN_PREFIX}1"), format!("{DRAIN_PREFIX}1")]);
    let r = once(&mut c);
    assert_eq!(r.changed, 0);
    assert_eq!(c.status.generation, 1);
}

#[test]
fn dry_run_touches_nothing_and_reports_the_same_decisions() {
    let dir = temp("dry");
    let mut dry = central(
        resolved(&dir, TO_C5),
        cluster(),
        Mode::DryRun,
        Recorder::default(),
    );
    let r = once(&mut dry);
    assert_eq!((r.changed, r.skipped_busy), (2, 1));
    let nodes = dry.api().nodes().unwrap();
    assert_eq!(nodes, cluster().nodes, "no node record changed");
    assert!(!dir.join(format!("state/{BATCH_FILE}")).exists());
    let dry_status = Status::read(&dir.join("state")).unwrap();
    assert!(dry_status
        .decisions
        .iter()
        .all(|d| d.action.starts_with("would ")));
    let would: Vec<(String, bool)> = dry_status
        .decisions
        .iter()
        .map(|d| (d.gpu.clone(), d.action.contains("skip")))
        .collect();
    assert_eq!(
        would,
        [
            ("a/0".to_string(), true),
            ("b/1".to_string(), false),
            ("c/0".to_string(), false)
        ]
    );
}

#[test]
fn a_dry_run_shows_the_limits_a_live_cycle_would_meet() {
    // Before Slurm 23.02.6 a live cycle keeps a's 4g.20gb for routed job 10.
    let (mut dry, _dir) = on_slurm_22_05_with_jobs_to_reroute("dry-limits", Mode::DryRun);
    let r = once(&mut dry);
    assert_eq!(r.changed, 2, "{r:?}");
    let why = action(&dry, "a/0");
    assert!(
        why.starts_with("would wait: the last 4g.20gb of the cluster; routed job(s) 10"),
        "{why}"
    );
    let others: Vec<&str> = dry
        .status
        .decisions
        .iter()
        .filter(|d| d.gpu != "a/0")
        .map(|d| d.action.as_str())
        .collect();
    assert_eq!(others, ["would apply", "would apply"]);
    // Persistence counts dry cycles as it counts live ones.
    let dir = temp("dry-persist");
    let resolved = resolved_with(&dir, TO_C5, "min_relayout_interval_s = 0\npersist_cycles = 2\n");
    let mut dry = central(resolved, cluster(), Mode::DryRun, Recorder::default());
    assert_eq!(once(&mut dry).changed, 0);
    assert_eq!(
        action(&dry, "b/1"),
        "would wait: target chosen 1 of 2 cycles in a row"
    );
    assert_eq!(once(&mut dry).changed, 2);
    let last = dry.status.decisions.iter().rev().find(|d| d.gpu == "b/1");
    assert_eq!(last.map(|d| d.action.as_str()), Some("would apply"));
}

/// The plugin's mark on a job it routed from `gres:gpu:mig:1` with this time limit to
/// `gres:gpu:4g.20gb:1`, beside an admin's own text.
fn routed_from_mig(time_limit_min: Option<u32>) -> String {
    RoutedFrom {
        tres: [Some("gres:gpu:mig:1".into()), None, None, None],
        time_limit_min,
        to: Some([Some("gres:gpu:4g.20gb:1".into()), None, None, None]),
    }
    .mark(Some("ticket-4711"))
}

/// The test cluster with every 4g.20gb about to go (the policy's c5 has none), and three
/// pending jobs asking for one: 10 routed there by the plugin from `gpu:mig:1` (its limit
/// rescaled from the user's 120 min to 50), 11 the user's explicit choice, 12 routed
/// there like 10 and updated by its owner since to two of them.
fn cluster_with_jobs_to_reroute() -> FakeSlurm {
    let mut s = cluster();
    s.jobs.retain(|j| j.id != 1); // a is idle too: every 4g goes away
    let mut routed = FakeSlurm::pending(10, "gres:gpu:4g.20gb:1");
    routed.admin_comment = Some(routed_from_mig(Some(120)));
    routed.time_limit_min = Some(50);
    routed.time_min_min = Some(45);
    s.jobs.push(routed);
    s.jobs.push(FakeSlurm::pending(11, "gres:gpu:4g.20gb:1"));
    let mut updated = FakeSlurm::pending(12, "gres:gpu:4g.20gb:2");
    updated.admin_comment = Some(routed_from_mig(Some(120)));
    s.jobs.push(updated);
    s
}

/// Job `id`'s first TRES string.
fn job_tres(c: &mut Central, id: u32) -> Option<String> {
    let jobs = c.api().jobs().unwrap();
    jobs.into_iter()
        .find(|j| j.id == id)
        .and_then(|j| j.tres[0].clone())
}

#[test]
fn only_jobs_the_plugin_routed_are_rerouted_never_to_less_memory_and_with_the_rescaled_limit() {
    let dir = temp("reroute");
    let s = cluster_with_jobs_to_reroute();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    let r = once(&mut c);
    assert_eq!(r.rerouted, 1, "{r:?}");
    let jobs = c.api().jobs().unwrap();
    let j10 = jobs.iter().find(|j| j.id == 10).unwrap();
    assert_eq!(
        j10.tres[0].as_deref(),
        Some("gres:gpu:3g.20gb:1"),
        "20 GB at least, and present"
    );
    assert!(
        j10.time_limit_min.is_some_and(|t| t != 50),
        "rescaled from the user's 120: {j10:?}"
    );
    // A `--time-min` above the rescaled limit raises it (Slurm refuses an update below).
    let s = {
        let mut s = cluster_with_jobs_to_reroute();
        if let Some(j) = s.jobs.iter_mut().find(|j| j.id == 10) {
            j.time_min_min = Some(600);
        }
        s
    };
    let dir2 = temp("reroute-time-min");
    let mut c2 = central(resolved(&dir2, TO_C5), s, Mode::Drain, Recorder::default());
    assert_eq!(once(&mut c2).rerouted, 1);
    let raised = c2.api().jobs().unwrap().into_iter().find(|j| j.id == 10).unwrap();
    assert_eq!(raised.time_limit_min, Some(600), "{raised:?}");
    let j11 = jobs.iter().find(|j| j.id == 11).unwrap();
    assert_eq!(
        j11.tres[0].as_deref(),
        Some("gres:gpu:4g.20gb:1"),
        "left as the user asked"
    );
    let j12 = jobs.iter().find(|j| j.id == 12).unwrap();
    assert_eq!(
        j12.tres[0].as_deref(),
        Some("gres:gpu:4g.20gb:2"),
        "changed by its owner since it was routed: left as asked now, not re-routed from the mark"
    );
    // The mark follows the job to its new type (a later re-route finds it current), and
    // the admin's own text stays.
    let comment = j10.admin_comment.as_deref().unwrap_or_default();
    assert!(comment.starts_with("ticket-4711 "), "{comment}");
    let mark = RoutedFrom::find_current(comment, &j10.tres).expect("a current mark");
    assert_eq!(
        mark.tres[0].as_deref(),
        Some("gres:gpu:mig:1"),
        "still what the user asked"
    );
    assert_eq!(mark.time_limit_min, Some(120));
}

/// The central role for [`cluster_with_jobs_to_reroute`] on Slurm 22.05.8, which cannot
/// re-route pending jobs.
/// The central role and the directory it keeps its state in (gone when dropped).
fn on_slurm_22_05_with_jobs_to_reroute(tag: &str, mode: Mode) -> (Central, TestDir) {
    let dir = temp(tag);
    let mut c = central(
        resolved(&dir, TO_C5),
        cluster_with_jobs_to_reroute(),
        mode,
        Recorder::default(),
    );
    c.for_release(0x16_05_08);
    (c, dir)
}

#[test]
fn before_slurm_23_02_6_the_last_gpu_of_a_type_a_routed_job_waits_for_stays_until_it_leaves() {
    let (mut c, _dir) = on_slurm_22_05_with_jobs_to_reroute("keep-type", Mode::Drain);
    let r = once(&mut c);
    assert_eq!((r.changed, r.rerouted, r.errors.len()), (2, 0, 0), "{r:?}");
    assert_eq!(layout_of(&mut c, "a"), C2, "a keeps the last 4g.20gb");
    assert_eq!(
        (layout_of(&mut c, "b"), layout_of(&mut c, "c")),
        (C5.into(), C5.into())
    );
    let why = action(&c, "a/0");
    assert!(
        why.contains("the last 4g.20gb of the cluster; routed job(s) 10 wait for it"),
        "{why}"
    );
    assert!(c.stranded.is_empty(), "job 10 can still start");
    // The user's own job 11 holds nothing back: once 10 has left, a changes too.
    c.api_fake().jobs.retain(|j| j.id != 10);
    let r = once(&mut c);
    assert_eq!((r.changed, r.errors.len()), (1, 0), "{r:?}");
    assert_eq!(layout_of(&mut c, "a"), C5);
}

#[test]
fn before_slurm_23_02_6_a_routed_job_on_the_last_gpu_of_its_type_is_not_requeued_away_from_it() {
    // Only a has a 4g.20gb, and a job the plugin routed runs on it: preempt mode would
    // requeue it and take the 4g away; pending again, the job would wait for good.
    let cluster = || {
        let mut s = FakeSlurm {
            auto_agent: true,
            ..FakeSlurm::default()
        };
        s.nodes.push(FakeSlurm::node("a", &[("A100-SXM4-40GB", C2)]));
        s.nodes.push(FakeSlurm::node("b", &[("A100-SXM4-40GB", C5)]));
        let mut job = FakeSlurm::running(1, "a", "4g.20gb", 0);
        job.admin_comment = Some(routed_from_mig(None));
        s.jobs.push(job);
        s
    };
    for (release, changed) in [(0x16_05_08, 0), (super::RETYPE_SINCE, 1)] {
        let dir = temp(&format!("keep-running-type-{release:x}"));
        let mut c = central(
            resolved(&dir, TO_C5),
            cluster(),
            Mode::Preempt,
            Recorder::default(),
        );
        c.for_release(release);
        let r = once(&mut c);
        assert_eq!((r.changed, r.errors.len()), (changed, 0), "{release:x}: {r:?}");
        let kept = layout_of(&mut c, "a") == C2;
        assert_eq!(kept, changed == 0, "{release:x}: {}", action(&c, "a/0"));
    }
}

#[test]
fn before_slurm_23_02_6_a_routed_job_whose_type_vanished_is_named_once_and_left_as_it_is() {
    let dir = temp("reroute-22-05");
    let mut s = cluster_with_jobs_to_reroute();
    // Routed while the 4g.20gb were going (a snapshot published before the batch).
    let late = s.jobs.iter().position(|j| j.id == 10).unwrap();
    let job10 = s.jobs.remove(late);
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    c.for_release(0x16_05_08);
    assert_eq!(once(&mut c).changed, 3);
    c.api_fake().jobs.push(job10.clone());
    let r = once(&mut c);
    // An update would leave it asking for the 4g too: it could never start.
    assert_eq!((r.rerouted, r.errors.len()), (0, 0), "{r:?}");
    assert_eq!(job_tres(&mut c, 10).as_deref(), Some("gres:gpu:4g.20gb:1"));
    assert_eq!(c.stranded, [10].into());
    once(&mut c);
    assert_eq!(c.stranded, [10].into(), "named once while it waits");
    assert_eq!(c.status.stranded_jobs, [10], "and shown by `smartmigd status`");
    c.api_fake().jobs.retain(|j| j.id != 10);
    once(&mut c);
    assert!(c.stranded.is_empty(), "forgotten once it left");
    assert!(c.status.stranded_jobs.is_empty());
    c.api_fake().jobs.push(job10);
    c.for_release(super::RETYPE_SINCE);
    assert_eq!(
        once(&mut c).rerouted,
        1,
        "re-routed where Slurm replaces the request"
    );
}

/// The central role over [`cluster_with_jobs_to_reroute`] with slurmctld's answers to job
/// updates faulty as `faults` (JSON) says.
fn reroute_under(dir: &std::path::Path, faults: &str) -> Central {
    let faults = serde_json::from_str(faults).unwrap();
    let api = crate::slurm::faults::Faulty::new(Box::new(cluster_with_jobs_to_reroute()), faults);
    central_over(
        resolved(dir, TO_C5),
        Box::new(api),
        Mode::Drain,
        Recorder::default(),
    )
}

#[test]
fn a_reroute_slurmctld_refuses_is_an_error_and_a_later_cycle_reroutes_the_job() {
    let dir = temp("reroute-refused");
    let mut c = reroute_under(&dir, r#"[{"call": "update_job"}]"#);
    // Re-routing waits for the batch to end (the run's last cycle): the refusal is
    // reported, the job still asks for the type that went, so the next cycle routes it
    // again, and Slurm takes that one.
    let r = once(&mut c);
    assert_eq!(
        r.errors,
        ["cannot re-route job 10: slurm_update_job(10): refused (injected) (slurm errno 2001)"]
    );
    assert_eq!(job_tres(&mut c, 10).as_deref(), Some("gres:gpu:4g.20gb:1"));
    let r = c.cycle();
    assert_eq!((r.rerouted, r.errors.len()), (1, 0), "{r:?}");
    assert_eq!(job_tres(&mut c, 10).as_deref(), Some("gres:gpu:3g.20gb:1"));
    assert_eq!(job_tres(&mut c, 11).as_deref(), Some("gres:gpu:4g.20gb:1"));
}

#[test]
fn a_reroute_whose_reply_was_lost_is_reported_as_uncertain_and_the_job_is_not_rerouted_again() {
    let dir = temp("reroute-lost");
    let mut c = reroute_under(&dir, r#"[{"call": "update_job", "reply_lost": true}]"#);
    let r = once(&mut c);
    assert!(
        r.errors
            .iter()
            .any(|e| e.starts_with("job 10: re-routing to 3g.20gb may have taken effect")),
        "{:?}",
        r.errors
    );
    // Slurm took it: the job asks for a type that exists, so the next cycle leaves it.
    assert_eq!(job_tres(&mut c, 10).as_deref(), Some("gres:gpu:3g.20gb:1"));
    let r = once(&mut c);
    assert_eq!((r.rerouted, r.errors.len()), (0, 0), "{r:?}");
    assert_eq!(job_tres(&mut c, 10).as_deref(), Some("gres:gpu:3g.20gb:1"));
}

#[test]
fn a_missing_policy_file_keeps_every_layout_and_says_why() {
    let dir = temp("keep");
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
    let r = once(&mut c);
    assert_eq!((r.changed, r.wanted), (0, 0));
    let src = &c.status.sources["a100-40gb"];
    assert!(src.starts_with("keep current layouts (policy unusable:"), "{src}");
    assert!(c.api_fake().node_updates.is_empty());
}

#[test]
fn a_failing_agent_rolls_back_and_its_node_is_resumed_without_a_refresh() {
    let dir = temp("fail");
    let mut s = cluster();
    s.agent_fails = Some("IN_USE on 4g.20gb@0".into());
    let rec = Recorder::default();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
    let r = once(&mut c);
    assert_eq!(r.changed, 0);
    assert!(r.errors.iter().any(|e| e.contains("IN_USE")), "{:?}", r.errors);
    assert!(rec.batches().is_empty(), "Slurm already has the layouts");
    assert!(c.api().nodes().unwrap().iter().all(|n| !n.drain));
    assert!(c
        .status
        .decisions
        .iter()
        .any(|d| d.action.starts_with("rolled back: IN_USE")));
    for n in c.api().nodes().unwrap() {
        if let Some(Ok(d)) = read_desired(&n) {
            assert_eq!(d.phase, Phase::Apply, "{}: slurmd was never stopped", n.name);
        }
    }
}

/// One cycle to c5 in which node b's agent goes back from the generation on its own
/// (`went_back` sets it up on the fake): b's record after it, with its GRES before, the
/// recorder, and the central role.
fn went_back_during_start(
    tag: &str,
    went_back: impl FnOnce(&mut FakeSlurm),
    rec: Recorder,
) -> (SlurmNode, String, Central) {
    let dir = temp(tag);
    let mut s = cluster();
    went_back(&mut s);
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec);
    let before = node(&mut c, "b").gres;
    let r = once(&mut c);
    assert_eq!(r.changed, 1, "c only: {:?}", r.errors);
    assert!(!node(&mut c, "c").drain);
    (node(&mut c, "b"), before, c)
}

/// Whether `n` is drained with a reason that says each of `says`.
fn held_saying(n: &SlurmNode, says: &[&str]) -> bool {
    n.drain
        && n.reason
            .as_deref()
            .is_some_and(|w| says.iter().all(|s| w.contains(s)))
}

const PUT_BACK: &str = "Slurm's definition of the node put back to the layouts it has";

#[test]
fn a_start_the_agent_refuses_holds_its_node_instead_of_resuming_it_as_changed() {
    let rec = Recorder::default();
    let (b, before, _) = went_back_during_start(
        "start-refused",
        |s| s.start_refused = vec!["b".into()],
        rec.clone(),
    );
    assert!(held_saying(&b, &["the agent refused Start", PUT_BACK]), "{b:?}");
    // Its GPUs went back (at a reboot): Slurm's definition of it follows, in a load of
    // its own after the batch's, and its agent is asked to revert (slurmd reads it).
    let batches = rec.batches.lock().unwrap().clone();
    assert_eq!(batches.len(), 2, "{batches:?}");
    assert_eq!(batches[1].len(), 1, "{batches:?}");
    assert_eq!(batches[1][0].0, "b");
    assert_eq!(b.gres, before);
    assert_eq!(read_report(&b).unwrap().unwrap().phase, Phase::Revert);
}

const STALE: &str = "gres/gpu:3g.20gb count too low (1 < 2)";

/// The central role of a cycle to c5 in which, by the time node b's agent started slurmd,
/// slurmctld's record of b is as `at_start` leaves it (and the first update that holds a
/// node is refused).
fn batch_where_slurm_changes_b_at_start(tag: &str, at_start: NodeChange) -> Central {
    let dir = temp(tag);
    let mut s = cluster();
    s.at_start = vec![("b".into(), at_start)];
    s.refuse_held = 1;
    central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default())
}

/// [`batch_where_slurm_changes_b_at_start`], run to the batch's end: the cycles' report, b's
/// record after them, and the central role.
fn run_batch_where_slurm_changes_b_at_start(
    tag: &str,
    at_start: NodeChange,
) -> (CycleReport, SlurmNode, Central) {
    let mut c = batch_where_slurm_changes_b_at_start(tag, at_start);
    let r = once(&mut c);
    assert!(c.ledger.batch.is_none(), "the batch closed");
    (r, node(&mut c, "b"), c)
}

#[test]
fn a_node_slurmctld_refused_during_the_batch_and_has_taken_since_resumes_as_changed() {
    // The refusal of a registration b's slurmd sent before the refresh reached it; the
    // reconfigured slurmd's registration taken since.
    let (r, b, c) =
        run_batch_where_slurm_changes_b_at_start("refused-taken", |n| n.reason = Some(STALE.into()));
    assert_eq!((r.changed, r.errors.len()), (2, 0), "{:?}", r.errors);
    assert!(!b.drain && b.reason.is_none(), "{b:?}");
    assert_eq!(action(&c, "b/1"), "applied");
}

#[test]
fn a_node_slurmctld_refused_waits_at_the_resume_until_slurmctld_takes_its_registration() {
    let refused: NodeChange = |n| (n.reason, n.invalid_reg) = (Some(STALE.into()), true);
    let unheard: NodeChange = |n| (n.reason, n.silent) = (Some(STALE.into()), true);
    for (tag, at_start) in [("refused-wait", refused), ("unheard-wait", unheard)] {
        let mut c = batch_where_slurm_changes_b_at_start(tag, at_start);
        c.run_once(Duration::ZERO, Duration::from_millis(300));
        assert!(c.ledger.batch.is_some(), "{tag}: b waits");
        assert!(node(&mut c, "b").drain, "{tag}");
        // The reconfigured slurmd's registration, taken.
        let b = c.api_fake().nodes.iter_mut().find(|n| n.name == "b").unwrap();
        (b.invalid_reg, b.silent) = (false, false);
        let r = once(&mut c);
        assert!(
            c.ledger.batch.is_none() && r.errors.is_empty(),
            "{tag}: {:?}",
            r.errors
        );
        assert!(!node(&mut c, "b").drain, "{tag}");
        assert_eq!(action(&c, "b/1"), "applied", "{tag}");
    }
}

#[test]
fn a_node_slurmctld_has_not_heard_from_since_its_own_drain_resumes() {
    // slurmctld waits for b's answer (a ping), with the generation's reason: resumed.
    let (r, b, _) = run_batch_where_slurm_changes_b_at_start("unheard-ours", |n| n.silent = true);
    assert!(!b.drain && r.errors.is_empty(), "{b:?} {:?}", r.errors);
}

#[test]
fn a_node_slurmctld_still_refuses_or_has_not_taken_since_its_refusal_is_held_naming_it() {
    let still: NodeChange = |n| (n.reason, n.invalid_reg) = (Some(STALE.into()), true);
    let unheard: NodeChange = |n| (n.reason, n.silent) = (Some(STALE.into()), true);
    let down: NodeChange = |n| (n.reason, n.down) = (Some(STALE.into()), true);
    let taken = "slurmctld refused the node's registration (gres/gpu";
    for (tag, at_start, says) in [
        (
            "refused-still",
            still,
            "slurmctld refuses the node's registration: ",
        ),
        ("refused-unheard", unheard, taken),
        ("refused-down", down, taken),
    ] {
        let (r, b, c) = run_batch_where_slurm_changes_b_at_start(tag, at_start);
        assert_eq!(r.changed, 2, "{tag}: b's GPU has its new layout: {:?}", r.errors);
        assert!(
            held_saying(&b, &["smartmig: held: gen 1: ", says, STALE]),
            "{tag}: {b:?}"
        );
        assert_eq!(
            b.reason.as_deref().unwrap().matches(STALE).count(),
            1,
            "{tag}: {b:?}"
        );
        assert!(action(&c, "b/1").starts_with("failed: smartmig: held: "), "{tag}");
        assert!(r.errors.iter().any(|e| e.contains(says)), "{tag}: {:?}", r.errors);
    }
}

#[test]
fn a_node_slurmctld_refuses_with_the_generations_reason_is_held_instead_of_keeping_the_batch_open() {
    // 22.05 keeps the node's reason when it refuses a registration; a resume is refused
    // while the node is INVAL.
    let (r, b, _) = run_batch_where_slurm_changes_b_at_start("refused-ours", |n| n.invalid_reg = true);
    assert!(
        held_saying(&b, &["slurmctld refuses the node's registration (INVAL"]),
        "{b:?} {:?}",
        r.errors
    );
}

#[test]
fn a_node_marked_down_after_slurmctld_refused_it_is_left_as_slurmctld_set_it() {
    // Its slurmd died after the refusal: slurmctld appended its own words; not resumed.
    let (_, b, c) = run_batch_where_slurm_changes_b_at_start("refused-down-since", |n| {
        (n.reason, n.down) = (Some(format!("{STALE} : Not responding")), true)
    });
    assert!(
        b.drain
            && b.reason
                .as_deref()
                .is_some_and(|r| r.ends_with(": Not responding")),
        "{b:?}"
    );
    assert!(
        action(&c, "b/1").starts_with("left drained by someone else"),
        "{}",
        action(&c, "b/1")
    );
}

#[test]
fn a_node_held_after_slurmctld_refused_it_keeps_slurmctlds_words_in_the_held_reason() {
    // b's agent refuses Start (its GPUs went back at a reboot): held, and slurmctld's
    // refusal said too.
    let mut c = batch_where_slurm_changes_b_at_start("refused-held", |n| n.reason = Some(STALE.into()));
    c.api_fake().start_refused = vec!["b".into()];
    once(&mut c);
    let b = node(&mut c, "b");
    let slurms = format!("smartmig: held: gen 1: slurmctld: {STALE}; the agent refused Start");
    assert!(held_saying(&b, &[&slurms]), "{b:?}");
}

#[test]
fn a_put_back_slurm_does_not_load_still_asks_the_revert_and_holds_the_node_naming_it() {
    let rec = Recorder::default();
    *rec.later_loads_fail.lock().unwrap() = true;
    let (b, before, _) = went_back_during_start(
        "put-back-fails",
        |s| s.start_refused = vec!["b".into()],
        rec.clone(),
    );
    // (The rest of the reason, the load's error, is cut at Slurm's reason length.)
    assert!(
        held_saying(
            &b,
            &[
                "the agent refused Start",
                "putting Slurm's definition of the node back"
            ]
        ),
        "{b:?}"
    );
    assert_ne!(b.gres, before, "slurmctld kept the generation's");
    assert_eq!(read_report(&b).unwrap().unwrap().phase, Phase::Revert);
}

#[test]
fn slurm_left_behind_by_a_failed_put_back_loads_the_node_file_again_after_a_wait_and_no_batch_starts_in_the_cycle_that_loads(
) {
    let rec = Recorder::default();
    *rec.later_loads_fail.lock().unwrap() = true;
    *rec.file_as_reported.lock().unwrap() = vec!["b".into()];
    let (_, before, mut c) = went_back_during_start(
        "put-back-retried",
        |s| s.start_refused = vec!["b".into()],
        rec.clone(),
    );
    let tries = || rec.caught_up.lock().unwrap().len();
    // The `--once` run's last cycle tried already, and failed: the next try waits.
    assert_eq!(tries(), 1);
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(tries(), 1, "waiting");
    // The wait over: tried again, failing, reported, the wait doubled.
    c.catch_up_retry = c.catch_up_retry.map(|(_, w)| (0.0, w));
    let r = once(&mut c);
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("loading the node file again for b failed")
                && e.contains("tried again in 60 s")),
        "{:?}",
        r.errors
    );
    let b = node(&mut c, "b");
    let left = LeftBehind {
        node: "b".into(),
        reported: gres_of_report(&read_report(&b).unwrap().unwrap().gpus),
        shown: b.gres.clone(),
        busy: true,
    };
    assert_eq!(
        rec.caught_up.lock().unwrap()[1..],
        vec![vec![left]],
        "b alone (job 2 runs there, its GPU count kept): a and c show what their agents report"
    );
    // Loading works now, but smartmig is frozen: Slurm is left alone.
    *rec.later_loads_fail.lock().unwrap() = false;
    c.catch_up_retry = c.catch_up_retry.map(|(_, w)| (0.0, w));
    let freeze = c.resolved.config.controller.state_dir.join(guard::FREEZE_FILE);
    std::fs::write(&freeze, "upgrade\n").unwrap();
    once(&mut c);
    assert_eq!(tries(), 2, "frozen");
    std::fs::remove_file(&freeze).unwrap();
    // Thawed; node c wants a change (back in c2). The cycle that loads starts no batch
    // (its view is stale), the next does.
    c.api_fake().nodes[2] = FakeSlurm::node("c", &[("A100-SXM4-40GB", C2)]);
    c.api_fake().touch();
    let batches = rec.batches().len();
    let r = c.cycle();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(tries(), 3);
    let b = node(&mut c, "b");
    assert_eq!(b.gres, before, "slurmctld has what b has");
    assert!(
        held_saying(&b, &["the agent refused Start"]),
        "still held for the admin: {b:?}"
    );
    assert!(!c.in_flight(), "no batch started in the cycle that loaded");
    let r = once(&mut c);
    assert_eq!(r.changed, 1, "{r:?}");
    assert_eq!(rec.batches().len(), batches + 1);
    assert_eq!(tries(), 3, "in line: nothing to load again");
}

/// [`cluster`] with node a held by smartmig and INVAL: slurmctld refused its last
/// registration, and now shows what its agent reports. On the reconfigure path (slurmd
/// keeps running across loads), the one where a slurmd can be left on old definitions.
fn a_held_and_refused(tag: &str) -> (TestDir, Recorder, Central) {
    let dir = temp(tag);
    let mut s = cluster();
    s.nodes[0].drain = true;
    s.nodes[0].reason = Some(held_reason(3, "the agent refused Start"));
    s.nodes[0].invalid_reg = true;
    let rec = Recorder::default();
    *rec.reconfigure.lock().unwrap() = true;
    let c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
    (dir, rec, c)
}

impl Central {
    /// Reconfigures the in-memory Slurm has had: asks that every slurmd register again.
    fn asks(&mut self) -> u32 {
        self.api_fake().reconfigures
    }

    /// The wait before the next ask over.
    fn ask_due(&mut self) {
        self.register.next = self.register.next.map(|(_, w)| (0.0, w));
    }
}

#[test]
fn a_held_node_slurmctld_refused_and_now_shows_as_reported_is_asked_to_register_again_and_no_batch_starts_in_that_cycle(
) {
    let (_dir, rec, mut c) = a_held_and_refused("register-again");
    let r = c.cycle();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(c.asks(), 1, "every slurmd asked to register");
    assert!(!node(&mut c, "a").invalid_reg, "a registered");
    assert!(
        !c.in_flight() && rec.batches().is_empty(),
        "no batch in the cycle that asks (its view is stale)"
    );
    let r = once(&mut c);
    assert_eq!(
        r.nodes,
        ["b", "c"],
        "the next cycle's batch, without the drained a: {r:?}"
    );
    assert_eq!(c.asks(), 1, "nothing more to ask");
    assert!(
        held_saying(&node(&mut c, "a"), &["the agent refused Start"]),
        "still drained for the admin"
    );
}

#[test]
fn a_registration_slurmctld_keeps_refusing_is_asked_again_after_a_wait_that_doubles_four_times_at_most() {
    let (_dir, _, mut c) = a_held_and_refused("register-again-refused");
    c.api_fake().refuse_registration = vec!["a".into()];
    c.cycle();
    assert_eq!(c.asks(), 1);
    // Still refused: the next ask waits, and the batch goes on meanwhile.
    let r = once(&mut c);
    assert_eq!((c.asks(), r.nodes.len()), (1, 2), "{r:?}");
    for asks in 2..=4 {
        c.ask_due();
        c.cycle();
        assert_eq!(c.asks(), asks, "the wait over");
    }
    let wait = c.register.next.map(|(at, _)| (at - unix_now()).round());
    assert_eq!(wait, Some(240.0), "30, 60, 120 s, then 240 s");
    c.ask_due();
    let r = c.cycle();
    assert_eq!(c.asks(), 4, "no fifth ask");
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("still refuses the registration of a after 4 asks")),
        "{:?}",
        r.errors
    );
    let r = c.cycle();
    assert!(r.errors.is_empty() && c.asks() == 4, "said once: {:?}", r.errors);
    // Another node refused: asked for at once, a's refusal notwithstanding.
    let held = held_reason(4, "the agent refused Start");
    let n = &mut c.api_fake().nodes[2];
    (n.drain, n.reason, n.invalid_reg) = (true, Some(held), true);
    c.api_fake().touch();
    c.cycle();
    assert_eq!((c.asks(), c.register.made), (5, 1), "c newly refused");
    // c registered: a's asks go on, they do not start over.
    c.cycle();
    assert_eq!(
        (c.asks(), c.register.nodes.as_slice(), c.register.made),
        (5, &["a".to_string()][..], 1)
    );
    // The refusal over (slurmd restarted by the admin): a later one is asked again.
    c.api_fake().nodes[0].invalid_reg = false;
    c.api_fake().touch();
    c.cycle();
    assert_eq!((c.register.next, c.register.made), (None, 0));
}

#[test]
fn no_registration_is_asked_while_frozen_while_a_reconfigure_would_load_other_definitions_for_a_node_an_admin_drained_or_on_the_restart_path(
) {
    let (_dir, rec, mut c) = a_held_and_refused("register-again-not");
    c.api_fake().refuse_registration = vec!["a".into()];
    let state_dir = c.resolved.config.controller.state_dir.clone();
    std::fs::create_dir_all(&state_dir).unwrap();
    let freeze = state_dir.join(guard::FREEZE_FILE);
    std::fs::write(&freeze, "upgrade\n").unwrap();
    c.cycle();
    assert_eq!(c.asks(), 0, "frozen");
    std::fs::remove_file(&freeze).unwrap();
    // Another node's line says otherwise than slurmctld: the reconfigure would load it.
    *rec.would_change.lock().unwrap() = vec!["site".into()];
    once(&mut c);
    assert_eq!(c.asks(), 0, "site's line would load too");
    *rec.would_change.lock().unwrap() = Vec::new();
    // A node left alone (its report does not read): its line may be anything.
    c.api_fake().nodes.push(SlurmNode {
        name: "unreadable".into(),
        gres: "gpu:7g.40gb:1".into(),
        comment: Some(r#"{"smartmig": {"version": 4}}"#.into()),
        ..SlurmNode::default()
    });
    c.api_fake().touch();
    c.ask_due();
    c.cycle();
    assert_eq!(c.asks(), 0, "a node left alone");
    c.api_fake().nodes.pop();
    c.api_fake().touch();
    c.ask_due();
    c.cycle();
    assert_eq!(c.asks(), 1);
    // slurmctld's own reason for the refusal (24.11 puts it in place of smartmig's).
    c.api_fake().nodes[0].reason = Some("gres/gpu count reported lower than configured (0 < 1)".into());
    c.api_fake().touch();
    c.ask_due();
    c.cycle();
    assert_eq!(c.asks(), 2, "refused over its GPUs");
    // An admin's drain, or another GRES: a refusal smartmig did not cause, left to them.
    for reason in [
        "memory test",
        "gres/shard count reported lower than configured (0 < 4)",
    ] {
        c.api_fake().nodes[0].reason = Some(reason.into());
        c.api_fake().touch();
        c.ask_due();
        c.cycle();
        assert_eq!(c.asks(), 2, "{reason}");
        assert_eq!(c.register.next, None);
    }
    // Held again; its slurmd stopped, then its agent mid-phase: no registration to ask.
    c.api_fake().nodes[0].reason = Some(held_reason(3, "the agent refused Start"));
    let report = read_report(&c.api_fake().nodes[0]).unwrap().unwrap();
    let stopped = crate::channel::Report {
        slurmd_running: false,
        ..report.clone()
    };
    let mid_phase = crate::channel::Report {
        outcome: crate::channel::Outcome::InProgress,
        ..report
    };
    for (r, why) in [(stopped, "slurmd stopped"), (mid_phase, "agent mid-phase")] {
        c.api_fake().nodes[0].comment = channel::merge(None, "fake", Some(&r)).ok();
        c.api_fake().touch();
        c.ask_due();
        c.cycle();
        assert_eq!(c.asks(), 2, "{why}");
    }
    // The restart path restarts slurmd at each load: it is never left on old definitions.
    let (_dir, rec, mut c) = a_held_and_refused("register-again-restart-path");
    *rec.reconfigure.lock().unwrap() = false;
    c.cycle();
    assert_eq!(c.asks(), 0);
}

#[test]
fn a_put_back_slurmctld_already_shows_after_a_restart_of_the_central_role_is_not_loaded_again() {
    let dir = temp("put-back-shown");
    let mut s = cluster();
    s.start_refused = vec!["b".into()];
    let before = s.nodes[1].gres.clone();
    let rec = Recorder::default();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
    let starting = |dir: &TestDir| {
        batch::Ledger::load(&dir.join("state"))
            .ok()
            .and_then(|l| l.batch)
            .is_some_and(|b| b.nodes.get("b").is_some_and(|t| t.state == NodeState::Starting))
    };
    for _ in 0..10 {
        c.cycle_with(true);
        if starting(&dir) {
            break;
        }
    }
    assert!(starting(&dir), "b asked to start");
    assert_eq!(rec.batches().len(), 1, "the batch's refresh");
    // The put-back went through, and the central role died before it saved what followed.
    let mut fake = c.api_fake().clone();
    fake.nodes[1].gres = before.clone();
    drop(c);
    let mut c = central(resolved(&dir, TO_C5), fake, Mode::Drain, rec.clone());
    c.run_once(Duration::ZERO, Duration::from_secs(5));
    assert_eq!(rec.batches().len(), 1, "no second load: {:?}", rec.batches());
    let b = node(&mut c, "b");
    assert!(
        held_saying(
            &b,
            &["the agent refused Start", "Slurm already has the layouts it has"]
        ),
        "{b:?}"
    );
    assert_eq!(b.gres, before);
}

#[test]
fn a_node_whose_watchdog_went_back_before_start_gets_its_slurm_definition_back_and_is_held() {
    let rec = Recorder::default();
    let (b, before, _) = went_back_during_start(
        "watchdog-reverted",
        |s| s.watchdog_reverted = vec!["b".into()],
        rec.clone(),
    );
    assert!(
        held_saying(&b, &["slurmd watchdog: slurmd stopped for 120 s", PUT_BACK]),
        "{b:?}"
    );
    assert_eq!(b.gres, before);
    assert_eq!(
        rec.batches.lock().unwrap().len(),
        2,
        "the batch's load, then b's own"
    );
}

#[test]
fn on_the_reconfigure_path_a_failed_refresh_reloads_slurm_only_after_the_agents_put_gres_conf_back() {
    // The include held the batch's values (put back, then reloaded), or could not even
    // be written (Slurm as it was: nothing reloads).
    for (i, unwritten) in [false, true].into_iter().enumerate() {
        let dir = temp(&format!("reconfigure-fails-{i}"));
        let rec = Recorder::default();
        *rec.include_unwritten.lock().unwrap() = unwritten;
        let (mut c, r) = failed_reconfigure(&dir, &rec);
        assert_eq!(r.changed, 0);
        assert_eq!(*rec.undone.lock().unwrap(), 0, "no undo that reloads at once");
        let steps: &[&str] = if unwritten {
            &["put back: false"]
        } else {
            &["put back: true", "reload a:Revert b:Revert c:Revert"]
        };
        assert_eq!(
            *rec.undo_steps.lock().unwrap(),
            steps,
            "the include put back first, Slurm reloaded once every agent had reverted"
        );
        assert_batch_closed_with_every_node_held(&mut c);
    }
}

/// The batch is over and nodes a, b and c are drained by smartmig (held).
fn assert_batch_closed_with_every_node_held(c: &mut Central) {
    for name in ["a", "b", "c"] {
        let n = node(c, name);
        assert!(
            n.drain && n.reason.as_deref().unwrap().starts_with(HELD_PREFIX),
            "{name}"
        );
    }
    assert!(!c.in_flight());
}

/// One run on the reconfigure path, recorded by `rec`, whose refresh fails (no jobs).
fn failed_reconfigure(dir: &std::path::Path, rec: &Recorder) -> (Central, CycleReport) {
    *rec.reconfigure.lock().unwrap() = true;
    *rec.fail.lock().unwrap() = Some("connection refused".into());
    let mut s = cluster();
    s.jobs.clear();
    let mut c = central(resolved(dir, TO_C5), s, Mode::Drain, rec.clone());
    let r = once(&mut c);
    (c, r)
}

#[test]
fn a_reload_whose_answer_was_lost_is_reported_as_unknown_and_the_nodes_stay_held() {
    let dir = temp("reload-lost");
    let rec = Recorder::default();
    *rec.reload_lost.lock().unwrap() = true;
    let (mut c, r) = failed_reconfigure(&dir, &rec);
    assert!(
        r.errors.iter().any(|e| e
            .contains("whether Slurm loaded its previous node definitions is unknown: scontrol reconfigure")
            && e.contains("Communication receive failure")),
        "{:?}",
        r.errors
    );
    assert_batch_closed_with_every_node_held(&mut c);
}

#[test]
fn an_apply_whose_rollback_failed_too_holds_the_node_instead_of_resuming_it() {
    let dir = temp("rollback-failed");
    let mut s = cluster();
    s.jobs.clear();
    s.agent_fails = Some("IN_USE on 4g.20gb@0".into());
    s.rollback_fails = true;
    let rec = Recorder::default();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
    let r = once(&mut c);
    assert!(rec.batches().is_empty(), "Slurm never refreshed");
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("could not roll back") && e.contains("not `4g.20gb@0 3g.20gb@4`")),
        "{:?}",
        r.errors
    );
    for name in ["a", "c"] {
        let n = node(&mut c, name);
        assert!(
            n.drain && n.reason.as_deref().unwrap().starts_with(HELD_PREFIX),
            "{name}: {:?}",
            n.reason
        );
    }
}

#[test]
fn a_failed_refresh_restores_slurm_reverts_the_nodes_and_leaves_them_drained_with_the_reason() {
    let dir = temp("refresh-fails");
    let rec = Recorder::default();
    *rec.fail.lock().unwrap() = Some("connection refused".into());
    *rec.ledger_dir.lock().unwrap() = Some(dir.join("state"));
    let mut c = central(resolved(&dir, TO_C5), cluster(), Mode::Drain, rec.clone());
    let r = once(&mut c);
    assert_eq!(r.changed, 0);
    assert_eq!(*rec.undone.lock().unwrap(), 1, "the include was put back once");
    for name in ["b", "c"] {
        let n = node(&mut c, name);
        assert_eq!(
            read_report(&n).unwrap().unwrap().gpus.last().unwrap().layout,
            C2,
            "{name} reverted"
        );
        assert!(n.drain, "{name} stays drained");
        let reason = n.reason.unwrap();
        assert!(
            reason.starts_with(HELD_PREFIX) && reason.contains("connection refused"),
            "{reason}"
        );
        let d = read_desired(&node(&mut c, name)).unwrap().unwrap();
        assert_eq!(
            d.phase,
            Phase::Revert,
            "slurmd is started by the revert, never with the new gres.conf"
        );
    }
    assert!(!node(&mut c, "a").drain, "a was not part of the batch");
    // Held nodes are never resumed by smartmig, and get no new plan.
    let r = once(&mut c);
    assert_eq!(r.changed, 0);
    assert!(node(&mut c, "b").drain);
}

#[test]
fn a_failed_refresh_whose_undo_fails_too_holds_the_nodes_as_they_stand_for_their_watchdogs() {
    let dir = temp("undo-fails");
    let rec = Recorder::default();
    *rec.fail.lock().unwrap() = Some("connection refused".into());
    *rec.put_back_fails.lock().unwrap() = true;
    let mut c = central(resolved(&dir, TO_C5), cluster(), Mode::Drain, rec.clone());
    let r = once(&mut c);
    assert_eq!(*rec.undone.lock().unwrap(), 1);
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("failed too") && e.contains("watchdog")),
        "{:?}",
        r.errors
    );
    for name in ["b", "c"] {
        let n = node(&mut c, name);
        assert!(
            n.drain && n.reason.as_deref().unwrap().starts_with(HELD_PREFIX),
            "{name}: {:?}",
            n.reason
        );
        // Slurm may have either definitions: no Revert, which would start slurmd with
        // the old gres.conf whatever slurmctld has; the agent's watchdog decides.
        let d = read_desired(&n).unwrap().unwrap();
        assert_ne!(d.phase, Phase::Revert, "{name}");
        assert_eq!(
            read_report(&n).unwrap().unwrap().gpus.last().unwrap().layout,
            C5,
            "{name} left as it stands"
        );
    }
    assert!(!c.in_flight());
}

#[test]
fn on_the_reconfigure_path_an_include_that_cannot_be_put_back_keeps_the_nodes_new_and_reloads() {
    let dir = temp("put-back-fails");
    let rec = Recorder::default();
    *rec.put_back_fails.lock().unwrap() = true;
    let (mut c, r) = failed_reconfigure(&dir, &rec);
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("putting Slurm's previous node definitions back failed too")),
        "{:?}",
        r.errors
    );
    for name in ["b", "c"] {
        let n = node(&mut c, name);
        assert_ne!(read_desired(&n).unwrap().unwrap().phase, Phase::Revert, "{name}");
        assert_eq!(
            read_report(&n).unwrap().unwrap().gpus.last().unwrap().layout,
            C5,
            "{name}: its gres.conf stays the one the include holds"
        );
    }
    assert!(
        rec.undo_steps
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.starts_with("reload")),
        "Slurm loads the include with the nodes' gres.conf: {:?}",
        rec.undo_steps.lock().unwrap()
    );
    assert_batch_closed_with_every_node_held(&mut c);
}

#[test]
fn a_report_with_another_gpu_set_is_refused_and_nothing_reaches_slurm() {
    let dir = temp("gpu-set");
    let mut s = cluster();
    s.auto_agent = false;
    s.jobs.clear();
    s.nodes.truncate(1);
    let rec = Recorder::default();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
    c.cycle(); // drain
    c.cycle_with(false); // Apply asked
                         // The agent answers with no GPU at all (as an NVML read error once looked).
    let mut report = read_report(&node(&mut c, "a")).unwrap().unwrap();
    report.generation = 1;
    report.phase = Phase::Apply;
    report.gpus.clear();
    c.api_fake().nodes[0].comment = channel::merge(None, "x", Some(&report)).ok();
    c.api_fake().touch();
    let r = c.run_once(Duration::ZERO, Duration::from_secs(5));
    assert!(rec.batches().is_empty(), "no Gres was written");
    let a = node(&mut c, "a");
    assert!(
        a.drain && a.reason.as_deref().unwrap().contains("GPU set"),
        "{a:?} {r:?}"
    );
    assert_eq!(a.gres, "gpu:3g.20gb:1,gpu:4g.20gb:1");
}

#[test]
fn a_node_drained_by_an_admin_during_the_relayout_stays_drained_with_their_reason() {
    let dir = temp("admin-drain");
    let mut s = cluster();
    s.jobs.clear();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    c.cycle();
    c.cycle_with(false);
    // The admin drains b while its re-layout runs.
    let i = c.api_fake().nodes.iter().position(|n| n.name == "b").unwrap();
    c.api_fake().nodes[i].reason = Some("bad fan, ticket 81".into());
    c.api_fake().touch();
    let r = c.run_once(Duration::ZERO, Duration::from_secs(5));
    let b = node(&mut c, "b");
    assert!(
        b.drain && b.reason.as_deref() == Some("bad fan, ticket 81"),
        "{b:?}"
    );
    assert_eq!(
        read_report(&b).unwrap().unwrap().gpus[0].layout,
        C5,
        "its re-layout finished"
    );
    assert!(!node(&mut c, "c").drain);
    assert!(!r.nodes.contains(&"b".to_string()));
}

#[test]
fn a_node_slow_to_apply_is_reverted_and_resumed_and_the_rest_of_the_batch_goes_on() {
    let dir = temp("slow-node");
    let mut s = cluster();
    s.jobs.clear();
    s.slow_apply = vec!["c".into()];
    let rec = Recorder::default();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
    c.cycle();
    for _ in 0..5 {
        c.cycle_with(false);
    }
    let b = c.ledger.batch.as_mut().unwrap();
    assert!(matches!(b.nodes["a"].state, NodeState::Applied { .. }), "{b:?}");
    assert_eq!(b.nodes["c"].state, NodeState::Applying);
    // The others have been ready for long.
    for n in ["a", "b"] {
        b.nodes.get_mut(n).unwrap().since -= 1000.0;
    }
    let r = c.run_once(Duration::ZERO, Duration::from_secs(5));
    assert_eq!(
        rec.batches(),
        vec![vec![
            ("a".to_string(), "gpu:3g.20gb:2".to_string()),
            ("b".to_string(), "gpu:3g.20gb:4".to_string())
        ]]
    );
    assert_eq!(layout_of(&mut c, "c"), C2, "reverted");
    assert!(c.api().nodes().unwrap().iter().all(|n| !n.drain), "{r:?}");
    assert!(c
        .status
        .decisions
        .iter()
        .any(|d| d.gpu == "c/0" && d.action.contains("rolled back: still applying")));
}

#[test]
fn a_plan_that_cannot_be_handed_to_an_agent_resumes_its_node_and_the_rest_of_the_batch_goes_on() {
    let dir = temp("extra-refused");
    let mut s = cluster();
    s.jobs.clear();
    s.extra_refused = vec!["c".into()];
    let rec = Recorder::default();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
    let r = once(&mut c);
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("c: skip: cannot hand the plan to the agent") && e.contains("2011")),
        "{:?}",
        r.errors
    );
    // Only the nodes whose agents got the plan reach Slurm; c keeps its layout, undrained.
    assert_eq!(
        rec.batches(),
        vec![vec![
            ("a".to_string(), "gpu:3g.20gb:2".to_string()),
            ("b".to_string(), "gpu:3g.20gb:4".to_string())
        ]]
    );
    assert_eq!(layout_of(&mut c, "c"), C2);
    assert!(
        read_desired(&node(&mut c, "c")).is_none(),
        "no plan was left for c's agent"
    );
    assert!(c.api().nodes().unwrap().iter().all(|n| !n.drain), "{r:?}");
    assert!(c.ledger.batch.is_none(), "the batch finished");
}

#[test]
fn a_held_reason_slurmctld_refuses_is_set_again_until_it_takes_and_the_batch_waits_for_it() {
    let dir = temp("held-refused");
    let rec = Recorder::default();
    *rec.fail.lock().unwrap() = Some("connection refused".into());
    let mut s = cluster();
    s.refuse_held = 3;
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
    let mut r = c.cycle();
    let mut holding_seen = 0;
    for _ in 0..20 {
        let holding = c.ledger.batch.as_ref().map_or(0, |b| {
            b.nodes
                .values()
                .filter(|t| matches!(t.state, NodeState::Holding { .. }))
                .count()
        });
        holding_seen = holding_seen.max(holding);
        if !c.in_flight() {
            break;
        }
        r.absorb(c.cycle_with(false));
    }
    assert!(!c.in_flight());
    assert!(holding_seen > 0, "the batch waited for the held reasons");
    assert!(
        r.errors
            .iter()
            .filter(|e| e.contains("cannot set the drain reason"))
            .count()
            == 3,
        "{:?}",
        r.errors
    );
    for name in ["b", "c"] {
        let n = node(&mut c, name);
        assert!(n.drain && n.reason.unwrap().starts_with(HELD_PREFIX), "{name}");
    }
}

#[test]
fn a_resume_slurmctld_keeps_refusing_becomes_an_error_once_the_report_timeout_passes() {
    let dir = temp("resume-refused");
    let mut s = cluster();
    s.jobs.clear();
    s.refuse_resume = vec!["c".into()];
    let rec = Recorder::default();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
    let mut r = c.cycle();
    for _ in 0..5 {
        r.absorb(c.cycle_with(false));
    }
    assert!(c.in_flight(), "the batch waits for c");
    assert!(
        !r.errors.iter().any(|e| e.contains("resume refused")),
        "{:?}",
        r.errors
    );
    // Long after c began resuming: the refusal is an error, and c is tried again.
    let mut ledger = batch::Ledger::load(&dir.join("state")).unwrap();
    let t = ledger.batch.as_mut().unwrap().nodes.get_mut("c").unwrap();
    assert!(matches!(t.state, NodeState::Resuming { .. }), "{:?}", t.state);
    t.since = 0.0;
    ledger.save(&dir.join("state")).unwrap();
    let fake = c.api_fake().clone();
    drop(c);
    let mut c = central(resolved(&dir, TO_C5), fake, Mode::Drain, rec.clone());
    let r = c.cycle_with(false);
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("c: resume refused") && e.contains("Invalid node state")),
        "{:?}",
        r.errors
    );
    assert!(c.in_flight() && node(&mut c, "c").drain);
    c.api_fake().refuse_resume.clear();
    c.cycle_with(false);
    assert!(!c.in_flight());
    assert!(!node(&mut c, "c").drain);
}

#[test]
fn a_node_slurm_forgets_mid_batch_leaves_the_batch_once_the_report_timeout_passes() {
    let dir = temp("node-gone");
    let mut s = cluster();
    s.jobs.clear();
    s.slow_apply = vec!["c".into()];
    let rec = Recorder::default();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
    c.cycle();
    c.cycle_with(false);
    assert!(c.in_flight(), "c's agent has not answered Apply");
    // An admin removes c from Slurm's configuration.
    c.api_fake().nodes.retain(|n| n.name != "c");
    c.api_fake().touch();
    let r = c.cycle_with(false);
    assert!(c.in_flight(), "not before the report timeout: {:?}", r.errors);
    let mut ledger = batch::Ledger::load(&dir.join("state")).unwrap();
    ledger.batch.as_mut().unwrap().nodes.get_mut("c").unwrap().since = 0.0;
    ledger.save(&dir.join("state")).unwrap();
    let fake = c.api_fake().clone();
    drop(c);
    let mut c = central(resolved(&dir, TO_C5), fake, Mode::Drain, rec.clone());
    let mut r = c.cycle_with(false);
    for _ in 0..5 {
        r.absorb(c.cycle_with(false));
    }
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("Slurm no longer has node c (in state applying)")),
        "{:?}",
        r.errors
    );
    assert!(!c.in_flight(), "the batch is over");
}

#[test]
fn a_ledger_that_cannot_be_written_starts_no_relayout() {
    let dir = temp("ledger-blocked");
    let mut s = cluster();
    s.jobs.clear();
    let rec = Recorder::default();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
    std::fs::create_dir_all(dir.join("state").join(BATCH_FILE).join("blocked")).unwrap();
    let r = once(&mut c);
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("no re-layout started: its ledger cannot be written")),
        "{:?}",
        r.errors
    );
    assert!(c.api_fake().node_updates.is_empty(), "no node drained");
    assert!(rec.batches().is_empty());
    for n in ["a", "c"] {
        assert_eq!(layout_of(&mut c, n), C2);
    }
}

#[test]
fn a_ledger_that_cannot_be_written_after_the_apply_reverts_the_nodes_and_never_touches_slurm() {
    let dir = temp("ledger-blocked-mid");
    let mut s = cluster();
    s.jobs.clear();
    s.block_after_apply = Some(dir.join("state").join(BATCH_FILE));
    let rec = Recorder::default();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
    let r = once(&mut c);
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("the re-layout ledger cannot be written; reverting the node")),
        "{:?}",
        r.errors
    );
    assert!(rec.batches().is_empty(), "Slurm was never refreshed");
    for n in ["a", "b", "c"] {
        let d = read_desired(&node(&mut c, n)).unwrap().unwrap();
        assert_ne!(d.phase, Phase::Install, "{n}: no Install was asked");
    }
    for n in ["a", "c"] {
        assert_eq!(layout_of(&mut c, n), C2, "{n}: back in its layout");
    }
    assert!(
        c.api().nodes().unwrap().iter().all(|n| !n.drain),
        "every node in service"
    );
    assert!(c.ledger.batch.is_none(), "the batch is over");
}

#[test]
fn a_plan_whose_hand_off_lost_its_reply_is_reverted_before_its_node_resumes() {
    let dir = temp("extra-reply-lost");
    let mut s = cluster();
    s.jobs.clear();
    // c's plan reaches the record (and the agent applies it), the reply does not.
    s.extra_reply_lost = vec!["c".into()];
    let rec = Recorder::default();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
    let r = once(&mut c);
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("c: cannot tell whether the plan reached the agent")),
        "{:?}",
        r.errors
    );
    assert_eq!(layout_of(&mut c, "c"), C2, "c's agent put its GPUs back");
    let d = read_desired(&node(&mut c, "c")).unwrap().unwrap();
    assert_eq!(d.phase, Phase::Revert);
    assert!(!node(&mut c, "c").drain, "c back in service");
    assert_eq!(
        rec.batches(),
        vec![vec![
            ("a".to_string(), "gpu:3g.20gb:2".to_string()),
            ("b".to_string(), "gpu:3g.20gb:4".to_string())
        ]]
    );
}

#[test]
fn a_restarted_central_role_finishes_the_batch_it_left_in_flight_even_in_dry_run() {
    // Restarted in dry-run (an admin stepping back): the batch's nodes are drained, and
    // only finishing it puts them back in service.
    for (i, restarted_in) in [Mode::Drain, Mode::DryRun].into_iter().enumerate() {
        let dir = temp(&format!("restart-{i}"));
        let rec = Recorder::default();
        let mut s = cluster();
        s.jobs.clear();
        let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, rec.clone());
        c.cycle();
        c.cycle_with(false);
        c.cycle_with(false);
        assert!(c.in_flight());
        let fake = c.api_fake().clone();
        drop(c);
        let ledger = batch::Ledger::load(&dir.join("state")).unwrap();
        assert!(ledger.batch.is_some(), "the batch is journaled");
        let mut c = central(resolved(&dir, TO_C5), fake, restarted_in, rec.clone());
        let r = c.run_once(Duration::ZERO, Duration::from_secs(5));
        assert!(r.errors.is_empty(), "{restarted_in:?}: {:?}", r.errors);
        assert!(!c.in_flight());
        for name in ["a", "b", "c"] {
            assert_eq!(layout_of(&mut c, name), C5);
            assert!(!node(&mut c, name).drain);
        }
        assert_eq!(rec.batches().len(), 1, "one refresh in all");
    }
}

/// Node a alone, idle, moving to c5: the central role over it once a is installing.
fn installing_alone(dir: &TestDir, rec: &Recorder) -> Central {
    let mut s = cluster();
    s.jobs.clear();
    s.nodes.truncate(1);
    let mut c = central(resolved(dir, TO_C5), s, Mode::Drain, rec.clone());
    for _ in 0..10 {
        c.cycle_with(true);
        let b = batch::Ledger::load(&dir.join("state")).unwrap().batch.unwrap();
        if matches!(b.nodes["a"].state, NodeState::Installing { .. }) {
            break;
        }
    }
    c
}

#[test]
fn a_central_role_stopped_mid_refresh_checks_slurm_and_undoes_what_it_cannot_confirm() {
    let dir = temp("mid-refresh");
    let rec = Recorder::default();
    let mut c = installing_alone(&dir, &rec);
    let mut ledger = batch::Ledger::load(&dir.join("state")).unwrap();
    let b = ledger.batch.as_mut().unwrap();
    let gres = "gpu:3g.20gb:2".to_string();
    assert_eq!(b.nodes["a"].state, NodeState::Installing { gres: gres.clone() });
    // The agent installed; the central role wrote the include and died before slurmctld
    // answered.
    b.nodes.get_mut("a").unwrap().state = NodeState::Installed { gres: gres.clone() };
    b.slurm = batch::SlurmStep::Refreshing {
        gres: [("a".to_string(), gres)].into(),
    };
    ledger.save(&dir.join("state")).unwrap();
    let fake = c.api_fake().clone();
    drop(c);
    let mut c = central(resolved(&dir, TO_C5), fake, Mode::Drain, rec.clone());
    c.run_once(Duration::ZERO, Duration::from_secs(5));
    assert_eq!(*rec.undone.lock().unwrap(), 1);
    let a = node(&mut c, "a");
    assert!(a.drain && a.reason.as_deref().unwrap().starts_with(HELD_PREFIX));
    assert_eq!(read_report(&a).unwrap().unwrap().gpus[0].layout, C2);
}

#[test]
fn a_node_whose_watchdog_reverted_it_before_slurms_refresh_is_held_and_slurm_not_refreshed_for_it() {
    // The watchdog's revert went through, or failed (the GPUs in neither layout).
    let failed = channel::Outcome::Failed {
        error: "IN_USE on 3g.20gb@4".into(),
    };
    for (i, outcome) in [channel::Outcome::Done, failed].into_iter().enumerate() {
        watchdog_before_refresh(&format!("watchdog-before-refresh-{i}"), outcome);
    }
}

/// [`a_node_whose_watchdog_reverted_it_before_slurms_refresh_is_held_and_slurm_not_refreshed_for_it`]
/// with the watchdog's revert ending in `outcome`.
fn watchdog_before_refresh(tag: &str, outcome: channel::Outcome) {
    let dir = temp(tag);
    let rec = Recorder::default();
    let mut c = installing_alone(&dir, &rec);
    // The agent installed; the central role died before Slurm's refresh, and stayed away
    // until the agent's watchdog went back (GPUs, gres.conf, slurmd).
    let mut ledger = batch::Ledger::load(&dir.join("state")).unwrap();
    let b = ledger.batch.as_mut().unwrap();
    let NodeState::Installing { gres } = b.nodes["a"].state.clone() else {
        panic!("{:?}", b.nodes["a"].state)
    };
    b.nodes.get_mut("a").unwrap().state = NodeState::Installed { gres };
    assert_eq!(b.slurm, batch::SlurmStep::Untouched);
    let generation = b.generation;
    ledger.save(&dir.join("state")).unwrap();
    let mut fake = c.api_fake().clone();
    let mut r = fake.report_of(0).unwrap();
    let failed = matches!(outcome, channel::Outcome::Failed { .. });
    (r.generation, r.phase, r.outcome) = (generation, Phase::Revert, outcome);
    r.gpus[0].layout = C2.into();
    r.watchdog = Some("slurmd stopped for 120 s".into());
    r.slurmd_running = true;
    fake.set_report(0, &r);
    let before = fake.nodes[0].gres.clone();
    drop(c);
    let mut c = central(resolved(&dir, TO_C5), fake, Mode::Drain, rec.clone());
    c.run_once(Duration::ZERO, Duration::from_secs(5));
    assert!(
        rec.batches().is_empty(),
        "Slurm not refreshed: {:?}",
        rec.batches()
    );
    let a = node(&mut c, "a");
    assert!(
        held_saying(&a, &["slurmd watchdog", "before Slurm's refresh"]),
        "{a:?}"
    );
    assert_eq!(held_saying(&a, &["the revert failed: IN_USE"]), failed, "{a:?}");
    assert_eq!(a.gres, before, "Slurm as the node is");
    assert!(!c.in_flight());
}

#[test]
fn a_central_role_stopped_while_undoing_a_failed_refresh_undoes_it_again_whatever_slurm_shows() {
    let dir = temp("stopped-mid-undo");
    let rec = Recorder::default();
    let mut c = installing_alone(&dir, &rec);
    // The refresh failed (slurmctld silent), and the central role died putting the
    // include back, after slurmctld had come up with the batch's layout after all.
    let gres = "gpu:3g.20gb:2".to_string();
    let mut ledger = batch::Ledger::load(&dir.join("state")).unwrap();
    let b = ledger.batch.as_mut().unwrap();
    b.nodes.get_mut("a").unwrap().state = NodeState::Installed { gres: gres.clone() };
    b.slurm = batch::SlurmStep::Undoing {
        gres: [("a".to_string(), gres.clone())].into(),
        error: "slurmctld did not answer".into(),
        after_revert: false,
        put_back: false,
    };
    ledger.save(&dir.join("state")).unwrap();
    let mut fake = c.api_fake().clone();
    fake.nodes[0].gres = gres;
    drop(c);
    let mut c = central(resolved(&dir, TO_C5), fake, Mode::Drain, rec.clone());
    c.run_once(Duration::ZERO, Duration::from_secs(5));
    assert_eq!(
        (*rec.undone.lock().unwrap(), *rec.reloads.lock().unwrap()),
        (1, 1),
        "the undo ran again, Slurm made to load the file put back"
    );
    let a = node(&mut c, "a");
    assert!(a.drain && a.reason.as_deref().unwrap().starts_with(HELD_PREFIX));
    assert!(
        a.reason.as_deref().unwrap().contains("undo interrupted"),
        "{:?}",
        a.reason
    );
    assert_eq!(read_report(&a).unwrap().unwrap().gpus[0].layout, C2);
}

#[test]
fn the_limits_hold_back_batches_interval_persistence_size_allow_list_and_freeze() {
    let dir = temp("limits");
    let mut s = cluster();
    s.jobs.clear();
    for n in ["d", "e"] {
        s.nodes.push(FakeSlurm::node(n, &[("A100-SXM4-40GB", C2)]));
    }
    s.nodes[4].partitions = vec!["debug".into()];
    let central_cfg = "min_relayout_interval_s = 3600\npersist_cycles = 2\nmax_nodes_per_batch = 2\npartitions = [\"gpu\"]\n";
    for n in &mut s.nodes[..4] {
        n.partitions = vec!["gpu".into()];
    }
    let rec = Recorder::default();
    let mut c = central(
        resolved_with(&dir, TO_C5, central_cfg),
        s,
        Mode::Drain,
        rec.clone(),
    );
    let r = once(&mut c);
    assert_eq!(r.changed, 0, "a target must persist two cycles");
    assert!(c
        .status
        .decisions
        .iter()
        .any(|d| d.action.contains("chosen 1 of 2")));
    let r = once(&mut c);
    assert_eq!(r.changed, 2, "two nodes per batch: {r:?}");
    assert!(c
        .status
        .decisions
        .iter()
        .any(|d| d.gpu == "e/0" && d.action.contains("nodes/partitions")));
    assert!(c.status.decisions.iter().any(|d| d.action.contains("batch full")));
    let r = once(&mut c);
    assert_eq!(r.changed, 0, "the minimum interval");
    assert!(c
        .status
        .decisions
        .iter()
        .any(|d| d.action.contains("minimum interval")));
    assert_eq!(rec.batches().len(), 1);
    std::fs::write(dir.join("state").join(guard::FREEZE_FILE), "upgrade\n").unwrap();
    let mut ledger = batch::Ledger::load(&dir.join("state")).unwrap();
    ledger.last_batch_at = 1.0;
    ledger.save(&dir.join("state")).unwrap();
    let fake = c.api_fake().clone();
    let mut c = central(
        resolved_with(&dir, TO_C5, central_cfg),
        fake,
        Mode::Drain,
        rec.clone(),
    );
    once(&mut c);
    let r = once(&mut c);
    assert_eq!(r.changed, 0, "frozen");
    assert!(c
        .status
        .decisions
        .iter()
        .any(|d| d.action.contains("frozen (upgrade)")));
    assert_eq!(c.status.frozen.as_deref(), Some("upgrade"));
}

#[test]
fn a_slurmd_timeout_too_short_for_a_relayout_refuses_it_with_the_arithmetic() {
    let dir = temp("budget");
    let mut s = cluster();
    s.slurmd_timeout_s = 20;
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    let r = once(&mut c);
    assert_eq!(r.changed, 0);
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains("SlurmdTimeout") && e.contains("slurmctld_timeout_s")),
        "{:?}",
        r.errors
    );
    assert!(c.api_fake().node_updates.is_empty(), "nothing drained");
}

#[test]
fn a_node_missing_from_the_include_is_never_drained() {
    let dir = temp("unlisted");
    let mut s = cluster();
    s.jobs.clear();
    s.nodes
        .push(FakeSlurm::node("unlisted1", &[("A100-SXM4-40GB", C2)]));
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    once(&mut c);
    assert!(!c.api_fake().node_updates.iter().any(|u| u.node == "unlisted1"));
    assert!(c
        .status
        .decisions
        .iter()
        .any(|d| d.gpu == "unlisted1/0" && d.action.contains("NodeName=unlisted1")));
}

/// The central role in preempt mode over `s`, with a static policy that wants every GPU
/// in c8.
fn preempt_to_c8(dir: &std::path::Path, s: FakeSlurm) -> Central {
    central(
        resolved(dir, "kind = \"static\"\nstatic_layout = [\"c8\"]"),
        s,
        Mode::Preempt,
        Recorder::default(),
    )
}

#[test]
fn preempt_mode_requeues_the_jobs_on_changing_instances_and_on_devices_whose_index_would_move() {
    let dir = temp("preempt");
    let mut s = cluster();
    // e: GPU 0 in c8 with job 3 on its 1g.5gb@0 (IDX 0, which c8 on GPU 1 keeps), GPU 1 in c2.
    s.nodes.push(FakeSlurm::node(
        "e",
        &[("A100-SXM4-40GB", C8), ("A100-SXM4-40GB", C2)],
    ));
    s.jobs.push(FakeSlurm::running(3, "e", "1g.5gb", 0));
    let mut c = preempt_to_c8(&dir, s);
    let r = once(&mut c);
    assert_eq!(r.changed, 5, "every GPU not in c8 changes: {r:?}");
    assert_eq!(layout_of(&mut c, "a"), C8);
    assert_eq!(layout_of(&mut c, "b"), C8);
    assert_eq!(layout_of(&mut c, "e"), C8);
    let jobs = c.api().jobs().unwrap();
    let state = |id: u32| jobs.iter().find(|j| j.id == id).unwrap().state;
    // Job 1's 4g.20gb is destroyed; job 2's 3g.20gb@4 stays, but c8's 1g.5gb would take
    // its index; job 3's index holds.
    assert_eq!(state(1), JobState::Pending);
    assert_eq!(state(2), JobState::Pending);
    assert_eq!(state(3), JobState::Running);
    assert_eq!(c.api_fake().requeued, vec![1, 2]);
}

#[test]
fn an_onnx_policy_decides_through_onnx_runtime() {
    let dir = temp("onnx");
    let policy = format!("kind = \"mean-field\"\nmodels_dir = \"{}\"", dir.display());
    let r = resolved(&dir, &policy);
    decide::write_preferring(&r, 0, Mode::Drain, 4, None).unwrap();
    let mut c = central(r, cluster(), Mode::Drain, Recorder::default());
    let rep = once(&mut c);
    let src = &c.status.sources["a100-40gb"];
    if src.contains("ONNX Runtime library not found") {
        eprintln!("skipped: no ONNX Runtime here ({src})");
        return;
    }
    assert!(
        src.starts_with("onnx ") && src.ends_with("a100-40gb-drain.onnx"),
        "{src}"
    );
    assert_eq!((rep.changed, rep.skipped_busy), (2, 1), "every GPU asked for c5");
    assert_eq!(layout_of(&mut c, "c"), C5);
}

#[test]
fn a_policy_file_replaced_or_broken_while_running_is_reloaded_and_a_broken_one_keeps_layouts() {
    let dir = temp("reload");
    let policy = format!("kind = \"mean-field\"\nmodels_dir = \"{}\"", dir.display());
    let r = resolved(&dir, &policy);
    let path = decide::write_preferring(&r, 0, Mode::Drain, 4, None).unwrap();
    let mut s = cluster();
    s.jobs.clear();
    let mut c = central(r, s, Mode::DryRun, Recorder::default());
    c.cycle();
    let src = c.status.sources["a100-40gb"].clone();
    if src.contains("ONNX Runtime library not found") {
        eprintln!("skipped: no ONNX Runtime here ({src})");
        return;
    }
    assert!(src.starts_with("onnx "), "{src}");
    std::fs::write(&path, b"garbage, not ONNX").unwrap();
    let rep = c.cycle();
    let src = c.status.sources["a100-40gb"].clone();
    assert!(
        src.starts_with("keep current layouts") && src.contains("a100-40gb-drain.onnx"),
        "{src}"
    );
    assert_eq!(rep.changed, 0);
    let r = resolved(&dir, &policy);
    decide::write_preferring(&r, 0, Mode::Drain, 4, None).unwrap();
    c.cycle();
    assert!(
        c.status.sources["a100-40gb"].starts_with("onnx "),
        "a fixed file is used again"
    );
}

#[test]
fn an_unwritable_snapshot_is_an_error_and_the_relayout_still_completes() {
    let dir = temp("snapshot");
    // `run` is a file, so `run/snapshot.json` cannot be written.
    std::fs::write(dir.join("run"), b"").unwrap();
    let mut c = central(resolved(&dir, TO_C5), cluster(), Mode::Drain, Recorder::default());
    let rep = once(&mut c);
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
fn slurmctld_down_mid_batch_delays_it_and_it_completes_afterwards() {
    let dir = temp("outage");
    let mut s = cluster();
    s.outage = 6..12;
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    let r = once(&mut c);
    assert_eq!(r.changed, 2, "{r:?}");
    assert_eq!(layout_of(&mut c, "c"), C5);
    assert!(c.api().nodes().unwrap().iter().all(|n| !n.drain));
}

#[test]
fn slurmctld_down_at_the_start_of_a_cycle_is_an_error_and_the_next_cycle_recovers() {
    let dir = temp("down");
    let mut s = cluster();
    s.outage = 0..1;
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    let r = c.cycle();
    assert!(
        r.errors[0].contains("Unable to contact slurm controller"),
        "{:?}",
        r.errors
    );
    assert_eq!(r.changed, 0);
    let r = once(&mut c);
    assert_eq!(r.changed, 2, "{r:?}");
}

#[test]
fn devices_are_numbered_in_the_order_of_the_nodes_gres_then_gres_conf_order_skipping_other_gpus() {
    let dir = temp("order-names");
    let r = resolved(&dir, TO_C5);
    let m = &r.models[0].model;
    let c8 = smartmig_core::mig::Layout::parse(m, C8).unwrap();
    let names: Vec<String> = c8
        .instances()
        .iter()
        .map(|i| m.profiles[i.profile].name.clone())
        .collect();
    let text = |gres: &str| -> Vec<String> {
        view::slurm_index_order(gres, &[(&c8, names.as_slice())], &[])
            .unwrap()
            .iter()
            .map(|d| {
                d.map_or("other".into(), |(_, i)| {
                    smartmig_core::mig::layout::display_instance(m, &i)
                })
            })
            .collect()
    };
    assert_eq!(
        text("gpu:3g.20gb:1,gpu:a100:1(S:0),gpu:1g.5gb:4"),
        [
            "3g.20gb@4",
            "other",
            "1g.5gb@0",
            "1g.5gb@1",
            "1g.5gb@2",
            "1g.5gb@3"
        ]
    );
    assert_eq!(
        text("gpu:1g.5gb:4,gpu:3g.20gb:1"),
        ["1g.5gb@0", "1g.5gb@1", "1g.5gb@2", "1g.5gb@3", "3g.20gb@4"]
    );
    let e = view::slurm_index_order("gpu:1g.5gb:3,gpu:3g.20gb:1", &[(&c8, names.as_slice())], &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("Slurm has 3 1g.5gb, the agent reports 4"), "{e}");
}

#[test]
fn a_reported_device_order_counts_only_when_it_names_each_of_the_nodes_devices_once() {
    let dir = temp("order-read");
    let r = resolved(&dir, TO_C5);
    let order_of = |layout: &str, order: &[&str]| -> view::GresOrder {
        let mut s = cluster();
        s.nodes[1] = FakeSlurm::node("b", &[("A100-SXM4-40GB", layout)]);
        s.set_gres_order(1, order);
        let v = View::build(&r, s.nodes.clone(), s.jobs.clone(), &mut Default::default());
        let b = v.nodes.iter().find(|n| n.name == "b").expect("b is managed");
        b.gres_order.clone()
    };
    let c2 = smartmig_core::mig::Layout::parse(&r.models[0].model, C2).unwrap();
    let (g4, g3) = (c2.instances()[0], c2.instances()[1]);
    assert_eq!(order_of(C2, &[]), view::GresOrder::Placement);
    assert_eq!(
        order_of(C2, &["0:3g.20gb@4", "0:4g.20gb@0"]),
        view::GresOrder::Listed(vec![(0, g3), (0, g4)])
    );
    for (layout, order) in [
        // One device twice, one left out.
        (C2, &["0:3g.20gb@4", "0:3g.20gb@4"][..]),
        // A device the node does not have (another GPU, another placement).
        (C2, &["0:3g.20gb@4", "1:4g.20gb@0"]),
        (C2, &["0:3g.20gb@0", "0:4g.20gb@0"]),
        // Too few, too many, unreadable.
        (C2, &["0:3g.20gb@4"]),
        (C2, &["0:3g.20gb@4", "0:4g.20gb@0", "0:4g.20gb@0"]),
        (C2, &["0:3g.20gb@4", "GPU zero"]),
    ] {
        assert_eq!(
            order_of(layout, order),
            view::GresOrder::Unknown,
            "{layout} {order:?}"
        );
    }
    // A layout that lists an instance twice describes no GPU: the node is not managed, and
    // the problem names the GPU and the instance.
    let mut s = cluster();
    s.nodes[1] = FakeSlurm::node("b", &[("A100-SXM4-40GB", "3g.20gb@4 3g.20gb@4")]);
    let v = View::build(&r, s.nodes.clone(), s.jobs.clone(), &mut Default::default());
    assert!(v.nodes.iter().all(|n| n.name != "b"));
    assert_eq!(
        v.problems,
        [(
            "b".to_string(),
            "GPU 0: 3g.20gb@4 and 3g.20gb@4 overlap in memory slices".to_string()
        )]
    );
}

#[test]
fn a_change_of_the_nodes_gres_alone_renumbers_its_devices_in_the_next_view() {
    // Same report, same job at index 1, same GresUsed: only the order of the types in
    // the node's Gres changes, which decides which device index 1 names.
    let dir = temp("gres-only");
    let r = resolved(&dir, TO_C5);
    let m = &r.models[0].model;
    let mut s = cluster();
    s.nodes[1] = FakeSlurm::node("b", &[("A100-SXM4-40GB", C8)]);
    s.jobs[1] = FakeSlurm::running(2, "b", "1g.5gb", 1);
    let mut cache = Default::default();
    let mut busy_of_b = |gres: &str| -> Vec<String> {
        s.nodes[1].gres = gres.to_string();
        let v = View::build(&r, s.nodes.clone(), s.jobs.clone(), &mut cache);
        let b = v.gpus.iter().find(|g| g.node == "b").expect("b's GPU");
        b.busy
            .iter()
            .map(|i| smartmig_core::mig::layout::display_instance(m, i))
            .collect()
    };
    assert_eq!(busy_of_b("gpu:1g.5gb:4,gpu:3g.20gb:1"), ["1g.5gb@1"]);
    assert_eq!(busy_of_b("gpu:3g.20gb:1,gpu:1g.5gb:4"), ["1g.5gb@0"]);
}

#[test]
fn a_generation_with_no_next_one_starts_no_relayout_and_says_so() {
    let dir = temp("last-generation");
    let mut s = cluster();
    let mut rep = s.report_of(1).expect("b reports");
    rep.generation = u64::MAX;
    s.set_report(1, &rep);
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    let r = once(&mut c);
    assert_eq!(r.changed, 0);
    assert!(
        r.errors
            .iter()
            .any(|e| e.contains(&format!("generation {} (node b's Comment)", u64::MAX))),
        "{:?}",
        r.errors
    );
    assert!(c.api().nodes().unwrap().iter().all(|n| !n.drain));
}

#[test]
fn a_job_whose_device_index_names_another_type_after_a_relayout_keeps_its_type_busy() {
    let dir = temp("shifted");
    let mut s = cluster();
    // After a re-layout to c8, Slurm still says job 2 holds index 0 — now a 1g.5gb.
    s.nodes[1] = FakeSlurm::node("b", &[("A100-SXM4-40GB", C8)]);
    s.jobs[1].gres_detail = vec!["gpu:3g.20gb:1(IDX:0)".into()];
    let r = resolved(&dir, TO_C5);
    let v = View::build(&r, s.nodes.clone(), s.jobs.clone(), &mut Default::default());
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
        "the 3g, not the 1g at index 1"
    );
    let mut c = central(r, s, Mode::Drain, Recorder::default());
    once(&mut c);
    // c8 → c5 puts a 3g.20gb at the job's index and changes b's GPU count under it.
    assert_eq!(layout_of(&mut c, "b"), C8);
    assert!(c
        .status
        .decisions
        .iter()
        .any(|d| d.gpu == "b/0" && d.action.contains("device index")));
}

#[test]
fn a_change_that_would_give_a_busy_devices_index_to_another_waits_and_the_nodes_other_gpus_go_on() {
    let dir = temp("index-shift");
    let mut s = cluster();
    // b: two GPUs in c2, the job on GPU 0's 3g.20gb@4 (IDX 0: 3g.20gb before 4g.20gb).
    s.nodes[1] = FakeSlurm::node("b", &[("A100-SXM4-40GB", C2), ("A100-SXM4-40GB", C2)]);
    s.jobs[1].gres_detail = vec!["gpu:3g.20gb:1(IDX:0)".into()];
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    // GPU 0 to c5 would put its new 3g.20gb@0 at IDX 0; GPU 1's 3g.20gb come after it.
    let report = read_report(&node(&mut c, "b")).unwrap().unwrap();
    let layouts: Vec<&str> = report.gpus.iter().map(|g| g.layout.as_str()).collect();
    assert_eq!(layouts, [C2, C5]);
    let why = action(&c, "b/0");
    assert_eq!(
        why,
        "skip: the job on 3g.20gb@4 of GPU 0 holds Slurm device index 0, which would name 3g.20gb@0 of GPU 0"
    );
    assert!(c
        .status
        .decisions
        .iter()
        .any(|d| d.gpu == "b/1" && d.action == "applied"));
}

#[test]
fn a_busy_nodes_gpu_count_change_waits_even_when_every_index_holds() {
    let dir = temp("count-change");
    // a/0 → c1, b/0 stays c5 (the job's GPU), b/1 c2 → c1, c/0 → c1.
    let policy = "kind = \"static\"\nstatic_layout = [\"c1\", \"c5\", \"c1\"]";
    let mut c = central(
        resolved(&dir, policy),
        cluster(),
        Mode::Drain,
        Recorder::default(),
    );
    once(&mut c);
    // b/1 to c1 keeps the job's IDX 1 (7g.40gb sorts after 3g.20gb) but takes b from 4 GPUs to 3.
    assert_eq!(layout_of(&mut c, "b"), C2);
    assert_eq!(layout_of(&mut c, "c"), "7g.40gb@0");
    assert!(c
        .status
        .decisions
        .iter()
        .any(|d| d.gpu == "b/1" && d.action.contains("GPU count would change")));
}

#[test]
fn with_padding_a_busy_nodes_count_change_goes_ahead_and_an_unpadded_node_is_padded_only_without_running_gpu_jobs(
) {
    let dir = temp("padded-count");
    // As above: a/0 → c1 (its 4g is busy: waits), b/1 c2 → c1, c/0 → c1.
    let policy = "kind = \"static\"\nstatic_layout = [\"c1\", \"c5\", \"c1\"]";
    let limits = "min_relayout_interval_s = 0\npersist_cycles = 1\npadding = true\n";
    let r = resolved_with(&dir, policy, limits);
    let a100 = &r.models[0];
    let blocks = |gpus: usize| {
        smartmig_core::mig::padding::blocks((0..gpus).map(|_| (&a100.model, a100.configurations.as_slice())))
    };
    let counts =
        |v: &[(&str, u32)]| -> BTreeMap<String, u32> { v.iter().map(|(t, n)| (t.to_string(), *n)).collect() };
    let padded = |gpus: usize, v: &[(&str, u32)]| {
        smartmig_core::mig::padding::padded_gres(&counts(v), &blocks(gpus)).unwrap()
    };
    // Node b is padded already (two GPUs: c5 + c2); its job's 3g.20gb@4 on GPU 0 comes
    // after 20 devices of 1g.10gb, 1g.5gb and 2g.10gb blocks and GPU 0's 3g.20gb@0.
    let mut s = cluster();
    s.nodes[1].gres = padded(2, &[("3g.20gb", 3), ("4g.20gb", 1)]);
    s.jobs[1] = FakeSlurm::running(2, "b", "3g.20gb", 21);
    let rec = Recorder::default();
    let mut c = central(r.clone(), s, Mode::Drain, rec.clone());
    let rep = once(&mut c);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    // b/1 to c1 keeps b's padded total and the job's index: it goes ahead although b is busy.
    assert_eq!(layout_of(&mut c, "b"), "7g.40gb@0", "{:?}", c.status.decisions);
    let b_after = padded(2, &[("3g.20gb", 2), ("7g.40gb", 1)]);
    assert_eq!(node(&mut c, "b").gres, b_after);
    // c was not padded, but idle: its first padded layout (a count change) goes ahead too.
    assert_eq!(layout_of(&mut c, "c"), "7g.40gb@0");
    assert_eq!(node(&mut c, "c").gres, padded(1, &[("7g.40gb", 1)]));
    let written: Vec<(String, String)> = rec.batches().concat();
    assert!(written.contains(&("b".to_string(), b_after)), "{written:?}");
    // a's 4g runs a job that c1 would destroy: a waits, as without padding.
    assert_eq!(layout_of(&mut c, "a"), C2);
    // b not padded yet and busy: its first padded layout changes its total and moves the
    // job's index (the blocks come in name order, padding before it), so it waits.
    // c also has a whole GPU (listed after its MIG types, index 2) that runs a job: its
    // MIG instances are idle, but its first padded layout changes its total, which
    // would requeue that job, so it waits too.
    let dir = temp("padded-first");
    let mut s = cluster();
    s.nodes[2].gres = format!("{},gpu:a100:1", s.nodes[2].gres);
    s.jobs.push(FakeSlurm::running(3, "c", "a100", 2));
    let mut c = central(
        resolved_with(&dir, policy, limits),
        s,
        Mode::Drain,
        Recorder::default(),
    );
    once(&mut c);
    assert_eq!(layout_of(&mut c, "c"), C2, "{:?}", c.status.decisions);
    assert!(node(&mut c, "c").gres.ends_with(",gpu:a100:1"));
    assert_eq!(layout_of(&mut c, "b"), C2);
    assert!(
        c.status
            .decisions
            .iter()
            .any(|d| d.gpu == "b/1" && d.action.contains("holds Slurm device index 1")),
        "{:?}",
        c.status.decisions
    );
}

/// Node b with two GPUs in c2, padded: its `Gres` as the padding of two A100s writes it
/// (the 3g.20gb block starts at index 20, after the 1g.10gb, 1g.5gb and 2g.10gb blocks).
fn padded_b(dir: &std::path::Path, policy: &str) -> (Resolved, FakeSlurm) {
    let limits = "min_relayout_interval_s = 0\npersist_cycles = 1\npadding = true\n";
    let r = resolved_with(dir, policy, limits);
    let a100 = &r.models[0];
    let blocks =
        smartmig_core::mig::padding::blocks((0..2).map(|_| (&a100.model, a100.configurations.as_slice())));
    let counts: BTreeMap<String, u32> = [("3g.20gb".to_string(), 2), ("4g.20gb".to_string(), 2)].into();
    let mut s = cluster();
    s.nodes[1] = FakeSlurm::node("b", &[("A100-SXM4-40GB", C2), ("A100-SXM4-40GB", C2)]);
    s.nodes[1].gres = smartmig_core::mig::padding::padded_gres(&counts, &blocks).unwrap();
    (r, s)
}

#[test]
fn with_padding_a_new_instance_before_a_busy_one_of_its_type_goes_ahead_and_takes_a_free_position() {
    let dir = temp("padded-kept");
    // Job 2 on b's first 3g.20gb (GPU 0's 3g.20gb@4, index 20). b/0 to c5 adds a
    // 3g.20gb@0 on GPU 0, which GPU and placement order would put at index 20: the job's
    // device stays first, the others (GPU 1's idle 3g.20gb@4 and the new one) follow in
    // GPU and placement order.
    // (The static layout goes round the GPUs a/0, b/0, b/1, c/0: only b/0 changes.)
    let (r, mut s) = padded_b(
        &dir,
        "kind = \"static\"\nstatic_layout = [\"c2\", \"c5\", \"c2\"]",
    );
    s.jobs[1] = FakeSlurm::running(2, "b", "3g.20gb", 20);
    let mut c = central(r, s, Mode::Drain, Recorder::default());
    let rep = once(&mut c);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(action(&c, "b/0"), "applied", "{:?}", c.status.decisions);
    let report = read_report(&node(&mut c, "b")).unwrap().unwrap();
    assert_eq!(report.gpus[0].layout, C5);
    assert_eq!(
        report.gres_order,
        ["0:3g.20gb@4", "0:3g.20gb@0", "1:3g.20gb@4", "1:4g.20gb@0"],
        "the order the plan carried, as the agent installed it"
    );
}

#[test]
fn a_padded_nodes_running_job_is_placed_by_the_device_order_its_agent_reports() {
    // b's agent wrote GPU 1's 3g.20gb first: index 20 is GPU 1's 3g.20gb@4, 21 GPU 0's.
    // b/0 to c1 destroys GPU 0's 3g.20gb@4 (the static layout goes round a/0, b/0, b/1,
    // c/0: only b/0 changes). With the job at index 20 it goes ahead (the job's device
    // keeps the first position); at 21 it waits. Read in GPU and placement order, both
    // would be the other way round, and the second would destroy the job's instance.
    let order = ["1:3g.20gb@4", "0:3g.20gb@4", "0:4g.20gb@0", "1:4g.20gb@0"];
    let policy = "kind = \"static\"\nstatic_layout = [\"c2\", \"c1\", \"c2\"]";
    let b0 = |c: &mut Central| {
        read_report(&node(c, "b")).unwrap().unwrap().gpus[0]
            .layout
            .clone()
    };
    for (idx, busy) in [(20, false), (21, true)] {
        let dir = temp(&format!("padded-read-{idx}"));
        let (r, mut s) = padded_b(&dir, policy);
        s.set_gres_order(1, &order);
        s.jobs[1] = FakeSlurm::running(2, "b", "3g.20gb", idx);
        let mut c = central(r, s, Mode::Drain, Recorder::default());
        let rep = once(&mut c);
        assert!(rep.errors.is_empty(), "{:?}", rep.errors);
        if busy {
            assert!(
                action(&c, "b/0").starts_with("skip: busy 3g.20gb@4"),
                "{:?}",
                c.status.decisions
            );
            assert_eq!(b0(&mut c), C2);
        } else {
            assert_eq!(action(&c, "b/0"), "applied", "{:?}", c.status.decisions);
            assert_eq!(b0(&mut c), "7g.40gb@0");
        }
    }
    // An order that does not list the node's devices: no index can be placed, so every
    // 3g.20gb counts as busy (never wrongly idle); for an untyped entry (`gpu:1`), every
    // instance of the node.
    for (detail, busy) in [
        ("gpu:3g.20gb:1(IDX:20)", "skip: busy 3g.20gb@4"),
        ("gpu:1(IDX:20)", "skip: busy"),
    ] {
        let dir = temp("padded-read-bad");
        let (r, mut s) = padded_b(&dir, policy);
        s.set_gres_order(1, &["1:3g.20gb@4", "0:3g.20gb@0"]);
        s.jobs[1] = FakeSlurm::running(2, "b", "3g.20gb", 20);
        s.jobs[1].gres_detail = vec![detail.into()];
        let mut c = central(r, s, Mode::Drain, Recorder::default());
        once(&mut c);
        assert!(
            action(&c, "b/0").starts_with(busy),
            "{detail}: {:?}",
            c.status.decisions
        );
        assert_eq!(b0(&mut c), C2);
    }
    // The same order on an idle node (a GPU laid out by hand since the file was written):
    // no index to keep, so the change goes ahead and the new file is in GPU and placement
    // order (before, the central role panicked on the order's unknown device).
    let dir = temp("padded-read-bad-idle");
    let (r, mut s) = padded_b(&dir, policy);
    s.set_gres_order(1, &["1:3g.20gb@4", "0:3g.20gb@0"]);
    s.jobs.retain(|j| !j.nodes.iter().any(|n| n == "b"));
    let mut c = central(r, s, Mode::Drain, Recorder::default());
    let rep = once(&mut c);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(action(&c, "b/0"), "applied", "{:?}", c.status.decisions);
    assert_eq!(b0(&mut c), "7g.40gb@0");
    assert_eq!(
        read_report(&node(&mut c, "b")).unwrap().unwrap().gres_order,
        ["1:3g.20gb@4", "1:4g.20gb@0", "0:7g.40gb@0"]
    );
}

#[test]
fn a_resume_refused_for_a_not_yet_registered_node_is_retried_until_slurm_takes_it() {
    let dir = temp("unknown");
    let mut s = cluster();
    s.unknown_state = vec!["c".into()];
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.changed, 2);
    assert!(c.status.pending_transitions.is_empty(), "{:?}", c.status);
    assert!(c.api().nodes().unwrap().iter().all(|n| !n.drain));
}

#[test]
fn a_node_drained_by_an_unrecorded_relayout_is_resumed_only_when_agent_and_slurm_agree() {
    let dir = temp("orphan");
    let mut s = cluster();
    s.jobs.clear();
    for (i, gres) in [(1, "gpu:3g.20gb:3,gpu:4g.20gb:1"), (2, "gpu:3g.20gb:2")] {
        s.nodes[i].drain = true;
        s.nodes[i].reason = Some(format!("{DRAIN_PREFIX}3"));
        s.nodes[i].gres = gres.into();
    }
    let mut c = central(
        resolved(&dir, "kind = \"none\""),
        s,
        Mode::Drain,
        Recorder::default(),
    );
    let r = c.cycle();
    assert!(!node(&mut c, "b").drain, "b's agent reports what Slurm has");
    let n = node(&mut c, "c");
    assert!(n.drain && n.reason.unwrap().starts_with(HELD_PREFIX), "{r:?}");
}

#[test]
fn generations_continue_after_the_highest_an_agent_reports_when_extra_was_lost() {
    let dir = temp("gen-from-report");
    let mut s = cluster();
    // slurmctld lost every Extra (`slurmctld -c`); c's agent re-announced gen 7.
    let mut r = read_report(&s.nodes[2]).unwrap().unwrap();
    r.generation = 7;
    s.nodes[2].comment = channel::merge(None, "x", Some(&r)).ok();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    let rep = once(&mut c);
    assert_eq!(rep.changed, 2, "{rep:?}");
    assert_eq!(c.status.generation, 8, "an agent ignores generations it answered");
}

#[test]
fn cached_node_views_equal_fresh_ones_and_a_changed_job_or_report_is_parsed_again() {
    let dir = temp("cache");
    let r = resolved(&dir, TO_C5);
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

#[test]
fn a_report_that_cannot_read_the_gpus_leaves_the_node_alone() {
    let dir = temp("read-error");
    let mut s = cluster();
    let mut r = read_report(&s.nodes[2]).unwrap().unwrap();
    r.gpus.clear();
    r.read_error = Some("GPU 0: nvmlDeviceGetHandleByIndex failed: NVML_ERROR_GPU_IS_LOST".into());
    s.nodes[2].comment = channel::merge(None, "x", Some(&r)).ok();
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    let rep = once(&mut c);
    assert!(
        rep.errors
            .iter()
            .any(|e| e.contains("node c left alone") && e.contains("GPU_IS_LOST")),
        "{:?}",
        rep.errors
    );
    assert!(!c.api_fake().node_updates.iter().any(|u| u.node == "c"));
}

#[test]
fn a_change_whose_partner_still_waits_for_persistence_is_held_to_the_node_rules_alone() {
    let dir = temp("persist-partner");
    let mut s = FakeSlurm {
        auto_agent: true,
        ..FakeSlurm::default()
    };
    // d: GPU 0 in c5 with a job on its 3g.20gb@4 (IDX 1), GPU 1 in c2, GPU 2 whole.
    let gpus = [C5, C2, "7g.40gb@0"].map(|l| ("A100-SXM4-40GB", l));
    s.nodes.push(FakeSlurm::node("d", &gpus));
    s.jobs.push(FakeSlurm::running(2, "d", "3g.20gb", 1));
    let r = resolved_with(
        &dir,
        "kind = \"static\"\nstatic_layout = [\"c5\", \"c1\", \"c5\"]",
        "min_relayout_interval_s = 0\npersist_cycles = 2\n",
    );
    let mut c = central(r, s, Mode::Drain, Recorder::default());
    let config = |c: &Central, name: &str| {
        c.resolved.models[0]
            .configurations
            .iter()
            .position(|x| x.name == name)
            .unwrap()
    };
    // Cycle 1: d/1 → c1 (one instance fewer) with d/2 → c5 (one more): the count holds.
    let r1 = once(&mut c);
    assert_eq!(r1.changed, 0, "both wait for a second cycle");
    // Cycle 2: d/2 now wants c2 (still one more): d/1's target has persisted, d/2's not.
    c.resolved.models[0].static_layout = vec![config(&c, "c5"), config(&c, "c1"), config(&c, "c2")];
    let r2 = once(&mut c);
    assert_eq!(
        r2.changed, 0,
        "d/1 alone would take d from 5 GPUs to 4 under the job: {r2:?}"
    );
    assert!(c
        .status
        .decisions
        .iter()
        .any(|d| d.gpu == "d/1" && d.action.contains("GPU count would change")));
    // Cycle 3: both have persisted and go together.
    let r3 = once(&mut c);
    assert_eq!(r3.changed, 2, "{r3:?}");
}

#[test]
fn a_job_started_before_the_drain_on_a_device_whose_index_would_move_stops_the_change() {
    let dir = temp("moved-at-drain");
    let mut s = cluster();
    // Just before b is drained, job 4 starts on GPU 1's 3g.20gb@4 (IDX 2), which c5 keeps
    // but whose index c5's new 3g.20gb@0 would take.
    s.start_on_drain = vec![FakeSlurm::running(4, "b", "3g.20gb", 2)];
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(layout_of(&mut c, "b"), C2, "b keeps its layout");
    assert_eq!(layout_of(&mut c, "c"), C5);
    let why = action(&c, "b/1");
    assert!(
        why.starts_with("skip: became busy before the drain")
            && why.contains("the job on 3g.20gb@4 of GPU 1 holds Slurm device index 2, which would name 3g.20gb@0 of GPU 1"),
        "{why}"
    );
    assert!(!node(&mut c, "b").drain, "b resumed");
}

#[test]
fn a_job_slurm_cannot_requeue_holds_its_node_to_the_drain_rules_in_preempt_mode() {
    let dir = temp("no-requeue");
    let mut s = cluster();
    // Job 1 (on a's 4g.20gb, which c8 destroys) was submitted with --no-requeue.
    s.jobs[0].requeueable = false;
    let mut c = preempt_to_c8(&dir, s);
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(layout_of(&mut c, "a"), C2, "a waits for its job");
    assert_eq!(layout_of(&mut c, "b"), C8, "b's job can be requeued: b changes");
    assert_eq!(
        action(&c, "a/0"),
        "skip: busy 4g.20gb@0 (Slurm cannot requeue job 1: interactive, --no-requeue or federated)"
    );
    let jobs = c.api().jobs().unwrap();
    let state = |id: u32| jobs.iter().find(|j| j.id == id).unwrap().state;
    assert_eq!(state(1), JobState::Running);
    assert_eq!(c.api_fake().requeued, vec![2]);
    assert!(!node(&mut c, "a").drain);
}

/// [`cluster`] without the jobs in `drop`, in preempt mode towards `static_layout`, with
/// `requeue_max_run_s = 600` and job `old` (if any) started an hour ago, the others just
/// now (and so those of `s.start_on_drain`).
fn run_time_limited(dir: &std::path::Path, static_layout: &str, old: Option<u32>, drop: &[u32]) -> Central {
    run_time_limited_with(dir, static_layout, old, drop, Vec::new())
}

/// [`run_time_limited`], with jobs that start as their node is drained.
fn run_time_limited_with(
    dir: &std::path::Path,
    static_layout: &str,
    old: Option<u32>,
    drop: &[u32],
    on_drain: Vec<crate::slurm::SlurmJob>,
) -> Central {
    let mut s = cluster();
    s.jobs.retain(|j| !drop.contains(&j.id));
    s.start_on_drain = on_drain;
    let now = unix_now() as i64;
    for j in s.jobs.iter_mut().chain(&mut s.start_on_drain) {
        j.start = if Some(j.id) == old { now - 3600 } else { now };
    }
    let limits = "min_relayout_interval_s = 0\npersist_cycles = 1\nrequeue_max_run_s = 600\n";
    let policy = format!("kind = \"static\"\nstatic_layout = {static_layout}");
    central(
        resolved_with(dir, &policy, limits),
        s,
        Mode::Preempt,
        Recorder::default(),
    )
}

#[test]
fn with_a_run_time_limit_preempt_mode_requeues_a_young_job_and_leaves_an_old_one_to_the_drain_rules() {
    let dir = temp("max-run");
    // Job 1 (on a's 4g.20gb, which c8 destroys) ran an hour; job 2 (on b, requeued by c8
    // as without a limit) started just now.
    let mut c = run_time_limited(&dir, "[\"c8\"]", Some(1), &[]);
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(layout_of(&mut c, "a"), C2, "a waits for its old job");
    assert_eq!(layout_of(&mut c, "b"), C8, "b's young job is requeued: b changes");
    assert_eq!(
        action(&c, "a/0"),
        "skip: busy 4g.20gb@0 (job 1 ran longer than requeue_max_run_s = 600 s)"
    );
    assert_eq!(c.api_fake().requeued, vec![2]);
    let jobs = c.api().jobs().unwrap();
    assert_eq!(jobs.iter().find(|j| j.id == 1).unwrap().state, JobState::Running);
    assert!(!node(&mut c, "a").drain);
}

#[test]
fn with_a_run_time_limit_a_gpu_count_change_waits_for_an_old_job_and_not_for_a_young_one() {
    // Everything to c3. b: GPU 0 (c5) runs job 2, whose instance c3 destroys; GPU 1 c2 ->
    // c3 destroys only an idle 3g.20gb but takes b from 4 to 5 GPUs, which Slurm requeues
    // running jobs over. (Job 1 is gone: a changes freely.)
    let dir = temp("max-run-count");
    let mut c = run_time_limited(&dir, "[\"c3\"]", Some(2), &[1]);
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(layout_of(&mut c, "b"), C2, "b keeps GPU 1's layout");
    let held = "(job 2 ran longer than requeue_max_run_s = 600 s)";
    assert_eq!(
        action(&c, "b/1"),
        format!("skip: the node's GPU count would change under running jobs {held}")
    );
    assert_eq!(action(&c, "b/0"), format!("skip: busy 3g.20gb@4 {held}"));
    assert!(c.api_fake().requeued.is_empty());
    // The same job started just now: it is requeued and both GPUs change.
    let dir = temp("max-run-count-young");
    let mut c = run_time_limited(&dir, "[\"c3\"]", None, &[1]);
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(layout_of(&mut c, "b"), "4g.20gb@0 2g.10gb@4 1g.10gb@6");
    assert_eq!(c.api_fake().requeued, vec![2]);
}

#[test]
fn with_a_run_time_limit_a_job_found_older_at_the_drain_stops_the_change() {
    // c is idle when planned (c2 -> c8, 2 to 5 GPUs). As it is drained, job 3 shows on its
    // 3g.20gb@4 (IDX 0, kept), having run an hour: the count change would make Slurm
    // requeue it, so c is resumed unchanged; b's young job 2 is requeued as before.
    let dir = temp("max-run-at-drain");
    let late = FakeSlurm::running(3, "c", "3g.20gb", 0);
    let mut c = run_time_limited_with(&dir, "[\"c8\"]", Some(3), &[1], vec![late]);
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(layout_of(&mut c, "c"), C2, "c keeps its layout");
    assert_eq!(layout_of(&mut c, "b"), C8);
    assert_eq!(
        action(&c, "c/0"),
        "skip: became busy before the drain (the node's GPU count would change under running jobs; job 3 ran longer than requeue_max_run_s = 600 s)"
    );
    assert_eq!(c.api_fake().requeued, vec![2]);
    assert!(!node(&mut c, "c").drain, "c resumed");
}

#[test]
fn a_requeue_slurm_refuses_resumes_the_node_unchanged_at_once() {
    let dir = temp("requeue-refused");
    let mut s = cluster();
    // Slurm's job records say every job can be requeued, but slurmctld refuses (the job was
    // changed to --no-requeue after the read, or slurmctld errs).
    s.refuse_requeue = true;
    let mut c = preempt_to_c8(&dir, s);
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(layout_of(&mut c, "a"), C2);
    assert_eq!(layout_of(&mut c, "c"), C8, "the idle node changes");
    let why = action(&c, "a/0");
    assert!(
        why.starts_with(
            "skip: cannot requeue job 1: slurm_requeue(1): Requested operation is presently disabled"
        ),
        "{why}"
    );
    // Resumed in the batch's own cycles, not after report_timeout_s.
    assert!(!node(&mut c, "a").drain && !node(&mut c, "b").drain);
    let jobs = c.api().jobs().unwrap();
    assert!(jobs.iter().all(|j| j.state == JobState::Running), "{jobs:?}");
}

#[test]
fn between_batches_the_node_file_is_brought_in_line_for_smartmigs_nodes_only_and_no_batch_starts_while_it_cannot_be(
) {
    let dir = temp("agree");
    let mut s = cluster();
    // A site's node smartmig never managed; one whose agent's report no longer reads; one
    // whose agent reports other layouts than slurmctld shows (slurmctld may be the side
    // left behind: the file is not taken from it then).
    s.nodes.push(SlurmNode {
        name: "site".into(),
        gres: "gpu:7g.40gb:1".into(),
        ..SlurmNode::default()
    });
    s.nodes.push(SlurmNode {
        name: "unreadable".into(),
        gres: "gpu:7g.40gb:1".into(),
        comment: Some(r#"{"smartmig": {"version": 4}}"#.into()),
        ..SlurmNode::default()
    });
    let mut behind = FakeSlurm::node("behind", &[("A100-SXM4-40GB", C2)]);
    behind.gres = "gpu:7g.40gb:1".into();
    s.nodes.push(behind);
    let rec = Recorder::default();
    *rec.agree_fails.lock().unwrap() = true;
    let policy = "kind = \"static\"\nstatic_layout = [\"c5\"]";
    let mut c = central(resolved(&dir, policy), s, Mode::Drain, rec.clone());
    let r = c.cycle();
    assert!(
        r.errors
            .iter()
            .any(|e| e.starts_with("no re-layout started: the node file cannot be brought in line")),
        "{:?}",
        r.errors
    );
    assert!(rec.batches().is_empty() && !c.in_flight(), "no batch started");
    assert!(!node(&mut c, "c").drain);
    let names = |v: &[&str]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    assert_eq!(rec.agreed.lock().unwrap().clone(), vec![names(&["a", "b", "c"])]);
    assert!(rec.caught_up.lock().unwrap().is_empty(), "the file in line first");
    // Once it can be, the batch starts; the cycles that move it on leave the file alone,
    // the one after it (`--once`'s last) brings it in line again.
    *rec.agree_fails.lock().unwrap() = false;
    let cycles = c.status.cycles;
    let r = once(&mut c);
    assert!(r.changed > 0, "{r:?}");
    assert!(c.status.cycles - cycles > 2, "the batch took cycles of its own");
    assert_eq!(rec.agreed.lock().unwrap().len(), 3);
    // `behind` is offered to be loaded again (its line does not have what its agent
    // reports here: nothing loads).
    let offered = rec.caught_up.lock().unwrap().clone();
    assert!(
        !offered.is_empty() && offered.iter().all(|l| l.len() == 1 && l[0].node == "behind"),
        "{offered:?}"
    );
}

#[test]
fn a_job_that_ends_just_before_its_requeue_does_not_stop_the_change_in_preempt_mode() {
    let dir = temp("requeue-done");
    let mut s = cluster();
    // Job 1 (on a's 4g.20gb, which c8 destroys) ends between the read and its requeue:
    // slurmctld leaves it ended (the requeue is for running jobs only); its instance is
    // free.
    s.finish_before_requeue = vec![1];
    let mut c = preempt_to_c8(&dir, s);
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(layout_of(&mut c, "a"), C8, "a changes: job 1's instance is free");
    assert_eq!(layout_of(&mut c, "b"), C8);
    assert_eq!(c.api_fake().requeued, vec![2], "job 1 ended by itself");
    assert!(!node(&mut c, "a").drain && !node(&mut c, "b").drain);
}

#[test]
fn a_job_started_before_the_drain_of_a_node_whose_gpu_count_changes_stops_the_change() {
    let dir = temp("count-at-drain");
    let mut s = cluster();
    // b is idle when planned; just before its drain job 2 starts on GPU 0's 3g.20gb@4
    // (IDX 1), which stays, and whose index b/1's change to c1 keeps, but b goes from 4
    // GPUs to 3: Slurm would requeue the job at the restart.
    let job = s.jobs.remove(1);
    s.start_on_drain = vec![job];
    let policy = "kind = \"static\"\nstatic_layout = [\"c1\", \"c5\", \"c1\"]";
    let mut c = central(resolved(&dir, policy), s, Mode::Drain, Recorder::default());
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(layout_of(&mut c, "b"), C2, "b keeps its layout");
    assert_eq!(layout_of(&mut c, "c"), "7g.40gb@0");
    assert_eq!(
        action(&c, "b/1"),
        "skip: became busy before the drain (the node's GPU count would change under running jobs)"
    );
    assert!(!node(&mut c, "b").drain, "b resumed");
}

#[test]
fn a_nodes_gres_type_order_is_kept_so_a_busy_device_after_a_change_keeps_its_index() {
    let dir = temp("gres-order");
    let mut s = cluster();
    // b: two GPUs in c2, its Gres listing 4g.20gb before 3g.20gb (not by name); job 2 on
    // GPU 0's 4g.20gb@0 holds IDX 0.
    s.nodes[1] = FakeSlurm::node("b", &[("A100-SXM4-40GB", C2), ("A100-SXM4-40GB", C2)]);
    s.nodes[1].gres = "gpu:4g.20gb:2,gpu:3g.20gb:2".into();
    s.jobs[1] = FakeSlurm::running(2, "b", "4g.20gb", 0);
    let mut c = central(resolved(&dir, TO_C5), s, Mode::Drain, Recorder::default());
    let r = once(&mut c);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    // b/1 to c5: written by name, 3g.20gb would come first and take IDX 0.
    assert_eq!(action(&c, "b/1"), "applied");
    assert_eq!(layout_of(&mut c, "b"), C5);
    assert_eq!(node(&mut c, "b").gres, "gpu:4g.20gb:1,gpu:3g.20gb:3");
}

#[test]
fn slurm_showing_what_was_written_counts_padding_and_a_report_compares_without_it() {
    let mig: std::collections::HashSet<String> = ["3g.20gb".to_string(), "7g.40gb".to_string()].into();
    let written = "gpu:3g.20gb:2,gpu:pad-3g.20gb:2,gpu:pad-7g.40gb:2";
    // Same instances, padding not (yet) in Slurm's record: not what was written.
    assert!(!same_gpu_gres("gpu:3g.20gb:2", written, &mig));
    assert!(same_gpu_gres(
        "gpu:pad-7g.40gb:2(S:0),gpu:3g.20gb:2,gpu:pad-3g.20gb:2,license:4",
        written,
        &mig
    ));
    // An agent's report has no padding: its instances are what it is compared on.
    assert!(same_mig_gres(written, "gpu:3g.20gb:2", &mig));
    assert!(!same_mig_gres(written, "gpu:3g.20gb:1", &mig));
}

#[test]
fn with_padding_a_node_whose_kept_gpu_holds_more_of_a_type_than_its_block_is_not_relaid_out() {
    let dir = temp("over-block");
    let policy = "kind = \"static\"\nstatic_layout = [\"c1\", \"c5\", \"c1\"]";
    let limits = "min_relayout_interval_s = 0\npersist_cycles = 1\npadding = true\n";
    // b/0 was laid out by hand: three 1g.10gb, one more than an A100's block of them
    // (c1..c12 hold at most one), and its first runs a job, so b/0 keeps its layout; b/1's
    // change would leave b with three 1g.10gb against a block of two.
    let mut s = cluster();
    s.nodes[1] = FakeSlurm::node(
        "b",
        &[
            ("A100-SXM4-40GB", "1g.10gb@0 1g.10gb@2 1g.10gb@4"),
            ("A100-SXM4-40GB", C2),
        ],
    );
    s.jobs[1] = FakeSlurm::running(2, "b", "1g.10gb", 0);
    let mut c = central(
        resolved_with(&dir, policy, limits),
        s,
        Mode::Drain,
        Recorder::default(),
    );
    let rep = once(&mut c);
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(layout_of(&mut c, "b"), C2, "b/1 kept");
    assert!(
        c.status
            .decisions
            .iter()
            .any(|d| d.gpu == "b/1" && d.action.contains("cannot be padded")),
        "{:?}",
        c.status.decisions
    );
    // The other nodes go on.
    assert_eq!(layout_of(&mut c, "c"), "7g.40gb@0");
}
