//! Faults during a re-layout, on the real harness: Slurm 22.05 with two slurmd nodes in
//! network namespaces, a `smartmigd node` agent per node on a simulated A100 (the
//! Slurm-node-record channel) and `smartmigd central --once` in the controller's
//! namespace (set-up in `common`).
//!
//! Node 0 starts with two GPUs in c2 (4g.20gb + 3g.20gb) with a job running on GPU 0's 3g,
//! a second job waiting for two 3g there and a held job in the queue; node 1 starts in c1
//! (7g.40gb). The policy sends every GPU to c5 (two 3g.20gb): node 0's GPU 1 and node 1
//! change, node 0's GPU 0 waits (its new 3g.20gb@0 would take the running job's Slurm
//! device index).
//! Each test injects one fault and then checks what every fault must leave behind
//! (`common::assert_safe`): every GPU settled in a valid layout; Slurm's node Gres and
//! the node's gres.conf agreeing; every node either in service with the device's layout,
//! or drained with a reason naming the fault (never DOWN, never unresponding); and every
//! job COMPLETED, RUNNING or PENDING and never requeued. Each also checks the behaviour
//! particular to its fault:
//! - an agent killed between destroy and create: the restarted agent finishes the plan;
//! - an NVML error on create: the agent rolls back, the node is resumed, a later cycle
//!   applies the change;
//! - an NVML read error while the agent reports: the node stays drained, Slurm untouched;
//! - a report with another GPU set (a GPU fell off the bus): likewise;
//! - the slurmctld restart command failing, and slurmctld not answering after it: the
//!   include is put back, slurmctld restarted with it, the nodes reverted (GPUs, gres.conf,
//!   slurmd) and left drained with the reason;
//! - the include unwritable (its file system full): Slurm never restarted, nodes reverted;
//! - the central role's re-layout ledger unwritable: no batch starts, nothing touched;
//! - the central role killed while slurmd is stopped: the agents' watchdogs start slurmd
//!   with the layout slurmctld has, well before SlurmdTimeout; the next run settles it;
//!   killed before Slurm's refresh with one node installed and one still installing,
//!   both watchdogs going back: the next run holds both without refreshing Slurm;
//! - an admin draining a node during the re-layout: it stays drained with their reason;
//! - slurmctld restarted by someone else mid-batch: the batch completes;
//! - a corrupt policy file: every layout is kept and the reason shown;
//! - an unwritable snapshot; a `Comment` slurmctld lost (the agent re-announces);
//! - slurmctld refusing node 1's agent's reports, or losing the reply to one: the agent
//!   writes the report again (running the phase again where the report never reached the
//!   record) and the batch completes;
//! - node 1 rebooted between its install and Slurm's refresh: Slurm's definition of it put
//!   back, the node held; with that put-back's reload failing too, the next run has Slurm
//!   load the node file again before any batch, and node 1 registers; when an admin's
//!   restart loaded it first, nothing is loaded again, and on 24.11, where node 1's
//!   slurmd kept the batch's definitions and is refused again, it is asked to register
//!   again;
//! - on the reconfigure path, the batch's reconfigure refused and the undo's answer lost:
//!   the nodes reverted and held, the report saying Slurm's file is unknown; refused with
//!   the include's saved copy gone: the nodes held as they stand, and Slurm loads the
//!   batch's values on both sides;
//! - slurmctld refusing the update that re-routes a held job (the plugin routed it to a
//!   4g.20gb the re-layout removes; re-routed once the batch is over), or losing its
//!   answer: the refusal is reported and the next run routes the job again; a lost answer
//!   is reported as uncertain and the job, now on a 3g.20gb, is left alone; released, it
//!   completes (both nodes idle here). On a
//!   Slurm before 23.02.6, which keeps the old type in an updated job, the job is named
//!   and left as it is, with no update.
//!
//! Needs root, Slurm, nsenter and ONNX Runtime (for the policy test); skipped otherwise.

mod backends;
mod common;
#[path = "../../tests/slurm/mod.rs"]
mod slurm;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use backends::{Kind, Op, TestGpus};
use common::{
    a100, assert_consistent, assert_consistent_on, assert_safe, central_command, central_config,
    central_config_with, central_output, gres_counts, make_gpus, node_field, restart_wrapper, run_central,
    run_central_under, sim_layout, start_agent, start_agent_named_on, start_agent_with, submit_workload,
    two_nodes, wait_announced, Policy, Workload, C1, C2, C5, NODE0_C2, NODE0_C5,
};
use slurm::{Cluster, Options};
use smartmig_core::config::Mode;
use smartmig_core::config::{Config, RelayoutRules};
use smartmig_gpu::simulated::{FailFault, Faults, Simulated};
use smartmigd::central::decide::{policy_path, write_preferring};
use smartmigd::central::status::Status;

/// The restart path's own faults (a failing restart, slurmctld silent after it, slurmd
/// stopped when the central role dies) run where that path is smartmigd's (Slurm before
/// 23.11; from 23.11 the reconfigure leaves slurmd running and smartmigd refuses the
/// restart path); every other fault runs on the release's own path.
fn restart_path_config(c: &Cluster, policy: &Policy, snapshot: &str, more: &str) -> Option<PathBuf> {
    if slurm::release().at_least(23, 11) {
        eprintln!("skipped: the slurmctld restart path is not smartmigd's on this release");
        return None;
    }
    Some(central_config_with(c, policy, snapshot, more))
}

const TO_C5: Policy = Policy::Static("\"c5\"");

/// Every fault test's start: the cluster (with `opts`), its workload, and node 0's agent
/// on its two c2 GPUs with the running job's 3g busy on GPU 0 (node 1's GPU and agent are
/// up to the test).
fn start_with(opts: &Options) -> (Cluster, Workload, Simulated) {
    let mut c = Cluster::start(opts);
    let jobs = submit_workload(&c);
    let s0 = start_agent(&mut c, 0, &[C2, C2], &["3g.20gb@4"]);
    (c, jobs, s0)
}

fn start_with_workload() -> (Cluster, Workload, Simulated) {
    start_with(&two_nodes())
}

/// [`start_with_workload`] with node 1's agent started too (idle, in c1), both announced.
fn start_busy_and_idle() -> (Cluster, Workload, Simulated, Simulated) {
    let (mut c, jobs, s0) = start_with_workload();
    let s1 = start_agent(&mut c, 1, &[C1], &[]);
    wait_announced(&c);
    (c, jobs, s0, s1)
}

/// Waits for a central cycle started with `central_command(..).spawn()`; its output.
fn finish(c: &Cluster, central: std::process::Child) -> String {
    central_output(c, central.wait_with_output().unwrap())
}

fn spawn_central(c: &Cluster, config: &Path) -> std::process::Child {
    central_command(c, config, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// [`spawn_central`] with its Slurm calls failing (or pausing) as `faults` (JSON) says.
fn spawn_central_under(c: &Cluster, config: &Path, faults: &str) -> std::process::Child {
    common::central_command_under(c, config, faults)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn status(c: &Cluster) -> Status {
    Status::read(&c.dir.join("central")).unwrap()
}

fn wait_until(what: &str, limit: Duration, ready: impl Fn() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A restart-path fault test's start: the cluster (with `opts`), its workload, both nodes'
/// agents (node 1's GPU whole), and a config moving both to c5 whose restart command runs
/// `script` first ([`restart_wrapper`]), with `more` lines; None (the test is skipped)
/// where the restart path is not smartmigd's.
fn start_restart_fault(
    opts: &Options,
    name: &str,
    script: &str,
    more: &str,
) -> Option<(Cluster, Workload, Simulated, Simulated, PathBuf)> {
    let (mut c, jobs, s0) = start_with(opts);
    let s1 = start_agent(&mut c, 1, &[C1], &[]);
    wait_announced(&c);
    let wrapper = restart_wrapper(&c, name, script);
    let config = restart_path_config(
        &c,
        &TO_C5,
        "run/snapshot.json",
        &format!("restart_slurmctld = [\"{}\"]\n{more}", wrapper.display()),
    )?;
    Some((c, jobs, s0, s1, config))
}

/// Two nodes under `SlurmdTimeout=60`: the agents' watchdogs start slurmd 30 s after a
/// stop (with `slurmctld_timeout_s = 8`, a batch fits in that budget).
fn short_slurmd_timeout() -> Options {
    Options {
        extra_conf: "SlurmdTimeout=60\n".into(),
        ..two_nodes()
    }
}

/// A restart command's script that fails the first restart after running `then` (shell
/// lines) and lets the later ones through.
fn restart_fails_once_after(then: &str) -> String {
    format!("if [ ! -e $FLAG ]; then touch $FLAG; {then}; echo 'Job for slurmctld.service failed' >&2; exit 1; fi")
}

/// slurmctld's starts so far (the first, and every restart).
fn ctld_starts(c: &Cluster) -> usize {
    c.ctld_log().matches("slurmctld version").count()
}

// Node 1's GPU on each backend: the simulated node, and NVML on the NVML test library.
on_both_backends!(
    an_agent_killed_between_destroy_and_create_finishes_the_plan_when_restarted_and_the_cycle_completes,
    an_nvml_error_on_create_rolls_the_gpu_back_without_touching_slurmd_and_a_later_cycle_applies_it,
);

fn an_agent_killed_between_destroy_and_create_finishes_the_plan_when_restarted_and_the_cycle_completes(
    kind: Kind,
) {
    killed_mid_plan_then(kind, false);
}

#[test]
fn a_node_rebooted_mid_plan_without_slurmctld_goes_back_to_the_layouts_slurmctld_has_and_comes_back_safe() {
    killed_mid_plan_then(Kind::Simulated, true);
}

/// Node 1's agent killed between destroy and create, then either restarted as systemd
/// restarts it (`Restart=on-failure`: it finishes the journaled plan) or, with `reboot`,
/// the node rebooted while slurmctld is away: slurmd stopped, the restore before it (its
/// plan rolled back: the gres.conf slurmd is about to read, and slurmctld, have the
/// layouts before it; the report cannot be published), slurmd started, then slurmctld and
/// the agent. The central role, waiting throughout, completes the batch with both nodes.
fn killed_mid_plan_then(kind: Kind, reboot: bool) {
    skip_unless_netns!();
    let (mut c, jobs, s0) = start_with_workload();
    let g1 = make_gpus(&c, 1, kind, &[C1], &[]);
    // Node 1's agent dies (SIGABRT, as a kill would) right after destroying the 7g.
    g1.abort_after(2);
    start_agent_named_on(&mut c, 1, "agent-1-killed", &g1);
    wait_announced(&c);
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    let mut central = spawn_central(&c, &config);

    wait_until("node 1's agent to die mid-plan", Duration::from_secs(60), || {
        !g1.abort_pending()
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        g1.state(0).0.instances().is_empty(),
        "killed between destroy and create"
    );
    assert!(
        central.try_wait().unwrap().is_none(),
        "the central role waits for node 1"
    );
    if !reboot {
        common::start_agent_daemon_on(&mut c, 1, "agent-1-restarted", &g1);
        let out = finish(&c, central);
        assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
        assert_eq!(g1.layout(0), C5);
        let log = std::fs::read_to_string(c.dir.join("log/agent-1-restarted.out")).unwrap();
        assert!(log.contains("finished the interrupted plan"), "{log}");
        assert_eq!(sim_layout(&s0), NODE0_C5);
        let g0 = TestGpus::from_simulated(&s0, &a100());
        assert_consistent_on(&c, &[&g0, &g1], &jobs.all());
        return;
    }
    let pid: i32 = std::fs::read_to_string(c.dir.join("run/slurmctld.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(Command::new("kill")
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success());
    wait_until("slurmctld to stop", Duration::from_secs(30), || {
        !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| s.contains("State:\tZ"))
    });
    // The restore before slurmd (then the agent) rolls the plan back: slurmd reads the
    // gres.conf of the layouts before it, which slurmctld has.
    let start = reboot_node_1(&mut c, &g1, &["before slurmd's start", "cannot be published"]);
    assert!(Command::new(&start).status().unwrap().success());
    let restart = Command::new(c.restart_slurmctld_script()).status().unwrap();
    assert!(restart.success());
    c.wait_for("slurmctld", Duration::from_secs(30), |c| {
        c.scontrol(&["ping"]).status.success()
    });
    // Its rolled-back Apply never reached the channel: asked again, the agent runs it
    // again, and the batch goes on with both nodes.
    let out = finish(&c, central);
    assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
    assert_eq!(sim_layout(&s0), NODE0_C5);
    assert_eq!(g1.layout(0), C5);
    let g0 = TestGpus::from_simulated(&s0, &a100());
    assert_consistent_on(&c, &[&g0, &g1], &jobs.all());
}

/// Node 1 "reboots" after its generation was installed and before Slurm's refresh (the
/// reconfigure from 23.11, the slurmctld restart before): its agent killed, slurmd
/// stopped, the restore before slurmd's start. slurmctld still has the layouts before the
/// batch, so the restore takes the GPUs and gres.conf back to them and slurmd starts on
/// them. The refresh then gives slurmctld the generation's, and the agent refuses to
/// start it: the central role puts Slurm's definition of node 1 back to the layouts it
/// has (else slurmctld refuses slurmd's registration, and no resume brings the node back)
/// and holds it. Every job and node is safe; resumed, node 1 serves, and the next cycle
/// makes its change.
#[test]
fn a_node_rebooted_between_install_and_slurms_refresh_goes_back_and_slurm_follows_it() {
    skip_unless_netns!();
    let (mut c, jobs, s0, g1, config, out) = reboot_before_refresh(false);
    assert!(
        out.contains("Slurm's definition of the node put back to the layouts it has"),
        "{out}\n{}",
        c.log_tails()
    );
    resume_node_1_and_change_it(&mut c, &jobs, &s0, &g1, &config, &out);
}

/// As above, but Slurm does not load the put-back (its reload refused, then the next
/// one too): slurmctld is left with the generation's layouts for node 1, which is
/// INVALID. The next run of the central role finds slurmctld the side left behind (the
/// node file has what node 1's agent reports) and has Slurm load it again before any
/// batch; node 1 then registers, held, and the rest is as above.
#[test]
fn a_put_back_slurm_did_not_load_is_loaded_again_by_the_next_run_before_any_batch() {
    skip_unless_netns!();
    let (mut c, jobs, s0, g1, config, out) = reboot_before_refresh(true);
    assert!(
        out.contains("putting Slurm's definition of the node back")
            && out.contains("loading the node file again for"),
        "{out}\n{}",
        c.log_tails()
    );
    let n1 = c.nodes[1].clone();
    assert!(!node_field(&c, &n1, "Gres").contains("7g.40gb"), "left behind");
    let out = run_central(&c, &config, &[]);
    assert!(
        out.contains("Slurm loaded the node file again") && out.contains("0 changed"),
        "{out}\n{}",
        c.log_tails()
    );
    resume_node_1_and_change_it(&mut c, &jobs, &s0, &g1, &config, &out);
}

/// As above, but before the next run an admin restarts slurmctld: it loads node 1's line,
/// which is right, and asks every node to register. On 22.05 node 1's slurmd, started
/// after the put-back, registers with that line and is taken: the next run of the central
/// role loads and asks nothing. On 24.11 the slurmd kept the batch's definitions (it read
/// slurm.conf at the batch's reconfigure, not since), registers with them and is refused
/// again: the next run finds nothing left to load and asks every slurmd to read slurm.conf
/// and register again; node 1 is then taken. The rest is as above.
#[test]
fn a_line_an_admins_restart_loaded_is_not_loaded_again_and_a_node_refused_after_it_is_asked_to_register_again(
) {
    skip_unless_netns!();
    let (mut c, jobs, s0, g1, config, _) = reboot_before_refresh(true);
    let n1 = c.nodes[1].clone();
    assert!(
        c.node_state(&n1).contains("INVAL"),
        "refused: {}",
        c.node_state(&n1)
    );
    assert!(Command::new(c.restart_slurmctld_script())
        .status()
        .unwrap()
        .success());
    c.wait_for(
        "node 1's registration with the restarted slurmctld",
        Duration::from_secs(30),
        |c| {
            let s = c.node_state(&n1);
            !s.is_empty() && !s.contains('*') && (s.contains("INVAL") || !s.contains("UNKNOWN"))
        },
    );
    assert!(node_field(&c, &n1, "Gres").contains("7g.40gb"), "the line loaded");
    let refused = slurm::release().at_least(23, 11);
    assert_eq!(
        c.node_state(&n1).contains("INVAL"),
        refused,
        "{}",
        c.node_state(&n1)
    );
    let out = run_central(&c, &config, &[]);
    assert!(
        !out.contains("the node file again") && out.contains("0 changed"),
        "{out}\n{}",
        c.log_tails()
    );
    assert_eq!(
        out.contains("asked every slurmd to register again"),
        refused,
        "{out}"
    );
    resume_node_1_and_change_it(&mut c, &jobs, &s0, &g1, &config, &out);
}

/// Waits until slurmctld took a registration of `node`'s slurmd: not UNKNOWN (a restarted
/// slurmctld's nodes until they register: 22.05 then clears a resume's drain and refuses
/// it), not INVAL, responding.
fn wait_registered(c: &Cluster, node: &str) {
    c.wait_for(
        &format!("slurmctld to take {node}'s registration"),
        Duration::from_secs(30),
        |c| {
            let s = c.node_state(node);
            !s.contains("UNKNOWN") && !s.contains("INVAL") && !s.contains('*')
        },
    );
}

/// The start of the reboot tests above, up to the end of the central role's first run
/// (its output returned); with `put_back_fails`, Slurm's refresh for the put-back and the
/// one after it fail (the reconfigure refused, or the restart command failing).
fn reboot_before_refresh(put_back_fails: bool) -> (Cluster, Workload, Simulated, TestGpus, PathBuf, String) {
    let (mut c, jobs, s0) = start_with_workload();
    let g1 = make_gpus(&c, 1, Kind::Simulated, &[C1], &[]);
    start_agent_named_on(&mut c, 1, "agent-1", &g1);
    wait_announced(&c);
    let n1 = c.nodes[1].clone();
    let gres_conf = c.dir.join(format!("etc/gres-{n1}.conf"));
    let before = std::fs::read_to_string(&gres_conf).unwrap();
    // Slurm's refresh waits at a gate: the reconfigure call, or the restart command.
    let gate = c.dir.join("run/refresh-gate");
    let reached = PathBuf::from(format!("{}.reached", gate.display()));
    let (central, faults) = if slurm::release().at_least(23, 11) {
        let fails = if put_back_fails {
            r#", {"call": "reconfigure", "skip": 1, "times": 2}"#
        } else {
            ""
        };
        (
            "slurmctld_timeout_s = 10\n".to_string(),
            format!(
                r#"[{{"call": "reconfigure", "pause": "{}"}}{fails}]"#,
                gate.display()
            ),
        )
    } else {
        // The restarts counted: the first waits at the gate, the next two fail as
        // systemd's would when `put_back_fails`.
        let fails = if put_back_fails { "1|2" } else { "-" };
        let wait = format!(
            "N=$(cat $FLAG 2>/dev/null || echo 0); echo $((N + 1)) > $FLAG\n\
             case $N in\n\
             0) touch {}; while [ ! -e {} ]; do sleep 0.1; done ;;\n\
             {fails}) echo 'Job for slurmctld.service failed' >&2; exit 1 ;;\n\
             esac",
            reached.display(),
            gate.display()
        );
        let wrapper = restart_wrapper(&c, "restart-at-the-gate", &wait);
        (
            format!("restart_slurmctld = [\"{}\"]\n", wrapper.display()),
            "[]".to_string(),
        )
    };
    let config = central_config_with(&c, &TO_C5, "run/snapshot.json", &central);
    let central = spawn_central_under(&c, &config, &faults);
    wait_until("Slurm's refresh", Duration::from_secs(60), || reached.exists());
    assert_eq!(g1.layout(0), C5, "installed before the refresh");
    assert_ne!(std::fs::read_to_string(&gres_conf).unwrap(), before);
    // The reboot.
    c.stop_daemon("agent-1");
    let start = reboot_node_1(&mut c, &g1, &["installed, not started,", "went back"]);
    assert_eq!(std::fs::read_to_string(&gres_conf).unwrap(), before);
    assert!(Command::new(&start).status().unwrap().success());
    std::fs::write(&gate, "").unwrap();
    let out = finish(&c, central);
    assert!(
        out.contains("1 changed") && out.contains("the agent refused Start"),
        "{out}\n{}",
        c.log_tails()
    );
    assert_eq!((sim_layout(&s0), g1.layout(0)), (NODE0_C5.into(), C1.into()));
    (c, jobs, s0, g1, config, out)
}

/// The end of the reboot tests: slurmctld takes node 1's registration with its old
/// layouts, the node held; resumed, every job and node is safe, and the next cycle makes
/// node 1's change.
fn resume_node_1_and_change_it(
    c: &mut Cluster,
    jobs: &Workload,
    s0: &Simulated,
    g1: &TestGpus,
    config: &Path,
    out: &str,
) {
    let n1 = c.nodes[1].clone();
    let g0 = TestGpus::from_simulated(s0, &a100());
    wait_registered(c, &n1);
    assert!(node_field(c, &n1, "Gres").contains("7g.40gb"), "{out}");
    assert!(c.node_state(&n1).contains("DRAIN"), "held");
    let resume = c.scontrol(&["update", &format!("nodename={n1}"), "state=resume"]);
    assert!(resume.status.success(), "{resume:?}");
    assert!(!c.node_state(&n1).contains("DRAIN"), "resumed");
    assert_consistent_on(c, &[&g0, g1], &jobs.all());
    let out = run_central(c, config, &[]);
    assert!(out.contains("1 changed"), "{out}\n{}", c.log_tails());
    assert_eq!(g1.layout(0), C5);
    assert_consistent_on(c, &[&g0, g1], &jobs.all());
}

/// Node 1 booting again, its agent gone: slurmd stopped, the restore before its start
/// (whose output says each of `says`) taking the GPU back to c1, then the agent; returns
/// slurmd's start script, for the test to run when slurmd's start is due.
fn reboot_node_1(c: &mut Cluster, g1: &TestGpus, says: &[&str]) -> PathBuf {
    let (stop, start) = c.slurmd_scripts(1);
    assert!(Command::new(&stop).status().unwrap().success());
    let restore = start_agent_named_on(c, 1, "agent-1-after-reboot", g1);
    assert!(says.iter().all(|s| restore.contains(s)), "{restore}");
    assert_eq!(g1.layout(0), C1);
    start
}

#[test]
fn after_a_failed_restore_at_boot_the_agent_restores_and_starts_slurmd_and_a_restore_run_again_beside_it_passes(
) {
    skip_unless_netns!();
    let mut c = Cluster::start(&two_nodes());
    let g1 = make_gpus(&c, 1, Kind::Simulated, &[C1], &[]);
    start_agent_named_on(&mut c, 1, "agent-1", &g1);
    let n1 = c.nodes[1].clone();
    let started = c.dir.join("log/agent-1.out");
    wait_until("the agent's lock", Duration::from_secs(30), || {
        std::fs::read_to_string(&started).is_ok_and(|l| l.contains("announced"))
    });
    let conf = c.dir.join(format!("etc/smartmig-{n1}.toml"));
    // The restore unit, run again by a start of slurmd beside the running agent.
    let restore = |c: &Cluster| {
        let out = common::smartmigd_with(c, Some(1), &g1.binds())
            .args(["node", "--restore", "--config"])
            .arg(&conf)
            .envs(g1.env())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, text) = restore(&c);
    assert!(
        ok && text.contains("the running node agent restored this boot's layouts"),
        "{text}"
    );
    // A boot whose restore failed: slurmd did not start, the mark names an earlier boot.
    c.stop_daemon("agent-1");
    let (stop, _) = c.slurmd_scripts(1);
    assert!(Command::new(&stop).status().unwrap().success());
    let mark = c.dir.join(format!("agent-{n1}/restored-boot"));
    std::fs::write(&mark, "an-earlier-boot\n").unwrap();
    let this_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let pidfile = c.dir.join(format!("run/slurmd-{n1}.pid"));
    let slurmd_runs = || {
        std::fs::read_to_string(&pidfile).is_ok_and(|p| Path::new(&format!("/proc/{}", p.trim())).exists())
    };
    assert!(!slurmd_runs());
    common::start_agent_daemon_on(&mut c, 1, "agent-1-after-failed-restore", &g1);
    wait_until(
        "the agent's own restore and slurmd",
        Duration::from_secs(30),
        || std::fs::read_to_string(&mark).is_ok_and(|m| m == this_boot) && slurmd_runs(),
    );
    let log = std::fs::read_to_string(c.dir.join("log/agent-1-after-failed-restore.out")).unwrap();
    assert!(log.contains("did not run or failed"), "{log}");
    c.wait_for("node 1 to register", Duration::from_secs(30), |c| {
        let s = c.node_state(&n1);
        !s.contains('*') && !s.contains("DOWN")
    });
    let (ok, text) = restore(&c);
    assert!(ok, "{text}");
    // Beside an agent that has not restored this boot, the restore refuses, saying why.
    std::fs::write(&mark, "an-earlier-boot\n").unwrap();
    let (ok, text) = restore(&c);
    assert!(
        !ok && text.contains("not restored yet") && text.contains("another node agent"),
        "{text}"
    );
}

fn an_nvml_error_on_create_rolls_the_gpu_back_without_touching_slurmd_and_a_later_cycle_applies_it(
    kind: Kind,
) {
    skip_unless_netns!();
    let (mut c, jobs, s0) = start_with_workload();
    let g1 = make_gpus(&c, 1, kind, &[C1], &[]);
    // The second create-gi on node 1 fails as NVML would.
    g1.fail(Op::CreateGi, Some(0), "NVML_ERROR_INSUFFICIENT_RESOURCES", 1);
    start_agent_named_on(&mut c, 1, "agent-1", &g1);
    wait_announced(&c);
    let config = central_config(&c, &TO_C5, "run/snapshot.json");

    let out = run_central(&c, &config, &[]);
    assert!(out.contains("1 changed"), "{out}\n{}", c.log_tails());
    assert!(out.contains("NVML_ERROR_INSUFFICIENT_RESOURCES"), "{out}");
    assert_eq!(sim_layout(&s0), NODE0_C5);
    assert_eq!(g1.layout(0), C1, "rolled back");
    let st = status(&c);
    let node1 = format!("{}/0", c.nodes[1]);
    assert!(
        st.decisions.iter().any(|d| d.gpu == node1
            && d.action.starts_with("rolled back:")
            && d.action.contains("NVML_ERROR")),
        "{st:?}"
    );
    // Node 1's agent rolled back during Apply, when slurmd is never touched.
    // (From 23.11 the batch's reconfigure re-executes every slurmd in place, this one too:
    // each start but the first follows a reconfigure's SIGHUP.)
    let slurmd = std::fs::read_to_string(c.dir.join(format!("log/slurmd-{}.log", c.nodes[1]))).unwrap();
    assert_eq!(
        slurmd.matches("slurmd version").count(),
        1 + slurmd.matches("Caught SIGHUP").count(),
        "{slurmd}"
    );
    let g0 = TestGpus::from_simulated(&s0, &a100());
    assert_consistent_on(&c, &[&g0, &g1], &jobs.all());

    // The fault fired once; the next cycle makes the change.
    let out = run_central(&c, &config, &[]);
    assert!(out.contains("1 changed") && out.contains("0 error(s)"), "{out}");
    assert_eq!(g1.layout(0), C5);
    assert_consistent_on(&c, &[&g0, &g1], &jobs.all());
}

/// Starts node 1's agent with slow creates (so the test can act mid-Apply).
fn slow_node_1(c: &mut Cluster) -> Simulated {
    let s1 = start_agent(c, 1, &[C1], &[]);
    s1.set_latency("create-ci", 700).unwrap();
    s1
}

/// Runs a central cycle moving both nodes to c5 and, once node 1's GPU has begun to
/// change, gives it `faults` until the cycle ends; the cluster, workload, both GPUs and
/// what the central role printed.
fn fault_mid_apply(faults: &Faults) -> (Cluster, Workload, Simulated, Simulated, String) {
    let out = mid_apply(|_, s1| s1.set_faults(faults).unwrap());
    out.3.set_faults(&Faults::default()).unwrap();
    out
}

/// Runs a central cycle moving both nodes to c5 and, once node 1's GPU has begun to
/// change, does `act`; the cluster, workload, both GPUs and what the central role printed.
fn mid_apply(act: impl FnOnce(&Cluster, &Simulated)) -> (Cluster, Workload, Simulated, Simulated, String) {
    let (mut c, jobs, s0) = start_with_workload();
    let s1 = slow_node_1(&mut c);
    wait_announced(&c);
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    let central = spawn_central(&c, &config);
    wait_until("node 1's re-layout to start", Duration::from_secs(60), || {
        !sim_layout(&s1).contains("7g")
    });
    act(&c, &s1);
    let out = finish(&c, central);
    (c, jobs, s0, s1, out)
}

/// Node 1 is held after Apply with `why`, Slurm still has its old GPU (never "no GPUs"),
/// and every job and node is safe.
fn assert_node_1_held_with_slurm_untouched(
    c: &Cluster,
    jobs: &Workload,
    s0: &Simulated,
    s1: &Simulated,
    why: &str,
) {
    let n1 = c.nodes[1].clone();
    assert_eq!(
        gres_counts(&node_field(c, &n1, "Gres")),
        gres_counts("gpu:7g.40gb:1"),
        "Slurm untouched"
    );
    let reason = format!("smartmig: held: gen 1: after Apply: {why}");
    assert_safe(c, &[s0, s1], &jobs.all(), &[(1, reason.as_str())]);
}

#[test]
fn an_nvml_read_error_while_the_agent_reports_leaves_its_node_drained_and_slurm_untouched() {
    skip_unless_netns!();
    // Listing the GPUs fails from then on, as NVML does with a GPU in trouble.
    let run = fault_mid_apply(&Faults {
        fail: vec![FailFault {
            always: true,
            ..FailFault::once("list", None, "NVML_ERROR_GPU_IS_LOST")
        }],
        ..Faults::default()
    });
    assert_read_error_holds_node_1(
        run,
        "its agent reports a read error: GPU 0: nvmlDeviceGetHandleByIndex failed: NVML_ERROR_GPU_IS_LOST",
    );
}

/// After a cycle run by [`mid_apply`] in which node 1's agent could no longer read its
/// node: node 0 went on, node 1 is held with `why`, Slurm still has its old GPU.
fn assert_read_error_holds_node_1(run: (Cluster, Workload, Simulated, Simulated, String), why: &str) {
    let (c, jobs, s0, s1, out) = run;
    assert!(
        out.contains("1 changed"),
        "node 0 goes on: {out}\n{}",
        c.log_tails()
    );
    assert_node_1_held_with_slurm_untouched(&c, &jobs, &s0, &s1, why);
}

#[test]
fn a_gres_conf_whose_markers_break_mid_relayout_leaves_its_node_drained_and_slurm_untouched() {
    skip_unless_netns!();
    // Someone (a config-management run, an admin) copies node 1's BEGIN marker while its
    // GPU changes: the agent can no longer tell its block, so its report carries a read
    // error, never an order or "no GPUs".
    let run = mid_apply(|c, _| {
        let path = c.dir.join(format!("etc/gres-{}.conf", c.nodes[1]));
        let conf = std::fs::read_to_string(&path).unwrap();
        let begin = conf
            .lines()
            .find(|l| l.starts_with("# BEGIN smartmig"))
            .expect("node 1's block")
            .to_string();
        std::fs::write(&path, format!("{conf}{begin}\n")).unwrap();
    });
    assert_read_error_holds_node_1(
        run,
        "its agent reports a read error: gres.conf: the markers of node",
    );
}

#[test]
fn a_report_with_another_gpu_set_is_refused_and_nothing_is_written_to_slurm() {
    skip_unless_netns!();
    // The GPU falls off the bus: NVML no longer lists it, without an error.
    let (c, jobs, s0, s1, out) = fault_mid_apply(&Faults {
        lost: vec![0],
        ..Faults::default()
    });
    assert!(out.contains("GPU set"), "{out}");
    assert_node_1_held_with_slurm_untouched(&c, &jobs, &s0, &s1, "the agent reports the GPU set");
}

/// Both nodes re-laid out but reverted, left drained with `why`; Slurm and gres.conf in
/// the old layout; slurmctld restarted `restarts` times more than at the start.
fn assert_reverted_and_held(c: &Cluster, s0: &Simulated, s1: &Simulated, jobs: &Workload, why: &str) {
    assert_eq!(
        (sim_layout(s0), sim_layout(s1)),
        (NODE0_C2.into(), C1.into()),
        "{}",
        c.log_tails()
    );
    let held: Vec<(usize, &str)> = vec![(0, why), (1, why)];
    assert_safe(c, &[s0, s1], &jobs.all(), &held);
    for (i, want) in [(0, "4g.20gb"), (1, "7g.40gb")] {
        let gres = node_field(c, &c.nodes[i], "Gres");
        assert!(gres.contains(want), "{}: {gres}", c.nodes[i]);
    }
    assert!(
        std::fs::read_to_string(c.nodes_include())
            .unwrap()
            .contains("gpu:7g.40gb:1"),
        "the include is back"
    );
}

#[test]
fn a_failing_restart_command_puts_the_include_back_reverts_the_nodes_and_holds_them() {
    skip_unless_netns!();
    let Some((mut c, jobs, s0, s1, config)) =
        start_restart_fault(&two_nodes(), "restart-fails-once", common::RESTART_FAILS_ONCE, "")
    else {
        return;
    };
    let before = ctld_starts(&c);
    let out = run_central(&c, &config, &[]);
    assert!(
        out.contains("0 changed") && out.contains("slurmctld.service failed"),
        "{out}"
    );
    assert_eq!(
        ctld_starts(&c),
        before + 1,
        "one restart: with the include put back"
    );
    assert_reverted_and_held(&c, &s0, &s1, &jobs, "restart-fails-once.sh` failed");

    // The admin gives up on smartmig: freeze, release (controller), release (node).
    let smartmigd = |args: &[&str]| {
        let out = common::smartmigd(&c, None)
            .args(args)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        assert!(out.status.success(), "smartmigd {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(smartmigd(&["freeze", "--reason", "removing smartmig"]).contains("frozen"));
    let released = smartmigd(&["release"]);
    for n in c.nodes.clone() {
        assert!(
            released.contains(&format!("{n}: resumed smartmig keys removed")),
            "{released}"
        );
        assert!(!node_field(&c, &n, "Extra").contains("smartmig"), "{n}");
    }
    common::wait_nodes_in_service(&c, &[]);
    let agent_conf = c.dir.join(format!("etc/smartmig-{}.toml", c.nodes[0]));
    let release = |c: &Cluster| {
        common::smartmigd(c, Some(0))
            .args(["node", "--release", "--config"])
            .arg(&agent_conf)
            .output()
            .unwrap()
    };
    // Not while the node's agent runs: it would write its markers back.
    let out = release(&c);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("another node agent"),
        "{out:?}"
    );
    c.stop_daemon(&format!("agent-{}", c.nodes[0]));
    let out = release(&c);
    assert!(out.status.success(), "{out:?}");
    let gres = std::fs::read_to_string(c.dir.join(format!("etc/gres-{}.conf", c.nodes[0]))).unwrap();
    assert!(
        !gres.contains("BEGIN smartmig") && gres.contains("Type=4g.20gb"),
        "{gres}"
    );
}

#[test]
fn slurmctld_not_answering_after_the_restart_puts_the_include_back_reverts_the_nodes_and_holds_them() {
    skip_unless_netns!();
    // The first restart stops slurmctld and starts it only 20 s later (unless the undo's
    // restart came first). The pid file sits beside the flag, in the cluster's run/.
    let Some((c, jobs, s0, s1, config)) = start_restart_fault(
        &two_nodes(),
        "slow-start",
        "if [ ! -e $FLAG ]; then touch $FLAG\n\
           pid=$(cat $(dirname $FLAG)/slurmctld.pid); kill -TERM $pid\n\
           while [ -d /proc/$pid ] && ! grep -q '^State:.*Z' /proc/$pid/status 2>/dev/null; do sleep 0.1; done\n\
           (sleep 20; [ -e $FLAG.undone ] || exec $REAL) >/dev/null 2>&1 &\n\
           exit 0\n\
         fi\n\
         touch $FLAG.undone",
        "slurmctld_timeout_s = 6",
    ) else {
        return;
    };
    let out = run_central(&c, &config, &[]);
    assert!(
        out.contains("0 changed") && out.contains("did not answer within 6s"),
        "{out}"
    );
    assert_reverted_and_held(&c, &s0, &s1, &jobs, "slurmctld did not answer");
}

#[test]
fn a_failed_restart_whose_include_cannot_be_put_back_holds_the_nodes_and_the_next_cycle_writes_what_slurmctld_has(
) {
    // The controller's file system remounted read-only.
    include_not_put_back(
        "restart-fails-read-only",
        "D=$(realpath $(dirname $FLAG)/../etc/slurm-nodes); mount --bind $D $D && mount -o remount,ro,bind $D",
        "Read-only file system",
    );
}

#[test]
fn a_failed_restart_whose_saved_include_is_gone_holds_the_nodes_and_the_next_cycle_writes_what_slurmctld_has()
{
    // The copy saved before the batch removed (by hand, or a cleanup).
    include_not_put_back(
        "restart-fails-saved-include-gone",
        "rm $(dirname $FLAG)/../etc/slurm-nodes/nodes.conf.smartmig-prev",
        "their saved copy",
    );
}

/// A restart that fails after `script` (shell lines) has made the include impossible to
/// put back, the undo's error naming `why`: the include keeps the batch's values,
/// slurmctld runs on with the old ones, the nodes are held as they stand, the watchdogs
/// start slurmd with what slurmctld has, and the next cycle writes slurmctld's values
/// into the include, which a restart of slurmctld then loads.
fn include_not_put_back(name: &str, script: &str, why: &str) {
    skip_unless_netns!();
    let Some((c, jobs, s0, s1, config)) = start_restart_fault(
        &short_slurmd_timeout(),
        name,
        &restart_fails_once_after(script),
        "slurmctld_timeout_s = 8",
    ) else {
        return;
    };
    let _ro = Unmount(c.nodes_include().parent().unwrap().to_path_buf());
    let before = ctld_starts(&c);
    let out = run_central(&c, &config, &[]);
    assert!(
        out.contains("0 changed") && out.contains("failed too") && out.contains(why),
        "{out}"
    );
    assert!(
        std::fs::read_to_string(c.nodes_include())
            .unwrap()
            .contains("gpu:3g.20gb:2"),
        "the include still holds the batch's values"
    );
    // Held as they stand: each agent's watchdog starts slurmd with what slurmctld has.
    for n in c.nodes.clone() {
        c.wait_for("the agent's watchdog", Duration::from_secs(60), |c| {
            node_field(c, &n, "Comment").contains("watchdog")
        });
    }
    assert_eq!(ctld_starts(&c), before, "slurmctld never restarted");
    drop(_ro);
    // The next cycle writes what slurmctld has into the include; a restart of slurmctld
    // then loads the layouts the nodes have.
    let out = run_central(&c, &config, &[]);
    assert!(out.contains("written as slurmctld has it"), "{out}");
    let restart = Command::new(c.restart_slurmctld_script()).status().unwrap();
    assert!(restart.success());
    c.wait_for("slurmctld", Duration::from_secs(30), |c| {
        c.scontrol(&["ping"]).status.success()
    });
    assert_eq!(ctld_starts(&c), before + 1);
    assert_reverted_and_held(&c, &s0, &s1, &jobs, &format!("{name}.sh` failed"));
}

#[test]
fn a_revert_that_cannot_put_a_nodes_gres_conf_back_keeps_its_slurmd_stopped_until_the_file_is_back_then_starts_it(
) {
    skip_unless_netns!();
    // The first restart fails, after node 1's saved gres.conf has gone (moved away, as a
    // cleanup might): its agent cannot put gres.conf back when asked to revert.
    let Some((c, jobs, s0, s1, config)) = start_restart_fault(
        &short_slurmd_timeout(),
        "restart-fails-saved-copy-gone",
        &restart_fails_once_after(
            "P=$(ls $(dirname $FLAG)/../etc/gres-*x1.conf.smartmig-prev); mv $P $P.kept",
        ),
        "slurmctld_timeout_s = 8",
    ) else {
        return;
    };
    let n1 = c.nodes[1].clone();
    let gres_conf = c.dir.join(format!("etc/gres-{n1}.conf"));
    let saved = smartmig_core::durable::previous_path(&gres_conf);
    let out = run_central(&c, &config, &[]);
    assert!(out.contains("0 changed"), "{out}");
    c.wait_for("node 1's failed revert", Duration::from_secs(30), |c| {
        node_field(c, &n1, "Comment").contains("slurmd left stopped")
    });
    assert!(node_field(&c, &n1, "Comment").contains("is gone"));
    // slurmd stays stopped rather than load the new gres.conf under slurmctld's old layout.
    assert!(
        std::fs::read_to_string(&gres_conf).unwrap().contains("3g.20gb"),
        "node 1's gres.conf still the batch's"
    );
    assert_eq!(sim_layout(&s1), C1, "its GPU is back");
    // The admin puts the saved copy back before SlurmdTimeout: the watchdog's next revert
    // restores gres.conf and starts slurmd; the node never goes down.
    let mut kept = saved.clone().into_os_string();
    kept.push(".kept");
    std::fs::rename(&kept, &saved).unwrap();
    c.wait_for("node 1's watchdog", Duration::from_secs(60), |c| {
        node_field(c, &n1, "Comment").contains("watchdog")
    });
    let state = c.node_state(&n1);
    assert!(!state.contains("DOWN") && !state.contains('*'), "{n1}: {state}");
    assert_reverted_and_held(&c, &s0, &s1, &jobs, "restart-fails-saved-copy-gone.sh` failed");
}

/// Unmounts its directory when dropped (a mount a test's script made there).
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).stderr(Stdio::null()).status();
    }
}

/// A full file system of a few KB mounted on `dir` (keeping its `nodes.conf`, if any),
/// unmounted when dropped.
struct TinyFs(PathBuf);

impl TinyFs {
    fn mount_full(dir: &Path) -> TinyFs {
        let keep = std::fs::read(dir.join("nodes.conf")).ok();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8k", "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(ok.success(), "mount tmpfs on {}", dir.display());
        if let Some(keep) = keep {
            std::fs::write(dir.join("nodes.conf"), keep).unwrap();
        }
        // Fill it: nothing more can be written there.
        let _ = Command::new("dd")
            .args(["if=/dev/zero", "bs=1k", "count=64"])
            .arg(format!("of={}", dir.join("filler").display()))
            .stderr(Stdio::null())
            .status();
        TinyFs(dir.to_path_buf())
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let keep = std::fs::read(self.0.join("nodes.conf")).ok();
        let _ = Command::new("umount").arg(&self.0).status();
        if let Some(keep) = keep {
            let _ = std::fs::write(self.0.join("nodes.conf"), keep);
        }
    }
}

#[test]
fn a_relayout_ledger_that_cannot_be_written_starts_no_relayout_and_touches_nothing() {
    skip_unless_netns!();
    let (c, jobs, s0, s1) = start_busy_and_idle();
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    let state = c.dir.join("central");
    std::fs::create_dir_all(&state).unwrap();
    let full = TinyFs::mount_full(&state);
    let out = run_central(&c, &config, &[]);
    drop(full);
    assert!(
        out.contains("no re-layout started: its ledger cannot be written"),
        "{out}"
    );
    assert_eq!((sim_layout(&s0), sim_layout(&s1)), (NODE0_C2.into(), C1.into()));
    assert_consistent(&c, &[&s0, &s1], &jobs.all());
}

#[test]
fn an_include_that_cannot_be_written_leaves_slurm_as_it_was_and_the_nodes_reverted() {
    skip_unless_netns!();
    let (c, jobs, s0, s1) = start_busy_and_idle();
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    let before_text = std::fs::read_to_string(c.nodes_include()).unwrap();
    let before = ctld_starts(&c);
    let full = TinyFs::mount_full(c.nodes_include().parent().unwrap());
    let out = run_central(&c, &config, &[]);
    assert!(out.contains("No space left on device"), "{out}");
    assert_eq!(std::fs::read_to_string(c.nodes_include()).unwrap(), before_text);
    drop(full);
    assert_eq!(ctld_starts(&c), before, "slurmctld never restarted");
    assert_reverted_and_held(&c, &s0, &s1, &jobs, "No space left on device");
}

#[test]
fn the_central_role_killed_while_slurmd_is_stopped_leaves_the_watchdogs_to_start_it_well_before_slurmd_timeout(
) {
    killed_while_slurmd_is_stopped(false);
}

#[test]
fn a_sites_text_in_a_nodes_extra_while_slurmd_is_stopped_does_not_keep_it_stopped_past_the_watchdog() {
    killed_while_slurmd_is_stopped(true);
}

/// The central role killed at slurmctld's restart, both nodes' slurmd stopped for the
/// re-layout; with `site_text`, a site's own text is then written into node 1's `Extra`,
/// where the central role's requests belong (its agent's record no longer reads), and
/// taken out again before the central role runs next.
fn killed_while_slurmd_is_stopped(site_text: bool) {
    skip_unless_netns!();
    // The first restart kills the central role instead (its parent), as a crash or an
    // OOM kill at that moment would: the include has the new layouts, slurmctld the old.
    let Some((c, jobs, s0, s1, config)) = start_restart_fault(
        &short_slurmd_timeout(),
        "kill-central",
        "if [ ! -e $FLAG ]; then touch $FLAG; kill -9 $PPID; exit 1; fi",
        "slurmctld_timeout_s = 8",
    ) else {
        return;
    };
    let out = central_command(&c, &config, &[]).output().unwrap();
    assert!(!out.status.success(), "killed: {out:?}");
    let killed = Instant::now();
    let n1 = c.nodes[1].clone();
    if site_text {
        let set = c.scontrol(&["update", &format!("nodename={n1}"), "extra=maintenance window 3"]);
        assert!(set.status.success(), "{set:?}");
        assert_eq!(node_field(&c, &n1, "Extra"), "maintenance window 3");
    }
    for n in c.nodes.clone() {
        c.wait_for("the agent's watchdog", Duration::from_secs(60), |c| {
            node_field(c, &n, "Comment").contains("watchdog")
        });
    }
    // Half of SlurmdTimeout from the stop; the nodes never went down.
    assert!(
        killed.elapsed() < Duration::from_secs(45),
        "{:?}",
        killed.elapsed()
    );
    for n in &c.nodes {
        let state = c.node_state(n);
        assert!(!state.contains("DOWN") && !state.contains('*'), "{n}: {state}");
        assert!(node_field(&c, n, "Comment").contains("slurmctld has gpu:"), "{n}");
    }
    assert_eq!(
        (sim_layout(&s0), sim_layout(&s1)),
        (NODE0_C2.into(), C1.into()),
        "reverted by the watchdogs"
    );
    if site_text {
        // The admin puts their text elsewhere.
        let set = c.scontrol(&["update", &format!("nodename={n1}"), "extra="]);
        assert!(set.status.success(), "{set:?}");
    }
    // The next run of the central role finds the batch in flight and settles it.
    let out = run_central(&c, &config, &[]);
    assert!(out.contains("refresh interrupted"), "{out}");
    assert_reverted_and_held(&c, &s0, &s1, &jobs, "slurmd watchdog");
}

/// The central role killed after node 0's install and before Slurm's refresh, while node
/// 1's slurmd stop hangs (node 1 still installing), and away until both watchdogs went
/// back. Its next run holds both nodes as they stand without refreshing Slurm: node 0,
/// installed, because its agent's report settles the watchdog's revert (a refresh would
/// give slurmctld layouts the node no longer has, then need a put-back), node 1 because
/// its install was never answered. slurmctld is never restarted.
#[test]
fn a_node_its_watchdog_reverted_before_slurms_refresh_is_held_without_a_refresh() {
    skip_unless_netns!();
    let (mut c, jobs, s0) = start_with(&short_slurmd_timeout());
    let s1 = start_agent(&mut c, 1, &[C1], &[]);
    wait_announced(&c);
    let Some(config) = restart_path_config(&c, &TO_C5, "run/snapshot.json", "slurmctld_timeout_s = 8\n")
    else {
        return;
    };
    // Node 1's slurmd stop waits at a gate.
    let gate = c.dir.join("run/stop-gate");
    let (stop, _) = c.slurmd_scripts(1);
    let script = std::fs::read_to_string(&stop).unwrap().replacen(
        "#!/bin/sh\n",
        &format!(
            "#!/bin/sh\nwhile [ ! -e {} ]; do sleep 0.1; done\n",
            gate.display()
        ),
        1,
    );
    std::fs::write(&stop, script).unwrap();
    let mut central = spawn_central(&c, &config);
    let ledger = c.dir.join("central");
    let states = || {
        smartmigd::central::batch::Ledger::load(&ledger)
            .ok()
            .and_then(|l| l.batch)
            .map(|b| {
                b.nodes
                    .values()
                    .map(|t| t.state.name().to_string())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    wait_until("node 0's install", Duration::from_secs(60), || {
        states() == ["installed", "installing"]
    });
    central.kill().unwrap();
    central.wait().unwrap();
    let n0 = c.nodes[0].clone();
    c.wait_for("node 0's watchdog", Duration::from_secs(60), |c| {
        node_field(c, &n0, "Comment").contains("watchdog")
    });
    std::fs::write(&gate, "").unwrap();
    let n1 = c.nodes[1].clone();
    c.wait_for("node 1's watchdog", Duration::from_secs(60), |c| {
        node_field(c, &n1, "Comment").contains("watchdog")
    });
    let starts = ctld_starts(&c);
    let out = run_central(&c, &config, &[]);
    assert!(out.contains("0 changed"), "{out}\n{}", c.log_tails());
    assert_eq!(ctld_starts(&c), starts, "Slurm not refreshed: {out}");
    assert!(
        node_field(&c, &n0, "Reason").contains("before Slurm's refresh"),
        "{out}"
    );
    assert_reverted_and_held(&c, &s0, &s1, &jobs, "slurmd watchdog");
}

#[test]
fn a_node_an_admin_drains_during_the_relayout_stays_drained_with_their_reason() {
    skip_unless_netns!();
    let (mut c, jobs, s0) = start_with_workload();
    let s1 = slow_node_1(&mut c);
    wait_announced(&c);
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    let central = spawn_central(&c, &config);
    let n1 = c.nodes[1].clone();
    wait_until("node 1's re-layout to start", Duration::from_secs(60), || {
        !sim_layout(&s1).contains("7g")
    });
    let out = c.scontrol(&[
        "update",
        &format!("NodeName={n1}"),
        "State=DRAIN",
        "Reason=admin: bad fan, ticket 81",
    ]);
    assert!(out.status.success(), "{out:?}");
    let out = finish(&c, central);
    assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
    assert_eq!((sim_layout(&s0), sim_layout(&s1)), (NODE0_C5.into(), C5.into()));
    assert!(node_field(&c, &n1, "Reason").starts_with("admin: bad fan, ticket 81"));
    assert_safe(&c, &[&s0, &s1], &jobs.all(), &[(1, "admin: bad fan")]);
}

#[test]
fn slurmctld_restarted_by_someone_else_mid_batch_delays_it_but_it_completes() {
    skip_unless_netns!();
    let (mut c, jobs, s0) = start_with_workload();
    let s1 = slow_node_1(&mut c);
    wait_announced(&c);
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    let central = spawn_central(&c, &config);
    wait_until("node 1's re-layout to start", Duration::from_secs(60), || {
        !sim_layout(&s1).contains("7g")
    });
    let restart = Command::new(c.restart_slurmctld_script()).status().unwrap();
    assert!(restart.success());
    let out = finish(&c, central);
    assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
    assert_eq!((sim_layout(&s0), sim_layout(&s1)), (NODE0_C5.into(), C5.into()));
    assert!(
        ctld_starts(&c) >= 3,
        "started, restarted by the test, restarted by the re-layout"
    );
    assert_consistent(&c, &[&s0, &s1], &jobs.all());
    assert!(status(&c).pending_transitions.is_empty(), "{:?}", status(&c));
}

#[test]
fn a_corrupt_policy_file_keeps_every_layout_and_one_whose_guard_failed_falls_back_to_the_static_layout() {
    skip_unless_netns!();
    let (c, jobs, s0, s1) = start_busy_and_idle();
    let config = central_config(
        &c,
        &Policy::Onnx {
            prefer: 4,
            fallback: "\"c2\"",
        },
        "run/snapshot.json",
    );
    let out = run_central(&c, &config, &[]);
    let source = status(&c).sources["a100-40gb"].clone();
    if source.contains("ONNX Runtime library not found") {
        eprintln!("skipped: no ONNX Runtime here ({source})");
        return;
    }
    assert!(source.starts_with("onnx "), "{source}");
    assert!(out.contains("2 changed"), "{out}");
    assert_eq!((sim_layout(&s0), sim_layout(&s1)), (NODE0_C5.into(), C5.into()));

    let resolved = Config::from_file(&config).unwrap().resolve(None).unwrap();
    std::fs::write(
        policy_path(&resolved, 0, Mode::Drain),
        b"\x08\x07garbage, not ONNX",
    )
    .unwrap();
    let out = run_central(&c, &config, &[]);
    let source = status(&c).sources["a100-40gb"].clone();
    assert!(source.starts_with("keep current layouts"), "{source}");
    assert!(
        source.contains("a100-40gb-drain.onnx"),
        "names the file: {source}"
    );
    assert!(
        out.contains("0 GPU(s) to change, 0 changed")
            && out.contains("unusable; its GPUs keep their layouts"),
        "{out}"
    );
    assert_eq!((sim_layout(&s0), sim_layout(&s1)), (NODE0_C5.into(), C5.into()));
    assert_consistent(&c, &[&s0, &s1], &jobs.all());

    // A readable file whose deployment guard failed: the GPUs take the static layout
    // (c2), as `smartmig compare` deploys static-best then; idle node 1 changes.
    write_preferring(
        &resolved,
        0,
        Mode::Drain,
        4,
        Some("failed: -2.0% ± 0.5% over static-best"),
    )
    .unwrap();
    let out = run_central(&c, &config, &[]);
    let source = status(&c).sources["a100-40gb"].clone();
    assert!(
        source.starts_with("static (fallback: ")
            && source.contains("a100-40gb-drain.onnx: its deployment guard failed: -2.0%"),
        "{source}"
    );
    assert!(!out.contains("0 changed"), "{out}\n{}", c.log_tails());
    assert_eq!(sim_layout(&s1), C2);
    assert_consistent(&c, &[&s0, &s1], &jobs.all());
}

/// A preempt policy validated where jobs start over, requeueing only jobs that ran at most
/// 60 s, at a site without that limit: its GPUs take the static layout and no job is
/// requeued; with a limit at or below its own it runs.
#[test]
fn a_preempt_policy_validated_with_a_requeue_limit_the_site_lacks_runs_as_the_static_layout() {
    skip_unless_netns!();
    let (c, jobs, s0, s1) = start_busy_and_idle();
    let preempt_site = |central: &str| {
        let policy = Policy::Onnx {
            prefer: 4,
            fallback: "\"c2\"",
        };
        let config = central_config_with(&c, &policy, "run/snapshot.json", central);
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, text.replace("mode = \"drain\"", "mode = \"preempt\"")).unwrap();
        let resolved = Config::from_file(&config).unwrap().resolve(None).unwrap();
        let path = write_preferring(&resolved, 0, Mode::Preempt, 4, Some("passed: +7.0%")).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let (net, mut meta) = smartmig_policy::onnx_reader::read_policy(&path, &bytes).unwrap();
        meta.requeued = smartmig_policy::Requeued::Restart;
        meta.requeue_max_run_s = Some(60.0);
        smartmig_policy::onnx_writer::write(&path, &net, &meta).unwrap();
        config
    };
    let out = run_central(&c, &preempt_site(""), &[]);
    let source = status(&c).sources["a100-40gb"].clone();
    if source.contains("ONNX Runtime library not found") {
        eprintln!("skipped: no ONNX Runtime here ({source})");
        return;
    }
    assert!(
        source.starts_with("static (fallback: ") && source.contains("requeue_max_run_s = 60 s"),
        "{source}"
    );
    assert!(!out.contains("0 changed"), "{out}\n{}", c.log_tails());
    assert_eq!((sim_layout(&s0), sim_layout(&s1)), (NODE0_C2.into(), C2.into()));
    assert_consistent(&c, &[&s0, &s1], &jobs.all());

    // Held to no run time at all (below the file's 60 s): the policy runs, every running
    // job older than that keeps its instance, and idle node 1 takes its c5.
    let out = run_central(&c, &preempt_site("requeue_max_run_s = 0\n"), &[]);
    let source = status(&c).sources["a100-40gb"].clone();
    assert!(source.starts_with("onnx "), "{source}");
    assert!(!out.contains("0 changed"), "{out}\n{}", c.log_tails());
    assert_eq!(sim_layout(&s1), C5);
    assert_consistent(&c, &[&s0, &s1], &jobs.all());
}

#[test]
fn a_periodic_schedule_searched_under_other_rules_runs_as_the_static_layout_until_they_match() {
    skip_unless_netns!();
    let (c, jobs, s0, s1) = start_busy_and_idle();
    // Searched with padding; this smartmigd runs without: the schedule (c5) never runs,
    // the static layout (c2) does, and idle node 1 takes it.
    let policy = |tuned_under: String| Policy::Periodic {
        layout: "\"c5\"",
        tuned_under,
        fallback: "\"c2\"",
    };
    let config = central_config(
        &c,
        &policy("mode = drain, padding = true".into()),
        "run/snapshot.json",
    );
    let out = run_central(&c, &config, &[]);
    let source = status(&c).sources["a100-40gb"].clone();
    assert!(
        source.starts_with(
            "static (fallback: [[policy.periodic]] was searched under \"mode = drain, padding = true\""
        ) && source.contains("padding = false"),
        "{source}"
    );
    assert!(!out.contains("0 changed"), "{out}\n{}", c.log_tails());
    assert_eq!(sim_layout(&s1), C2);
    assert_consistent(&c, &[&s0, &s1], &jobs.all());

    // The same schedule recorded under this daemon's own rules runs: node 1 takes c5.
    let rules = RelayoutRules::of(&Config::from_file(&config).unwrap()).unwrap();
    let config = central_config(&c, &policy(rules.to_string()), "run/snapshot.json");
    let out = run_central(&c, &config, &[]);
    assert_eq!(status(&c).sources["a100-40gb"], "periodic");
    assert!(!out.contains("0 changed"), "{out}\n{}", c.log_tails());
    assert_eq!(sim_layout(&s1), C5);
    assert_consistent(&c, &[&s0, &s1], &jobs.all());
}

/// Sends `signal` (`STOP`, `CONT`) to node `i`'s slurmd.
fn signal_slurmd(c: &Cluster, i: usize, signal: &str) {
    let pidfile = c.dir.join(format!("run/slurmd-{}.pid", c.nodes[i]));
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), pid.trim()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{signal} {pid}");
}

#[test]
fn a_registration_slurmctld_refuses_mid_batch_as_stale_does_not_leave_the_node_drained() {
    skip_unless_netns!();
    if !slurm::release().at_least(23, 11) {
        // On the restart path slurmd is stopped across Slurm's reload: no registration can
        // cross it.
        eprintln!("skipped: the reconfigure path's race (Slurm 23.11 and later)");
        return;
    }
    let (c, jobs, s0, s1) = start_busy_and_idle();
    // Run 1, node 1 from c1 to c2. Slurm 24.11 asks a resumed node's slurmd to register
    // (its resume sets NO_RESPOND); node 1's slurmd is stopped at the resume, so its
    // answer is still owed when the next batch begins.
    let gate = c.dir.join("run/resume-gate");
    let faults = format!(
        r#"[{{"call": "update_node", "node": "{}", "resume": true, "pause": "{}"}}]"#,
        c.nodes[1],
        gate.display()
    );
    let config = central_config(&c, &Policy::Static("\"c2\""), "run/snapshot.json");
    let central = spawn_central_under(&c, &config, &faults);
    let reached = c.dir.join("run/resume-gate.reached");
    wait_until("node 1's resume", Duration::from_secs(60), || reached.exists());
    signal_slurmd(&c, 1, "STOP");
    std::fs::write(&gate, "").unwrap();
    let out = finish(&c, central);
    assert!(out.contains("1 changed"), "{out}\n{}", c.log_tails());
    // slurmctld's ping (each second at most) sends the registration request.
    std::thread::sleep(Duration::from_secs(2));

    // Run 2, node 1 from c2 to c5: slurmd goes on after the reconfigure loaded c5, and
    // answers the request it holds with c2's GRES: slurmctld refuses it ("count too
    // low"), marks node 1 INVAL and puts its own reason in place of smartmig's, before the
    // reconfigured slurmd registers c5.
    let gate = c.dir.join("run/reconfigure-gate");
    let faults = format!(r#"[{{"call": "reconfigure", "pause": "{}"}}]"#, gate.display());
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    let central = spawn_central_under(&c, &config, &faults);
    let reached = c.dir.join("run/reconfigure-gate.reached");
    wait_until("the batch's reconfigure", Duration::from_secs(60), || {
        reached.exists()
    });
    let log = || std::fs::read_to_string(c.dir.join("log/slurmctld.log")).unwrap();
    let started = || log().matches("Running as primary controller").count();
    let before = started();
    std::fs::write(&gate, "").unwrap();
    wait_until("slurmctld's re-execution", Duration::from_secs(30), || {
        started() > before
    });
    signal_slurmd(&c, 1, "CONT");
    let out = finish(&c, central);
    let refused = format!(
        "Setting node {} state to INVAL with reason:gres/gpu:3g.20gb count too low",
        c.nodes[1]
    );
    assert!(
        log().contains(&refused),
        "the stale registration was not refused: the race did not happen\n{out}\n{}",
        c.log_tails()
    );
    assert!(
        out.contains("2 changed") && out.contains("0 error(s)"),
        "{out}\n{}",
        c.log_tails()
    );
    assert!(
        out.contains("refused a registration during the re-layout"),
        "{out}"
    );
    assert_eq!((sim_layout(&s0), sim_layout(&s1)), (NODE0_C5.into(), C5.into()));
    common::wait_nodes_in_service(&c, &[]);
    assert_consistent(&c, &[&s0, &s1], &jobs.all());
}

#[test]
fn an_unwritable_snapshot_is_an_error_the_relayout_still_completes_and_a_later_cycle_publishes() {
    skip_unless_netns!();
    let (c, jobs, s0, s1) = start_busy_and_idle();
    // Root ignores file modes: the snapshot's parent is a regular file instead.
    let blocked = c.dir.join("blocked");
    std::fs::write(&blocked, b"").unwrap();
    let config = central_config(&c, &TO_C5, "blocked/snapshot.json");

    let out = run_central(&c, &config, &[]);
    assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
    assert!(out.contains("cannot publish the snapshot"), "{out}");
    assert!(
        status(&c)
            .errors
            .iter()
            .any(|(_, e)| e.contains("cannot publish the snapshot") && e.contains("blocked/snapshot.json")),
        "{:?}",
        status(&c)
    );
    assert_eq!((sim_layout(&s0), sim_layout(&s1)), (NODE0_C5.into(), C5.into()));
    assert_consistent(&c, &[&s0, &s1], &jobs.all());

    std::fs::remove_file(&blocked).unwrap();
    let out = run_central(&c, &config, &[]);
    assert!(out.contains("0 changed") && out.contains("0 error(s)"), "{out}");
    let snap = std::fs::read_to_string(c.dir.join("blocked/snapshot.json")).unwrap();
    assert!(snap.contains("3g.20gb") && !snap.contains("7g.40gb"), "{snap}");
    assert_consistent(&c, &[&s0, &s1], &jobs.all());
}

#[test]
fn a_node_report_slurmctld_lost_is_reannounced_and_the_central_role_manages_the_node_again() {
    skip_unless_netns!();
    let mut c = Cluster::start(&two_nodes());
    let s0 = start_agent(&mut c, 0, &[C2, C2], &[]);
    let s1 = start_agent(&mut c, 1, &[C1], &[]);
    wait_announced(&c);
    let n1 = c.nodes[1].clone();
    let out = c.scontrol(&["update", &format!("NodeName={n1}"), "Comment="]);
    assert!(out.status.success(), "{out:?}");
    wait_announced(&c);
    // Each GPU already has its static configuration: nothing to change, both managed.
    let config = central_config(&c, &Policy::Static("\"c2\", \"c2\", \"c1\""), "run/snapshot.json");
    let out = run_central(&c, &config, &[]);
    assert!(out.contains("0 changed") && out.contains("0 error(s)"), "{out}");
    let gpus: Vec<String> = status(&c).gpus.iter().map(|g| g.gpu.clone()).collect();
    let n0 = &c.nodes[0];
    assert_eq!(
        gpus,
        vec![format!("{n0}/0"), format!("{n0}/1"), format!("{n1}/0")]
    );
    let log = std::fs::read_to_string(c.dir.join(format!("log/agent-{n1}.out"))).unwrap();
    assert!(
        log.contains("re-announced generation 0") && log.contains("report is gone"),
        "{log}"
    );
    assert_consistent(&c, &[&s0, &s1], &[]);
}

/// Node 1's slurmctld calls fail as `faults` (JSON, `{node1}` for its name) says, for one
/// central run from c1 to c5 beside a busy node 0; returns the run's output after checking
/// that it changed both nodes and left every node in service and every job safe.
fn run_with_slurm_faults(faults: &str) -> String {
    run_with_slurm_faults_to(faults, C5)
}

/// [`run_with_slurm_faults`] where node 1 ends in `node1` (C1: reverted, C5: changed).
fn run_with_slurm_faults_to(faults: &str, node1: &str) -> String {
    let (c, jobs, s0, s1) = start_busy_and_idle();
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    let out = run_central_under(&c, &config, &faults.replace("{node1}", &c.nodes[1]));
    let changed = if node1 == C5 { "2 changed" } else { "1 changed" };
    assert!(out.contains(changed), "{out}\n{}", c.log_tails());
    assert_eq!(
        (sim_layout(&s0), sim_layout(&s1)),
        (NODE0_C5.into(), node1.into())
    );
    common::wait_nodes_in_service(&c, &[]);
    assert_consistent(&c, &[&s0, &s1], &jobs.all());
    out
}

#[test]
fn a_job_that_starts_on_a_changing_instance_just_before_the_drain_keeps_it_and_the_node_resumes_unchanged() {
    skip_unless_netns!();
    let (c, jobs, s0, s1) = start_busy_and_idle();
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    // The central role has planned node 1 (idle, c1 to c5); its drain waits at the gate
    // while a job starts on the 7g.40gb the change would destroy.
    let gate = c.dir.join("run/drain-gate");
    let faults = format!(
        r#"[{{"call": "update_node", "node": "{}", "drain_reason": "smartmig: repartition", "pause": "{}"}}]"#,
        c.nodes[1],
        gate.display()
    );
    let central = spawn_central_under(&c, &config, &faults);
    let reached = c.dir.join("run/drain-gate.reached");
    wait_until("node 1's drain", Duration::from_secs(60), || reached.exists());
    let n1 = c.nodes[1].clone();
    let (late, _) = c
        .sbatch(&["-w", &n1, "--gres=gpu:7g.40gb:1", "--wrap", "sleep 600"])
        .unwrap();
    c.wait_job(late, &["RUNNING"], Duration::from_secs(20));
    std::fs::write(&gate, "").unwrap();
    let out = finish(&c, central);
    assert!(out.contains("1 changed"), "{out}\n{}", c.log_tails());
    let name = format!("{n1}/0");
    let why = status(&c)
        .decisions
        .iter()
        .find(|d| d.gpu == name)
        .map(|d| d.action.clone())
        .unwrap_or_default();
    assert!(
        why.starts_with("skip: became busy before the drain (GPU 0: busy 7g.40gb"),
        "{why}\n{out}"
    );
    assert_eq!((sim_layout(&s0), sim_layout(&s1)), (NODE0_C5.into(), C1.into()));
    common::assert_never_requeued(&c, late);
    let mut all = jobs.all();
    all.push(late);
    common::wait_nodes_in_service(&c, &[]);
    assert_consistent(&c, &[&s0, &s1], &all);
}

#[test]
fn a_resume_slurmctld_refuses_twice_is_retried_until_it_takes() {
    skip_unless_netns!();
    let out =
        run_with_slurm_faults(r#"[{"call": "update_node", "node": "{node1}", "resume": true, "times": 2}]"#);
    assert_eq!(out.matches(") fails: refused (injected)").count(), 2, "{out}");
}

#[test]
fn a_drain_whose_reply_was_lost_is_asked_again_and_the_node_changes_with_its_batch() {
    skip_unless_netns!();
    // Slurm drains node 1 but the reply never comes back (before: node 1 was skipped,
    // left drained outside any batch, and its resume failed after the restart).
    let out = run_with_slurm_faults(
        r#"[{"call": "update_node", "node": "{node1}", "drain_reason": "smartmig: repartition", "reply_lost": true}]"#,
    );
    assert_eq!(
        out.matches(") fails: Communication receive failure").count(),
        1,
        "{out}"
    );
    assert!(
        out.contains("the drain may have taken effect") && out.contains("0 error(s)"),
        "{out}"
    );
}

#[test]
fn a_resume_whose_reply_was_lost_closes_the_batch_with_the_node_in_service() {
    skip_unless_netns!();
    let out = run_with_slurm_faults(
        r#"[{"call": "update_node", "node": "{node1}", "resume": true, "reply_lost": true}]"#,
    );
    assert!(out.contains("0 error(s)"), "{out}");
}

#[test]
fn a_plan_hand_off_whose_reply_was_lost_reverts_that_node_and_resumes_it() {
    skip_unless_netns!();
    // The plan may or may not be in node 1's Extra: its agent may be applying it. The
    // central role cannot tell, so it asks for a revert (whatever the agent did, the GPUs
    // go back to c1) and the node returns to service unchanged; node 0 changes.
    let out = run_with_slurm_faults_to(
        r#"[{"call": "update_node", "node": "{node1}", "extra": true, "reply_lost": true}]"#,
        C1,
    );
    assert!(
        out.contains("cannot tell whether the plan reached the agent"),
        "{out}"
    );
}

#[test]
fn a_refresh_whose_reply_was_lost_still_finishes_the_batch() {
    skip_unless_netns!();
    // The reconfigure path's one call (Slurm 23.11 and later; the restart path makes none).
    // Before: taken for a refusal, so the batch was undone and both nodes held drained.
    let out = run_with_slurm_faults(r#"[{"call": "reconfigure", "reply_lost": true}]"#);
    assert!(out.contains("0 error(s)"), "{out}");
}

#[test]
fn an_undo_whose_reload_answer_was_lost_reverts_the_nodes_and_holds_them() {
    skip_unless_netns!();
    if !on_the_reconfigure_path() {
        return;
    }
    // The batch's reconfigure is refused; the undo puts the include back and reconfigures
    // again, and that answer is lost (Slurm did reload). Which file Slurm has is unknown
    // to the central role: it says so, and the nodes end reverted and held either way.
    let (c, jobs, s0, s1) = start_busy_and_idle();
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    let out = run_central_under(
        &c,
        &config,
        r#"[{"call": "reconfigure"}, {"call": "reconfigure", "skip": 1, "reply_lost": true}]"#,
    );
    assert!(
        out.contains("whether Slurm loaded its previous node definitions is unknown"),
        "{out}"
    );
    assert_reverted_and_held(&c, &s0, &s1, &jobs, "refused (injected)");
}

#[test]
fn a_refused_reconfigure_whose_include_cannot_be_put_back_holds_the_nodes_and_slurm_loads_the_batch_on_both_sides(
) {
    skip_unless_netns!();
    if !on_the_reconfigure_path() {
        return;
    }
    // The batch's reconfigure waits while the include's saved copy goes away (a cleanup),
    // then is refused: the undo cannot put the include back. The nodes' gres.conf are kept
    // as they stand too, and Slurm reloads the batch's values with them; the nodes are
    // held. (A read-only remount here would not reach the central role: on a root file
    // system it runs in a mount namespace of its own.)
    let (c, jobs, s0, s1) = start_busy_and_idle();
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    let gate = c.dir.join("run/reconfigure-gate");
    let faults = format!(
        r#"[{{"call": "reconfigure", "pause": "{}"}}, {{"call": "reconfigure"}}]"#,
        gate.display()
    );
    let central = spawn_central_under(&c, &config, &faults);
    let mut reached = gate.clone().into_os_string();
    reached.push(".reached");
    wait_until("the batch's reconfigure", Duration::from_secs(60), || {
        Path::new(&reached).exists()
    });
    std::fs::remove_file(smartmig_core::durable::previous_path(&c.nodes_include())).unwrap();
    std::fs::write(&gate, "").unwrap();
    let out = finish(&c, central);
    assert!(
        out.contains("0 changed")
            && out.contains("putting Slurm's previous node definitions back failed too")
            && out.contains("their saved copy")
            && out.contains("Slurm loaded the node definitions file again"),
        "{out}"
    );
    // Both sides have the batch's layouts: the devices, gres.conf, the include, slurmctld.
    assert_eq!((sim_layout(&s0), sim_layout(&s1)), (NODE0_C5.into(), C5.into()));
    assert!(
        std::fs::read_to_string(c.nodes_include())
            .unwrap()
            .contains("gpu:3g.20gb:2"),
        "the include holds the batch's values"
    );
    assert!(node_field(&c, &c.nodes[1], "Gres").contains("3g.20gb:2"));
    let held = "refused (injected)";
    assert_safe(&c, &[&s0, &s1], &jobs.all(), &[(0, held), (1, held)]);
    // The next cycle finds the include as slurmctld has it and rewrites nothing; the
    // admin resumes the nodes as they are.
    let out = run_central(&c, &config, &[]);
    assert!(!out.contains("written as slurmctld has it"), "{out}");
    for n in &c.nodes {
        let out = c.scontrol(&["update", &format!("nodename={n}"), "state=resume"]);
        assert!(out.status.success(), "resume {n}: {out:?}");
    }
    assert_safe(&c, &[&s0, &s1], &jobs.all(), &[]);
}

/// Whether smartmigd re-lays out through `scontrol reconfigure` here (Slurm 23.11 on);
/// else says the test is skipped.
fn on_the_reconfigure_path() -> bool {
    let yes = slurm::release().at_least(23, 11);
    if !yes {
        eprintln!("skipped: the reconfigure path is smartmigd's from 23.11 on");
    }
    yes
}

/// One central run from c1 to c5 beside a busy node 0, node 1's agent making its Slurm
/// calls under `faults` (JSON, `{node1}` for its name); checks that both nodes changed and
/// every node and job is safe; returns node 1's agent log.
fn run_with_agent_faults(faults: &str) -> String {
    let (mut c, jobs, s0) = start_with_workload();
    let n1 = c.nodes[1].clone();
    let path = c.dir.join("etc/agent-faults.json");
    std::fs::write(&path, faults.replace("{node1}", &n1)).unwrap();
    let s1 = start_agent_with(
        &mut c,
        1,
        &[C1],
        &[],
        &[(smartmigd::slurm::faults::FAULTS_ENV, path.as_path())],
    );
    wait_announced(&c);
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    let out = run_central(&c, &config, &[]);
    assert!(
        out.contains("2 changed") && out.contains("0 error(s)"),
        "{out}\n{}",
        c.log_tails()
    );
    assert_eq!((sim_layout(&s0), sim_layout(&s1)), (NODE0_C5.into(), C5.into()));
    common::wait_nodes_in_service(&c, &[]);
    assert_consistent(&c, &[&s0, &s1], &jobs.all());
    std::fs::read_to_string(c.dir.join(format!("log/agent-{n1}.out"))).unwrap()
}

/// How often the agent's log shows it starting the first Apply's generation.
fn apply_runs(log: &str) -> usize {
    let first = log.lines().find(|l| l.contains(": Apply on ")).expect("an Apply");
    let generation = first
        .split("generation ")
        .nth(1)
        .and_then(|t| t.split(':').next())
        .expect("the generation");
    log.matches(&format!("generation {generation}: Apply on "))
        .count()
}

#[test]
fn an_agent_report_slurmctld_refuses_is_written_again_after_the_phase_runs_again() {
    skip_unless_netns!();
    // The announcement goes through; the next two reports (the first phase's) are refused.
    let log = run_with_agent_faults(r#"[{"call": "update_node", "node": "{node1}", "skip": 1, "times": 2}]"#);
    assert_eq!(log.matches(") fails: refused (injected)").count(), 2, "{log}");
    // Not on the record, the report does not answer the plan: the agent runs the phase
    // again (its GPUs already there: nothing to move) until the report is written.
    assert_eq!(apply_runs(&log), 3, "{log}");
}

#[test]
fn an_agent_report_whose_reply_was_lost_is_not_run_again() {
    skip_unless_netns!();
    // Slurm writes the first phase's report but its answer is lost: the record answers the
    // plan, so the agent does not run the phase again.
    let log = run_with_agent_faults(
        r#"[{"call": "update_node", "node": "{node1}", "skip": 1, "reply_lost": true}]"#,
    );
    assert_eq!(
        log.matches(") fails: Communication receive failure").count(),
        1,
        "{log}"
    );
    assert_eq!(apply_runs(&log), 1, "{log}");
}

/// Both nodes idle (node 0 in c2, node 1 in c1), the plugin loaded, and two held jobs
/// asking for a 4g.20gb: one the plugin routed there from `--gres=gpu:mig:1`, one the user
/// named it in. Returns the cluster, the two agents' GPUs, the routed job, the user's job
/// and the configuration of a central role going to c5 (no 4g).
fn held_jobs_on_the_4g() -> (Cluster, [Simulated; 2], u32, u32, PathBuf) {
    let mut opts = two_nodes();
    opts.job_submit_plugins = "smartmig".into();
    let mut c = Cluster::start(&opts);
    // 12 GB rules out 1g and 2g; due in 40 min, 3g needs 47 min and 4g 35: a 4g.
    let (routed, said) = c
        .sbatch(&[
            "--hold",
            "--gres=gpu:mig:1",
            "--time=20",
            "--comment=smartmig:class=bert-infer;gpumem=12G;due=40m",
            "--wrap",
            "sleep 1",
        ])
        .unwrap();
    assert!(said.contains("routed to gpu:4g.20gb:1"), "{said}");
    let (named, _) = c
        .sbatch(&["--hold", "--gres=gpu:4g.20gb:1", "--wrap", "sleep 1"])
        .unwrap();
    let s0 = start_agent(&mut c, 0, &[C2, C2], &[]);
    let s1 = start_agent(&mut c, 1, &[C1], &[]);
    wait_announced(&c);
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    (c, [s0, s1], routed, named, config)
}

/// [`held_jobs_on_the_4g`], then one central run to c5 with job updates failing as
/// `faults` (JSON) says; checks that the three GPUs changed and the user's job was left as
/// asked. Returns the cluster, the run's output, the routed job and the configuration.
fn vanish_a_routed_type(faults: &str) -> (Cluster, String, u32, PathBuf) {
    let (c, [s0, s1], routed, named, config) = held_jobs_on_the_4g();
    let out = run_central_under(&c, &config, faults);
    assert!(out.contains("3 changed"), "{out}\n{}", c.log_tails());
    assert_eq!(
        (sim_layout(&s0), sim_layout(&s1)),
        (format!("{C5} | {C5}"), C5.into())
    );
    common::wait_nodes_in_service(&c, &[]);
    assert_eq!(
        tres_per_node(&c, named),
        slurm::tres("gpu:4g.20gb:1"),
        "left as asked"
    );
    assert_consistent(&c, &[&s0, &s1], &[routed, named]);
    (c, out, routed, config)
}

#[test]
fn a_job_submitted_while_a_batch_removes_its_best_type_is_routed_to_a_type_that_stays() {
    skip_unless_netns!();
    let mut opts = two_nodes();
    opts.job_submit_plugins = "smartmig".into();
    let (mut c, jobs, s0) = start_with(&opts);
    // Node 1's 7g.40gb goes to c5, slowly; node 0's GPU 0 keeps its 4g (a running job).
    let s1 = start_agent(&mut c, 1, &[C1], &[]);
    s1.set_latency("create-ci", 3000).unwrap();
    wait_announced(&c);
    let config = central_config(&c, &TO_C5, "run/snapshot.json");
    let central = spawn_central(&c, &config);
    // The batch's first cycle publishes the snapshot.
    wait_until("the snapshot", Duration::from_secs(60), || {
        c.snapshot_path().exists()
    });
    // The plugin's watcher thread found no snapshot at its first read, a second after
    // slurmctld started; it says so when it reads the batch's.
    c.wait_ctld_log("snapshot usable again", 1);
    // 12 GB, due in 30 min: only a 7g.40gb meets it (a 4g needs 35 min, the fastest
    // after it); routed to the 7g now, the job would wait for a type about to go.
    let (job, said) = c
        .sbatch(&[
            "--gres=gpu:mig:1",
            "--time=20",
            "--comment=smartmig:class=bert-infer;gpumem=12G;due=30m",
            "--wrap",
            "sleep 1",
        ])
        .unwrap();
    let ledger = smartmigd::central::batch::Ledger::load(&c.dir.join("central")).unwrap();
    assert!(ledger.batch.is_some(), "submitted while the batch is in flight");
    assert!(said.contains("routed to gpu:4g.20gb:1"), "{said}");
    let out = finish(&c, central);
    assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
    assert_eq!((sim_layout(&s0), sim_layout(&s1)), (NODE0_C5.into(), C5.into()));
    c.wait_job(job, &["COMPLETED"], Duration::from_secs(60));
    assert_consistent(&c, &[&s0, &s1], &jobs.all());
}

fn tres_per_node(c: &Cluster, job: u32) -> String {
    c.job(job).get("TresPerNode").cloned().unwrap_or_default()
}

/// Whether this Slurm replaces a pending job's GPU request on update (else skips the test).
fn retypes_pending_jobs() -> bool {
    let yes = slurm::release().0 >= smartmigd::central::RETYPE_SINCE;
    if !yes {
        eprintln!("skipped: this Slurm keeps a pending job's old GPU type on update");
    }
    yes
}

/// Checks that `job` asks for a 3g.20gb, still carries the plugin's mark with what its
/// user asked, now naming the 3g (a later re-route finds it current), and, released,
/// completes on one.
fn runs_on_a_3g(c: &Cluster, job: u32, out: &str) {
    assert_eq!(tres_per_node(c, job), slurm::tres("gpu:3g.20gb:1"), "{out}");
    let now = c.job_tres(job);
    let mark = c.job(job).get("AdminComment").cloned().unwrap_or_default();
    let from = smartmig_core::routing::RoutedFrom::find_current(&mark, &now)
        .unwrap_or_else(|| panic!("no current mark after the re-route: {mark:?} {now:?}"));
    assert!(from.tres.iter().flatten().any(|t| t.contains(":mig")), "{mark}");
    c.scontrol(&["release", &job.to_string()]);
    c.wait_job(job, &["COMPLETED"], Duration::from_secs(60));
}

/// [`vanish_a_routed_type`] under `faults`, whose run must say `said` (`{job}`: the routed
/// job's id) and end with `summary`; then a second run without faults, ending with
/// `then`; then the routed job must run on a 3g.
fn reroute_across_two_runs(faults: &str, said: &str, summary: &str, then: &str) {
    let (c, out, routed, config) = vanish_a_routed_type(faults);
    let said = said.replace("{job}", &routed.to_string());
    assert!(out.contains(&said) && out.contains(summary), "{out}");
    let out = run_central(&c, &config, &[]);
    assert!(out.contains(then), "{out}");
    runs_on_a_3g(&c, routed, &out);
}

#[test]
fn a_reroute_slurmctld_refuses_is_reported_and_the_next_run_reroutes_the_job() {
    skip_unless_netns!();
    if !retypes_pending_jobs() {
        return;
    }
    // Re-routed once the batch is over (the run's last cycle, which reads Slurm settled;
    // mid-batch a type about to go still looks present): refused there, the job still asks
    // for the type that went, so the next run routes it again and Slurm takes it.
    reroute_across_two_runs(
        r#"[{"call": "update_job"}]"#,
        "cannot re-route job {job}: slurm_update_job({job}): refused (injected)",
        "0 job(s) re-routed, 1 error(s)",
        "1 job(s) re-routed, 0 error(s)",
    );
}

#[test]
fn a_reroute_whose_reply_was_lost_is_reported_as_uncertain_and_not_done_twice() {
    skip_unless_netns!();
    if !retypes_pending_jobs() {
        return;
    }
    // Slurm changes the job but the answer is lost: reported as uncertain; the job then
    // asks for a type that exists, so the next run leaves it.
    reroute_across_two_runs(
        r#"[{"call": "update_job", "reply_lost": true}]"#,
        "job {job}: re-routing to 3g.20gb may have taken effect",
        "0 job(s) re-routed, 1 error(s)",
        "0 job(s) re-routed, 0 error(s)",
    );
}

#[test]
fn before_slurm_23_02_6_the_last_4g_stays_while_a_routed_job_waits_for_it_and_goes_once_it_ran() {
    skip_unless_netns!();
    if slurm::release().0 >= smartmigd::central::RETYPE_SINCE {
        eprintln!("skipped: this Slurm replaces a pending job's GPU request on update");
        return;
    }
    let (c, [s0, s1], routed, named, config) = held_jobs_on_the_4g();
    // Any job update would be refused and counted as an error: the run must make none.
    let out = run_central_under(&c, &config, r#"[{"call": "update_job", "times": 99}]"#);
    let waits = format!("the last 4g.20gb, which routed job(s) {routed} wait for");
    assert!(
        out.contains("1 changed") && out.contains("0 job(s) re-routed, 0 error(s)") && out.contains(&waits),
        "{out}"
    );
    assert_eq!(
        (sim_layout(&s0), sim_layout(&s1)),
        (format!("{C2} | {C2}"), C5.into()),
        "node 0 keeps its 4g.20gb"
    );
    common::wait_nodes_in_service(&c, &[]);
    assert_eq!(tres_per_node(&c, routed), slurm::tres("gpu:4g.20gb:1"));
    // Released, it runs on a 4g; then node 0 changes too, though the user's own job
    // still asks for one.
    c.scontrol(&["release", &routed.to_string()]);
    c.wait_job(routed, &["COMPLETED"], Duration::from_secs(60));
    let out = run_central(&c, &config, &[]);
    assert!(out.contains("2 changed"), "{out}");
    assert_eq!(sim_layout(&s0), format!("{C5} | {C5}"));
    common::wait_nodes_in_service(&c, &[]);
    assert_eq!(
        tres_per_node(&c, named),
        slurm::tres("gpu:4g.20gb:1"),
        "left as asked"
    );
    assert_consistent(&c, &[&s0, &s1], &[named]);
}
