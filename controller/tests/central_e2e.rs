//! End to end: the central role and two node agents on a real Slurm (the shared harness:
//! munged, slurmctld, one slurmd per network namespace; the host's 22.05, or 24.11 with
//! `$SMARTMIG_SLURM_ROOT`, see scripts/e2e.sh), on each GPU backend: simulated GPUs
//! (`simulated::...`) and NVML on the NVML test library (`nvml::...`).
//!
//! The decision is forced through the real ONNX path: the test writes, with
//! `onnx_writer`, a one-layer policy whose logits send every configuration to c5
//! (3g.20gb@0 + 3g.20gb@4) with probability ≈ 1 (`decide::write_preferring`). Node 0
//! has two GPUs in c2 (4g.20gb + 3g.20gb) and runs a job on GPU 0's 3g (Slurm IDX 0);
//! node 1 starts in c1 (7g.40gb). The test shows that
//! - a dry-run cycle changes nothing (no drain, no Extra, node file unchanged) and
//!   reports the decisions the real cycle then makes;
//! - node 0's GPU 0 waits: c5 would put a new 3g.20gb@0 at the running job's device
//!   index; its GPU 1 goes to c5 (its 3g come after the job's, and the node keeps 4
//!   instances: Slurm 22.05 kills running jobs when the count changes);
//! - the real cycle re-lays out both nodes with one slurmctld restart (22.05) or one
//!   reconfigure (23.11 and later: `relayout = "auto"`), and Slurm then sees node 0's
//!   3 × 3g.20gb + 4g.20gb and node 1's 2 × 3g.20gb;
//! - the job keeps running throughout (same job, never requeued), and its device index
//!   still names the instance it runs on;
//! - new jobs run on the new layout (3g.20gb on node 1, which had only a 7g).
//!
//! Needs root, Slurm and the node agent's simulated backend; skipped otherwise.

mod backends;
mod common;
#[path = "../../tests/slurm/mod.rs"]
mod slurm;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use backends::{Kind, TestGpus};
use common::{node_field, run_central, start_agent, start_agent_on, two_nodes, Policy, C1, C2, C5, NODE0_C5};
use slurm::Cluster;
use smartmig_gpu::simulated::Simulated;
use smartmigd::central::status::Status;

fn decisions(s: &Status) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = s
        .decisions
        .iter()
        .map(|d| (d.gpu.clone(), d.from.clone(), d.to.clone()))
        .collect();
    v.sort();
    v
}

on_both_backends!(the_central_role_relayouts_idle_slices_on_two_nodes_and_running_jobs_survive);

fn the_central_role_relayouts_idle_slices_on_two_nodes_and_running_jobs_survive(kind: Kind) {
    skip_unless_netns!();
    let mut c = Cluster::start(&two_nodes());
    let nodes = c.nodes.clone();
    // The job on node 0's first 3g: GPU 0's 3g.20gb@4.
    let (keep, _) = c
        .sbatch(&["-w", &nodes[0], "--gres=gpu:3g.20gb:1", "--wrap", "sleep 600"])
        .unwrap();
    c.wait_job(keep, &["RUNNING"], Duration::from_secs(20));
    let started = c.job(keep).get("StartTime").cloned().unwrap_or_default();
    let g0 = start_agent_on(&mut c, 0, kind, &[C2, C2], &["3g.20gb@4"]);
    let g1 = start_agent_on(&mut c, 1, kind, &[C1], &[]);
    common::wait_announced(&c);
    let config = common::central_config(
        &c,
        &Policy::Onnx {
            prefer: 4,
            fallback: "\"c2\"",
        },
        "run/snapshot.json",
    );
    let nodes_conf = std::fs::read_to_string(c.nodes_include()).unwrap();

    // Dry-run: the decisions, and nothing touched.
    let out = run_central(&c, &config, &["--dry-run"]);
    assert!(out.contains("2 changed (dry-run: would be)"), "{out}");
    let dry = Status::read(&c.dir.join("central")).unwrap();
    let shift =
        "skip: the job on 3g.20gb@4 of GPU 0 holds Slurm device index 0, which would name 3g.20gb@0 of GPU 0";
    let gpu0 = format!("{}/0", nodes[0]);
    for d in &dry.decisions {
        let want = if d.gpu == gpu0 {
            format!("would {shift}")
        } else {
            "would apply".into()
        };
        assert_eq!(d.action, want, "{dry:?}");
    }
    for n in &nodes {
        assert!(node_field(&c, n, "Extra").is_empty(), "dry-run wrote {n}'s Extra");
        assert!(!c.node_state(n).contains("DRAIN"), "dry-run drained {n}");
    }
    assert_eq!(std::fs::read_to_string(c.nodes_include()).unwrap(), nodes_conf);
    assert!(!c.snapshot_path().exists(), "dry-run published a snapshot");

    // The real cycle.
    let out = run_central(&c, &config, &[]);
    assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
    let path = if slurm::release().at_least(23, 11) {
        "reconfiguring Slurm for 2 node(s)"
    } else {
        "restarting slurmctld: "
    };
    assert_eq!(out.matches(path).count(), 1, "one {path:?} for the batch: {out}");
    let real = Status::read(&c.dir.join("central")).unwrap();
    assert!(real.errors.is_empty(), "{:?}", real.errors);
    let applied: Vec<_> = real.decisions.iter().filter(|d| d.action == "applied").collect();
    assert_eq!(applied.len(), 2, "{real:?}");
    assert!(
        real.decisions.iter().any(|d| d.gpu == gpu0 && d.action == shift),
        "{real:?}"
    );
    let mut would = dry.clone();
    would.decisions.retain(|d| d.action == "would apply");
    assert_eq!(decisions(&would), {
        let mut v: Vec<_> = applied
            .iter()
            .map(|d| (d.gpu.clone(), d.from.clone(), d.to.clone()))
            .collect();
        v.sort();
        v
    });
    for (n, want) in nodes.iter().zip(["gpu:3g.20gb:3,gpu:4g.20gb:1", "gpu:3g.20gb:2"]) {
        c.wait_for("the node back to service", Duration::from_secs(30), |c| {
            !c.node_state(n).contains("DRAIN") && !c.node_state(n).contains("DOWN")
        });
        let gres = node_field(&c, n, "Gres");
        assert!(gres.starts_with(want), "{n}: {gres}");
    }
    // The job on the kept instance ran throughout.
    assert_ran_throughout(&c, keep, &started);
    assert_eq!(g0.layouts(), NODE0_C5);
    assert_eq!(
        device_of(&c, keep, &nodes[0], &g0.layouts(), "3g.20gb"),
        (0, "3g.20gb@4".to_string()),
        "Slurm's index of the job still names GPU 0's 3g.20gb@4"
    );
    // New jobs run on the new type, on both nodes.
    for n in &nodes {
        let (j, _) = c
            .sbatch(&["-w", n, "--gres=gpu:3g.20gb:1", "--wrap", "sleep 1"])
            .unwrap_or_else(|e| panic!("submit on {n}: {e}"));
        c.wait_job(j, &["COMPLETED"], Duration::from_secs(30));
    }
    assert_eq!(g1.layout(0), C5);
    let snap = std::fs::read_to_string(c.snapshot_path()).unwrap();
    assert!(snap.contains("3g.20gb") && !snap.contains("7g.40gb"), "{snap}");
    // Node 1's agent serves its metrics on the default loopback port of its own host
    // (network namespace): the new layout, read from the device at scrape time.
    let out = c
        .in_node_ns(1, "bash", &[])
        .args([
            "-c",
            "exec 3<>/dev/tcp/127.0.0.1/9818; printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3",
        ])
        .output()
        .unwrap();
    let metrics = String::from_utf8_lossy(&out.stdout);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("smartmig_gpu_instances{gpu=\"0\"")
                && l.ends_with("profile=\"3g.20gb\"} 2")),
        "{metrics}"
    );
    assert!(!metrics.contains("7g.40gb"), "{metrics}");
}

/// Asserts job `job` is running, started at `started` and never restarted.
fn assert_ran_throughout(c: &Cluster, job: u32, started: &str) {
    let record = c.job(job);
    assert_eq!(
        record.get("JobState").map(String::as_str),
        Some("RUNNING"),
        "{record:?}"
    );
    assert_eq!(
        record.get("StartTime").map(String::as_str),
        Some(started),
        "never restarted"
    );
    assert_eq!(record.get("Restarts").map(String::as_str), Some("0"));
}

/// Slurm's device index (`IDX`) of running job `job`'s one GPU.
fn idx(c: &Cluster, job: u32) -> usize {
    let out = c.scontrol(&["-d", "show", "job", &job.to_string()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("GRES=gpu:")?.split_once("(IDX:"))
        .and_then(|(_, rest)| rest.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no IDX: {text}"))
}

/// The device (GPU position, instance) Slurm's `IDX` for running job `job` on `node` names,
/// by the central role's reading of the node's `Gres`, `layouts` (`|` between GPUs) and the
/// device order the agent recorded in the node's gres.conf block (none: GPU and placement
/// order); the job runs on a `ty`.
fn device_of(c: &Cluster, job: u32, node: &str, layouts: &str, ty: &str) -> (usize, String) {
    let idx = idx(c, job);
    let m = common::a100();
    let parsed: Vec<smartmig_core::mig::Layout> = layouts
        .split(" | ")
        .map(|l| smartmig_core::mig::Layout::parse(&m, l).unwrap())
        .collect();
    let names: Vec<Vec<String>> = parsed
        .iter()
        .map(|l| smartmigd::central::view::instance_types(&m, l))
        .collect();
    let pairs: Vec<_> = parsed
        .iter()
        .zip(&names)
        .map(|(l, n)| (l, n.as_slice()))
        .collect();
    let conf = std::fs::read_to_string(c.dir.join(format!("etc/gres-{node}.conf"))).unwrap();
    let within: Vec<(usize, smartmig_core::mig::Instance)> =
        smartmigd::node::gres::recorded_order(&conf, node)
            .unwrap()
            .iter()
            .map(|r| {
                let (gpu, label) = smartmigd::channel::parse_device_ref(r).unwrap();
                let l = &parsed[gpu as usize];
                let inst = l
                    .instances()
                    .iter()
                    .find(|i| smartmig_core::mig::layout::display_instance(&m, i) == label)
                    .unwrap_or_else(|| panic!("{r} is not in {layouts}"));
                (gpu as usize, *inst)
            })
            .collect();
    let mut listed = within.clone();
    listed.sort();
    let mut devices = smartmigd::central::view::node_devices(&parsed);
    devices.sort();
    assert!(
        within.is_empty() || listed == devices,
        "the recorded order {within:?} does not list each device of {layouts} once"
    );
    let order =
        smartmigd::central::view::slurm_index_order(&node_field(c, node, "Gres"), &pairs, &within).unwrap();
    let (gpu, inst) = order[idx].expect("a MIG device");
    assert_eq!(m.profiles[inst.profile].name, ty, "IDX {idx} names another type");
    (gpu, smartmig_core::mig::layout::display_instance(&m, &inst))
}

/// The device file slurmd gives a job holding `IDX` `idx` on `node`, as slurmd logged its
/// devices, in index order, when it last loaded gres.conf (`DebugFlags=Gres` at `verbose`:
/// `GRES: gpu device number N(PATH):...`); `count` is the node's GPU device count.
fn slurmd_file(c: &Cluster, node: &str, count: usize, idx: usize) -> String {
    let log = std::fs::read_to_string(c.dir.join(format!("log/slurmd-{node}.log"))).unwrap();
    let listed: Vec<&str> = log
        .lines()
        .filter_map(|l| {
            l.split_once("gpu device number ")?
                .1
                .split_once('(')?
                .1
                .split_once(')')
        })
        .map(|(path, _)| path)
        .collect();
    assert!(
        listed.len() >= count,
        "slurmd listed {} devices: {log}",
        listed.len()
    );
    listed[listed.len() - count + idx].to_string()
}

/// The simulated backend's device file of GPU `gpu`'s instance at `start`.
fn simulated_file(gpu: usize, start: u8) -> String {
    format!("nvidia{}", gpu * 8 + usize::from(start))
}

/// The site's own lines of a node's gres.conf, and its non-MIG GRES in slurm.conf.
const SITE_LINES: [&str; 3] = [
    "NodeName={node} AutoDetect=off",
    "NodeName=othernode Name=gpu Type=1g.5gb File=/dev/null",
    "# the site's comment stays too",
];

#[test]
fn a_site_gres_conf_keeps_autodetect_a_non_mig_gpu_and_other_nodes_lines_across_a_relayout() {
    skip_unless_netns!();
    // Node 0 has a whole (non-MIG) GPU beside its MIG one: a line of its own in gres.conf
    // and `gpu:a100:1` in its Gres, both the site's.
    let mut opts = two_nodes();
    opts.gpus[1] = slurm::FakeGpu(vec![("a100", 1)]);
    let mut c = Cluster::start(&opts);
    let n0 = c.nodes[0].clone();
    let own = c.dir.join(format!("etc/gres-{n0}.conf"));
    let mut text = std::fs::read_to_string(&own).unwrap();
    for l in SITE_LINES {
        text.push_str(&l.replace("{node}", &n0));
        text.push('\n');
    }
    std::fs::write(&own, &text).unwrap();
    let s0 = start_agent(&mut c, 0, &[C2], &[]);
    let s1 = start_agent(&mut c, 1, &[C1], &[]);
    common::wait_announced(&c);
    let config = common::central_config(&c, &Policy::Static("\"c5\""), "run/snapshot.json");
    let out = run_central(&c, &config, &[]);
    assert!(
        out.contains("2 changed") && out.contains("0 error(s)"),
        "{out}\n{}",
        c.log_tails()
    );
    let after = std::fs::read_to_string(&own).unwrap();
    for l in SITE_LINES {
        let l = l.replace("{node}", &n0);
        assert!(after.lines().any(|x| x == l), "{l:?} lost:\n{after}");
    }
    assert!(after.lines().any(|x| x.contains("Type=a100")), "{after}");
    assert!(
        std::fs::read_to_string(c.nodes_include())
            .unwrap()
            .contains("gpu:a100:1"),
        "the node's non-MIG GRES stays in slurm.conf"
    );
    c.wait_for("node 0 back in service", Duration::from_secs(30), |c| {
        !c.node_state(&n0).contains("DRAIN")
    });
    let gres = node_field(&c, &n0, "Gres");
    assert!(
        gres.contains("gpu:a100:1") && gres.contains("gpu:3g.20gb:2"),
        "{gres}"
    );
    let (j, _) = c
        .sbatch(&["-w", &n0, "--gres=gpu:a100:1", "--wrap", "true"])
        .unwrap();
    c.wait_job(j, &["COMPLETED"], Duration::from_secs(30));
    common::assert_consistent(&c, &[&s0, &s1], &[j]);
}

/// Writes node 0's `Gres` in the node file as an admin would (types in another order than
/// smartmigd's) and restarts slurmctld and its slurmd so that Slurm takes it.
fn set_gres(c: &Cluster, gres: &str) {
    let n0 = &c.nodes[0];
    let include = std::fs::read_to_string(c.nodes_include()).unwrap();
    let line = include
        .lines()
        .find(|l| l.starts_with(&format!("NodeName={n0} ")))
        .unwrap();
    let old_gres = line.split_whitespace().find(|w| w.starts_with("Gres=")).unwrap();
    std::fs::write(
        c.nodes_include(),
        include.replace(old_gres, &format!("Gres={gres}")),
    )
    .unwrap();
    let (stop, start) = c.slurmd_scripts(0);
    assert!(Command::new(&stop).status().unwrap().success());
    assert!(Command::new(c.restart_slurmctld_script())
        .status()
        .unwrap()
        .success());
    assert!(Command::new(&start).status().unwrap().success());
    c.wait_for("node 0 to register", Duration::from_secs(30), |c| {
        let s = c.node_state(n0);
        !s.contains('*') && !s.contains("DOWN") && !s.contains("INVAL")
    });
}

#[test]
fn slurm_numbers_devices_in_the_order_of_the_nodes_gres_as_the_central_role_reads_them() {
    skip_unless_netns!();
    // gres.conf lists 1g.5gb, 1g.5gb, 2g.10gb, 1g.5gb+me (placement order); the node's Gres
    // names them in another order, neither gres.conf's, alphabetical nor by name length.
    let mut opts = two_nodes();
    opts.gpus = vec![slurm::FakeGpu(vec![
        ("1g.5gb", 2),
        ("2g.10gb", 1),
        ("1g.5gb+me", 1),
    ])];
    let c = Cluster::start(&opts);
    let n0 = c.nodes[0].clone();
    set_gres(&c, "gpu:2g.10gb:1,gpu:1g.5gb+me:1,gpu:1g.5gb:2");
    let mut by_index = BTreeMap::new();
    for ty in ["1g.5gb", "1g.5gb", "2g.10gb", "1g.5gb+me"] {
        let (j, _) = c
            .sbatch(&["-w", &n0, &format!("--gres=gpu:{ty}:1"), "--wrap", "sleep 60"])
            .unwrap();
        c.wait_job(j, &["RUNNING"], Duration::from_secs(30));
        let out = c.scontrol(&["-d", "show", "job", &j.to_string()]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let idx: u32 = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("GRES=gpu:{ty}:1(IDX:")))
            .and_then(|rest| rest.trim_end_matches(')').parse().ok())
            .unwrap_or_else(|| panic!("no IDX for {ty}: {text}"));
        by_index.insert(idx, ty.to_string());
    }
    // What the central role computes from the node's Gres and the agent's layout.
    let m = common::a100();
    let layout = smartmig_core::mig::Layout::parse(&m, "1g.5gb@0 1g.5gb@1 2g.10gb@2 1g.5gb+me@6").unwrap();
    let names: Vec<String> = layout
        .instances()
        .iter()
        .map(|i| m.profiles[i.profile].name.clone())
        .collect();
    let order = smartmigd::central::view::slurm_index_order(
        &node_field(&c, &n0, "Gres"),
        &[(&layout, names.as_slice())],
        &[],
    )
    .unwrap();
    let computed: BTreeMap<u32, String> = order
        .iter()
        .enumerate()
        .map(|(k, d)| (k as u32, m.profiles[d.unwrap().1.profile].name.clone()))
        .collect();
    assert_eq!(
        by_index, computed,
        "Slurm's IDX of each type vs the central role's mapping"
    );
    assert_eq!(by_index[&0], "2g.10gb", "the Gres order, not gres.conf's");
}

/// Starts the agents (node 0: two GPUs in c2 with `busy` (GPU, instance) marked; node 1
/// in c1) and runs one preempt-mode cycle towards c5 for node 0's GPU 0 and node 1, c2 for
/// node 0's GPU 1; returns the agents' GPUs and the cycle's output.
fn preempt_cycle(c: &mut Cluster, busy: &[(u32, &str)], central: &str) -> (Simulated, Simulated, String) {
    preempt_cycle_to(c, busy, "\"c5\", \"c2\", \"c5\"", central)
}

/// [`preempt_cycle`] towards `layout` (node 0's GPUs, then node 1's).
fn preempt_cycle_to(
    c: &mut Cluster,
    busy: &[(u32, &str)],
    layout: &'static str,
    central: &str,
) -> (Simulated, Simulated, String) {
    preempt_cycle_with_faults(c, busy, layout, central, None)
}

/// What the central role's Slurm calls meet in a preempt cycle.
#[derive(Clone, Copy)]
enum Calls<'a> {
    /// Slurm as it is.
    AsTheyAre,
    /// Failing as this JSON of `SMARTMIGD_SLURM_FAULTS` says.
    Faults(&'a str),
    /// The first requeue held until the test has run this.
    BeforeTheRequeue(&'a dyn Fn(&Cluster)),
}

/// [`preempt_cycle_to`] with the central role's Slurm calls failing as `faults` (the
/// JSON of `SMARTMIGD_SLURM_FAULTS`) says.
fn preempt_cycle_with_faults(
    c: &mut Cluster,
    busy: &[(u32, &str)],
    layout: &'static str,
    central: &str,
    faults: Option<&str>,
) -> (Simulated, Simulated, String) {
    let calls = faults.map_or(Calls::AsTheyAre, Calls::Faults);
    preempt_cycle_meeting(c, busy, layout, central, calls)
}

/// [`preempt_cycle_to`] with the central role's Slurm calls meeting `calls`.
fn preempt_cycle_meeting(
    c: &mut Cluster,
    busy: &[(u32, &str)],
    layout: &'static str,
    central: &str,
    calls: Calls<'_>,
) -> (Simulated, Simulated, String) {
    let s0 = start_agent(c, 0, &[C2, C2], &[]);
    for (gpu, inst) in busy {
        s0.mark_busy(*gpu, inst).unwrap();
    }
    let s1 = start_agent(c, 1, &[C1], &[]);
    common::wait_announced(c);
    let policy = Policy::Static(layout);
    let config = common::central_config_with(c, &policy, "run/snapshot.json", central);
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("mode = \"drain\"", "mode = \"preempt\"")).unwrap();
    let mut cmd = common::central_command(c, &config, &[]);
    let gate = c.dir.join("run/requeue-gate");
    let faults = match calls {
        Calls::AsTheyAre => None,
        Calls::Faults(f) => Some(f.to_string()),
        Calls::BeforeTheRequeue(_) => Some(format!(
            r#"[{{"call": "requeue", "pause": "{}"}}]"#,
            gate.display()
        )),
    };
    if let Some(f) = faults {
        let path = c.dir.join("etc/slurm-faults.json");
        std::fs::write(&path, f).unwrap();
        cmd.env(smartmigd::slurm::faults::FAULTS_ENV, &path);
    }
    let Calls::BeforeTheRequeue(meanwhile) = calls else {
        let out = common::central_output(c, cmd.output().unwrap());
        return (s0, s1, out);
    };
    let central = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let reached = c.dir.join("run/requeue-gate.reached");
    let start = std::time::Instant::now();
    while !reached.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no requeue\n{}",
            c.log_tails()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    meanwhile(c);
    std::fs::write(&gate, "").unwrap();
    let out = common::central_output(c, central.wait_with_output().unwrap());
    (s0, s1, out)
}

#[test]
fn preempt_mode_requeues_a_job_whose_device_index_the_change_would_move_and_keeps_the_others() {
    requeue_a_job_whose_device_index_moves(None);
}

#[test]
fn preempt_mode_with_a_requeue_whose_reply_was_lost_requeues_the_job_once_and_keeps_the_others() {
    requeue_a_job_whose_device_index_moves(Some(r#"[{"call": "requeue", "reply_lost": true}]"#));
}

/// A preempt cycle on node 0 with a job whose device index the change moves (requeued
/// once) and one whose index it keeps (never requeued), the central role's Slurm calls
/// failing as `faults` says.
fn requeue_a_job_whose_device_index_moves(faults: Option<&str>) {
    skip_unless_netns!();
    let mut c = Cluster::start(&two_nodes());
    let n0 = c.nodes[0].clone();
    let submit = |c: &Cluster, ty: &str| -> u32 {
        let (j, _) = c
            .sbatch(&[
                "-w",
                &n0,
                &format!("--gres=gpu:{ty}:1"),
                "--requeue",
                "--wrap",
                "sleep 600",
            ])
            .unwrap();
        c.wait_job(j, &["RUNNING"], Duration::from_secs(20));
        j
    };
    // Node 0's devices: 3g.20gb of GPU 0 and 1 (IDX 0, 1), 4g.20gb of GPU 0 and 1 (2, 3).
    // A job on GPU 1's 4g.20gb (IDX 3: the first 4g is taken while it starts) and one on
    // GPU 0's 3g.20gb@4 (IDX 0).
    let filler = submit(&c, "4g.20gb");
    let kept = submit(&c, "4g.20gb");
    assert!(c.client("scancel", &[&filler.to_string()]).status.success());
    c.wait_job(filler, &["CANCELLED"], Duration::from_secs(20));
    let moved = submit(&c, "3g.20gb");
    assert_eq!(idx(&c, kept), 3);
    assert_eq!(idx(&c, moved), 0);
    // GPU 0 to c5 keeps its 3g.20gb@4 but puts a new 3g.20gb@0 at its index (0); GPU 1
    // stays in c2, and its 4g.20gb keeps index 3.
    let (s0, s1, out) = preempt_cycle_with_faults(
        &mut c,
        &[(0, "3g.20gb@4"), (1, "4g.20gb@0")],
        "\"c5\", \"c2\", \"c5\"",
        "",
        faults,
    );
    assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
    if faults.is_some() {
        assert!(out.contains("Slurm shows it off the node"), "{out}");
    }
    assert_eq!(common::sim_layout(&s0), format!("{C5} | {C2}"));
    let job = c.job(moved);
    assert_eq!(
        job.get("Restarts").map(String::as_str),
        Some("1"),
        "requeued: {job:?}"
    );
    common::assert_never_requeued(&c, kept);
    assert_eq!(idx(&c, kept), 3, "its index still names GPU 1's 4g.20gb@0");
    assert_eq!(
        device_of(&c, kept, &n0, &common::sim_layout(&s0), "4g.20gb"),
        (1, "4g.20gb@0".to_string())
    );
    common::assert_consistent(&c, &[&s0, &s1], &[kept]);
}

#[test]
fn preempt_mode_never_requeues_a_job_its_user_cancelled_just_before_the_requeue() {
    skip_unless_netns!();
    let mut c = Cluster::start(&two_nodes());
    let n0 = c.nodes[0].clone();
    // A job on GPU 0's 3g.20gb@4 (IDX 0), whose index the change to c5 moves: smartmigd
    // requeues it, and its user cancels it just before.
    let (job, _) = c
        .sbatch(&[
            "-w",
            &n0,
            "--gres=gpu:3g.20gb:1",
            "--requeue",
            "--wrap",
            "sleep 600",
        ])
        .unwrap();
    c.wait_job(job, &["RUNNING"], Duration::from_secs(20));
    assert_eq!(idx(&c, job), 0);
    let cancel = |c: &Cluster| {
        assert!(c.client("scancel", &[&job.to_string()]).status.success());
        c.wait_job(job, &["CANCELLED"], Duration::from_secs(20));
    };
    let (s0, s1, out) = preempt_cycle_meeting(
        &mut c,
        &[(0, "3g.20gb@4")],
        "\"c5\", \"c2\", \"c5\"",
        "",
        Calls::BeforeTheRequeue(&cancel),
    );
    assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
    assert_eq!(common::sim_layout(&s0), format!("{C5} | {C2}"));
    assert_eq!(common::sim_layout(&s1), C5);
    // Slurm requeues a finished batch job when asked: the user's cancel must stand.
    std::thread::sleep(Duration::from_secs(2));
    let after = c.job(job);
    assert_eq!(
        (
            after.get("JobState").map(String::as_str),
            after.get("Restarts").map(String::as_str)
        ),
        (Some("CANCELLED"), Some("0")),
        "{after:?}\n{out}"
    );
    common::wait_nodes_in_service(&c, &[]);
    common::assert_consistent(&c, &[&s0, &s1], &[]);
}

#[test]
fn preempt_mode_leaves_a_gpu_whose_jobs_slurm_cannot_requeue_to_the_drain_rules() {
    skip_unless_netns!();
    let mut c = Cluster::start(&two_nodes());
    let n0 = c.nodes[0].clone();
    // An interactive allocation on GPU 0's 3g.20gb@4 (IDX 0) and a batch job submitted with
    // --no-requeue on its 4g.20gb@0 (IDX 2): Slurm can requeue neither.
    let out = c.run_client(
        "salloc",
        &[
            "--no-shell",
            "-w",
            &n0,
            "--gres=gpu:3g.20gb:1",
            "--mem=10",
            "--time=30",
        ],
    );
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    let interactive: u32 = text
        .split_whitespace()
        .skip_while(|w| *w != "allocation")
        .nth(1)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("salloc: {text}"));
    c.wait_job(interactive, &["RUNNING"], Duration::from_secs(20));
    let (batch, _) = c
        .sbatch(&[
            "-w",
            &n0,
            "--gres=gpu:4g.20gb:1",
            "--no-requeue",
            "--wrap",
            "sleep 600",
        ])
        .unwrap();
    c.wait_job(batch, &["RUNNING"], Duration::from_secs(20));
    assert_eq!((idx(&c, interactive), idx(&c, batch)), (0, 2));
    // GPU 0 to c5 would destroy the 4g.20gb and put a new 3g.20gb@0 at IDX 0.
    let (s0, s1, out) = preempt_cycle(&mut c, &[(0, "3g.20gb@4"), (0, "4g.20gb@0")], "");
    assert!(out.contains("1 changed"), "{out}\n{}", c.log_tails());
    let status = Status::read(&c.dir.join("central")).unwrap();
    let gpu0 = format!("{n0}/0");
    let why = status
        .decisions
        .iter()
        .find(|d| d.gpu == gpu0)
        .map(|d| d.action.clone());
    assert_eq!(
        why.unwrap_or_default(),
        format!("skip: busy 4g.20gb@0 (Slurm cannot requeue job {interactive}, {batch}: interactive, --no-requeue or federated)"),
        "{status:?}"
    );
    assert_eq!(common::sim_layout(&s0), format!("{C2} | {C2}"));
    assert_eq!(common::sim_layout(&s1), C5);
    for j in [interactive, batch] {
        common::assert_never_requeued(&c, j);
    }
    assert_eq!((idx(&c, interactive), idx(&c, batch)), (0, 2));
    assert!(!node_field(&c, &n0, "State").contains("DRAIN"));
    common::assert_consistent(&c, &[&s0, &s1], &[interactive, batch]);
}

#[test]
fn preempt_mode_with_a_run_time_limit_leaves_a_job_that_ran_longer_on_its_device() {
    skip_unless_netns!();
    let mut c = Cluster::start(&two_nodes());
    // A requeueable job on GPU 0's 3g.20gb@4 (IDX 0), older than the limit (20 s) when
    // the cycle runs. GPU 0 to c5 would put a new 3g.20gb@0 at its index: without the
    // limit the job is requeued (the test above); with it the GPU waits.
    let job = old_job(&c, "3g.20gb", 0, 20);
    let (s0, s1, out) = preempt_cycle(&mut c, &[(0, "3g.20gb@4")], "requeue_max_run_s = 20\n");
    assert!(out.contains("1 changed"), "{out}\n{}", c.log_tails());
    let why = node0_decision(&c, 0);
    assert!(
        why.starts_with("skip: the job on 3g.20gb@4 of GPU 0 holds Slurm device index 0")
            && why.ends_with(&format!("(job {job} ran longer than requeue_max_run_s = 20 s)")),
        "{why}"
    );
    assert_old_job_kept(&c, &s0, &s1, job, 0);
}

/// A requeueable job on a `ty` of node 0, checked at Slurm device index `idx_expected`,
/// once it has run longer than `limit_s`.
fn old_job(c: &Cluster, ty: &str, idx_expected: usize, limit_s: u64) -> u32 {
    let n0 = c.nodes[0].clone();
    let (job, _) = c
        .sbatch(&[
            "-w",
            &n0,
            &format!("--gres=gpu:{ty}:1"),
            "--requeue",
            "--wrap",
            "sleep 600",
        ])
        .unwrap();
    c.wait_job(job, &["RUNNING"], Duration::from_secs(20));
    assert_eq!(idx(c, job), idx_expected);
    std::thread::sleep(Duration::from_secs(limit_s + 2));
    job
}

/// After a preempt cycle that held `job` (past `requeue_max_run_s`): node 0 unchanged,
/// node 1 changed, the job never requeued and still at Slurm device index `idx_expected`.
fn assert_old_job_kept(c: &Cluster, s0: &Simulated, s1: &Simulated, job: u32, idx_expected: usize) {
    assert_eq!(common::sim_layout(s0), format!("{C2} | {C2}"));
    assert_eq!(common::sim_layout(s1), C5);
    common::assert_never_requeued(c, job);
    assert_eq!(idx(c, job), idx_expected);
    common::assert_consistent(c, &[s0, s1], &[job]);
}

/// The central role's decision for node 0's GPU `gpu` in its status file.
fn node0_decision(c: &Cluster, gpu: u32) -> String {
    let status = Status::read(&c.dir.join("central")).unwrap();
    let name = format!("{}/{gpu}", c.nodes[0]);
    status
        .decisions
        .iter()
        .find(|d| d.gpu == name)
        .map(|d| d.action.clone())
        .unwrap_or_else(|| panic!("no decision for {name}: {status:?}"))
}

#[test]
fn preempt_mode_with_a_run_time_limit_does_not_destroy_the_instance_of_a_job_that_ran_longer() {
    skip_unless_netns!();
    let mut c = Cluster::start(&two_nodes());
    // GPU 0's 4g.20gb@0 (IDX 2), which GPU 0 to c5 destroys; the limit is 20 s.
    let job = old_job(&c, "4g.20gb", 2, 20);
    let (s0, s1, out) = preempt_cycle(&mut c, &[(0, "4g.20gb@0")], "requeue_max_run_s = 20\n");
    assert!(out.contains("1 changed"), "{out}\n{}", c.log_tails());
    assert_eq!(
        node0_decision(&c, 0),
        format!("skip: busy 4g.20gb@0 (job {job} ran longer than requeue_max_run_s = 20 s)")
    );
    assert_old_job_kept(&c, &s0, &s1, job, 2);
}

#[test]
fn preempt_mode_with_a_run_time_limit_keeps_the_gpu_count_of_a_node_whose_job_ran_longer() {
    skip_unless_netns!();
    let mut c = Cluster::start(&two_nodes());
    // GPU 0's 3g.20gb@4 (IDX 0), on no GPU that changes; GPU 1 c2 → c6 takes the node
    // from 4 to 5 devices, and Slurm would requeue every job of a node whose count changes.
    let job = old_job(&c, "3g.20gb", 0, 20);
    let (s0, s1, out) = preempt_cycle_to(
        &mut c,
        &[(0, "3g.20gb@4")],
        "\"c2\", \"c6\", \"c5\"",
        "requeue_max_run_s = 20\n",
    );
    assert!(out.contains("1 changed"), "{out}\n{}", c.log_tails());
    assert_eq!(
        node0_decision(&c, 1),
        format!(
            "skip: the node's GPU count would change under running jobs \
             (job {job} ran longer than requeue_max_run_s = 20 s)"
        )
    );
    assert_old_job_kept(&c, &s0, &s1, job, 0);
}

#[test]
fn a_nodes_gres_type_order_is_kept_across_a_relayout_so_a_busy_device_keeps_its_index() {
    skip_unless_netns!();
    let mut c = Cluster::start(&two_nodes());
    let n0 = c.nodes[0].clone();
    // The admin's Gres lists 4g.20gb first: the job on GPU 0's 4g.20gb@0 holds IDX 0.
    set_gres(&c, "gpu:4g.20gb:2,gpu:3g.20gb:2");
    let (job, _) = c
        .sbatch(&["-w", &n0, "--gres=gpu:4g.20gb:1", "--wrap", "sleep 600"])
        .unwrap();
    c.wait_job(job, &["RUNNING"], Duration::from_secs(20));
    assert_eq!(idx(&c, job), 0);
    let s0 = start_agent(&mut c, 0, &[C2, C2], &["4g.20gb@0"]);
    let s1 = start_agent(&mut c, 1, &[C1], &[]);
    common::wait_announced(&c);
    // GPU 1 to c5: written by type name, 3g.20gb would come first and take IDX 0.
    let config = common::central_config(&c, &Policy::Static("\"c2\", \"c5\", \"c5\""), "run/snapshot.json");
    let out = run_central(&c, &config, &[]);
    assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
    assert_eq!(common::sim_layout(&s0), format!("{C2} | {C5}"));
    assert_eq!(node_field(&c, &n0, "Gres"), "gpu:4g.20gb:1,gpu:3g.20gb:3");
    assert!(!out.contains("written as slurmctld has it"), "{out}");
    common::assert_never_requeued(&c, job);
    assert_eq!(
        device_of(&c, job, &n0, &common::sim_layout(&s0), "4g.20gb"),
        (0, "4g.20gb@0".to_string())
    );
    common::assert_consistent(&c, &[&s0, &s1], &[job]);
}

/// The central role's configuration file with `policy` (a static layout) and padding.
fn padded_config(c: &Cluster, policy: &'static str) -> std::path::PathBuf {
    common::central_config_with(
        c,
        &Policy::Static(policy),
        "run/snapshot.json",
        "padding = true\n",
    )
}

/// The GPU devices of node `n` in Slurm, padding included.
fn gpu_total(c: &Cluster, n: &str) -> u32 {
    smartmigd::slurm::parse_gres(&node_field(c, n, "Gres"), "Gres")
        .unwrap()
        .iter()
        .map(|e| e.count)
        .sum()
}

/// Waits until every node of `c` is out of DRAIN and DOWN.
fn back_in_service(c: &Cluster) {
    for n in &c.nodes {
        c.wait_for("the node back in service", Duration::from_secs(30), |c| {
            !c.node_state(n).contains("DRAIN") && !c.node_state(n).contains("DOWN")
        });
    }
}

/// Padding (`[controller.central] padding = true`): both nodes get padded blocks at a first
/// re-layout while idle; then, with a job running on one of node 0's 3g.20gb, node 0's
/// GPU 1 goes c2 → c6, from 2 to 3 instances. Without
/// padding that change waits for an idle node (Slurm requeues running jobs when a node's
/// GPU count changes); with it the total and the job's index stay, the change is made
/// under the running job, and the job runs on, never requeued.
#[test]
fn with_padding_a_busy_nodes_instance_count_changes_and_its_running_job_keeps_running() {
    skip_unless_netns!();
    let mut c = Cluster::start(&two_nodes());
    let nodes = c.nodes.clone();
    let g0 = start_agent_on(&mut c, 0, Kind::Simulated, &[C2, C2], &[]);
    let _g1 = start_agent_on(&mut c, 1, Kind::Simulated, &[C1], &[]);
    common::wait_announced(&c);
    let total = |n: &str| gpu_total(&c, n);
    let padded = |policy| padded_config(&c, policy);

    // Idle: node 0's GPU 0 and node 1 go to c5, and both nodes are padded.
    let out = run_central(&c, &padded("\"c5\", \"c2\""), &[]);
    assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
    // The cycle after the batch finds the node file as slurmctld has it: nothing rewritten.
    assert!(!out.contains("written as slurmctld has it"), "{out}");
    back_in_service(&c);
    // An A100 holds 14 devices of blocks (c1..c12): 28 on node 0, 14 on node 1.
    assert_eq!(
        (total(&nodes[0]), total(&nodes[1])),
        (28, 14),
        "{}",
        node_field(&c, &nodes[0], "Gres")
    );
    let gres = node_field(&c, &nodes[0], "Gres");
    assert!(gres.contains("gpu:3g.20gb:3,gpu:pad-3g.20gb:1"), "{gres}");
    let conf = gres_conf(&c, &nodes[0]);
    assert!(conf.contains("# padding blocks:"), "{conf}");
    assert_eq!(conf.matches("Type=pad-").count(), 28 - 4, "{conf}");

    // A job on one of node 0's 3g.20gb (GPU 1's is kept by c6, and no new 3g.20gb comes
    // before any of them).
    let (keep, _) = c
        .sbatch(&["-w", &nodes[0], "--gres=gpu:3g.20gb:1", "--wrap", "sleep 600"])
        .unwrap();
    c.wait_job(keep, &["RUNNING"], Duration::from_secs(20));
    let started = c.job(keep).get("StartTime").cloned().unwrap_or_default();
    let before = idx(&c, keep);
    let device = device_of(&c, keep, &nodes[0], &g0.layouts(), "3g.20gb");

    // Node 0's GPU 1 c2 → c6 under the running job.
    let out = run_central(&c, &padded("\"c5\", \"c6\""), &[]);
    assert!(out.contains("1 changed"), "{out}\n{}", c.log_tails());
    let status = Status::read(&c.dir.join("central")).unwrap();
    assert!(status.errors.is_empty(), "{:?}", status.errors);
    c.wait_for("node 0 back in service", Duration::from_secs(30), |c| {
        !c.node_state(&nodes[0]).contains("DRAIN")
    });
    assert_eq!(g0.layouts(), format!("{C5} | 2g.10gb@0 2g.10gb@2 3g.20gb@4"));
    assert_eq!(total(&nodes[0]), 28, "the padded total stays");
    let gres = node_field(&c, &nodes[0], "Gres");
    assert!(gres.contains("gpu:2g.10gb:2,gpu:pad-2g.10gb:4"), "{gres}");
    assert_ran_throughout(&c, keep, &started);
    assert_eq!(idx(&c, keep), before);
    assert_eq!(
        device_of(&c, keep, &nodes[0], &g0.layouts(), "3g.20gb"),
        device,
        "Slurm's index of the job still names its instance"
    );
    // The new type takes jobs.
    let (j, _) = c
        .sbatch(&["-w", &nodes[0], "--gres=gpu:2g.10gb:1", "--wrap", "sleep 1"])
        .unwrap();
    c.wait_job(j, &["COMPLETED"], Duration::from_secs(30));
    // Padding turned off: taking the padding away would change the busy node's total and
    // move the job's index (the padding before its block goes), so the change waits.
    let unpadded = common::central_config(&c, &Policy::Static("\"c5\", \"c2\""), "run/snapshot.json");
    let out = run_central(&c, &unpadded, &[]);
    assert!(out.contains("0 changed"), "{out}");
    let status = Status::read(&c.dir.join("central")).unwrap();
    let gpu1 = format!("{}/1", nodes[0]);
    assert!(
        status
            .decisions
            .iter()
            .any(|d| d.gpu == gpu1 && d.action.contains(&format!("holds Slurm device index {before}"))),
        "{status:?}"
    );
    assert_eq!(total(&nodes[0]), 28);
    assert_eq!(c.job(keep).get("JobState").map(String::as_str), Some("RUNNING"));
}

/// The device order of node 0's padded gres.conf in c2 | c5 with no job placed: GPU and
/// placement order.
const ORDER_C2_C5: &str = "0:3g.20gb@4 1:3g.20gb@0 1:3g.20gb@4 0:4g.20gb@0";

/// A running job as Slurm, smartmig and slurmd see it: Slurm's index (`IDX`), the device
/// (GPU, instance) the central role reads it as, and the device file slurmd gives it.
type Seen = (usize, (usize, String), String);

/// Node 0 padded in c2 | c5 (node 1 in c2), a job running on each of node 0's three
/// 3g.20gb; slurmd lists its devices (`DebugFlags=Gres` at `verbose`).
struct ThreeJobs {
    c: Cluster,
    g0: TestGpus,
    g1: TestGpus,
    /// Node 0's GPU devices in Slurm, padding included.
    count: usize,
    jobs: Vec<u32>,
    /// Each job as [`ThreeJobs::seen`] before any change.
    before: Vec<Seen>,
    /// Each job's start time.
    started: Vec<String>,
}

impl ThreeJobs {
    fn start() -> ThreeJobs {
        let mut opts = two_nodes();
        opts.extra_conf = "SlurmdDebug=verbose\nDebugFlags=Gres\n".into();
        let mut c = Cluster::start(&opts);
        let n0 = c.nodes[0].clone();
        let g0 = start_agent_on(&mut c, 0, Kind::Simulated, &[C2, C2], &[]);
        let g1 = start_agent_on(&mut c, 1, Kind::Simulated, &[C1], &[]);
        common::wait_announced(&c);
        // Idle: node 0's GPU 1 goes to c5 (node 1 to c2) and both nodes are padded; with
        // no job running, the devices are in GPU and placement order.
        let out = run_central(&c, &padded_config(&c, "\"c2\", \"c5\""), &[]);
        assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
        back_in_service(&c);
        assert_eq!(g0.layouts(), format!("{C2} | {C5}"));
        let conf = gres_conf(&c, &n0);
        assert!(
            conf.contains(&format!("# device order: {ORDER_C2_C5}\n")),
            "{conf}"
        );
        let count = gpu_total(&c, &n0) as usize;
        assert_eq!(count, 28, "two A100s' blocks");
        let mut t = ThreeJobs {
            c,
            g0,
            g1,
            count,
            jobs: Vec::new(),
            before: Vec::new(),
            started: Vec::new(),
        };
        for _ in 0..3 {
            let (j, _) =
                t.c.sbatch(&["-w", &n0, "--gres=gpu:3g.20gb:1", "--wrap", "sleep 600"])
                    .unwrap();
            t.c.wait_job(j, &["RUNNING"], Duration::from_secs(20));
            t.jobs.push(j);
        }
        t.before = t.jobs.iter().map(|&j| t.seen(j)).collect();
        t.started = t
            .jobs
            .iter()
            .map(|&j| t.c.job(j).get("StartTime").cloned().unwrap_or_default())
            .collect();
        let mut devices: Vec<_> = t.before.iter().map(|b| b.1.clone()).collect();
        devices.sort();
        assert_eq!(
            devices,
            [
                (0, "3g.20gb@4".to_string()),
                (1, "3g.20gb@0".to_string()),
                (1, "3g.20gb@4".to_string())
            ]
        );
        t
    }

    /// Job `j` on node 0 as Slurm, smartmig and slurmd see it; asserts that the device
    /// smartmig reads its index as is the one whose file slurmd gives it.
    fn seen(&self, j: u32) -> Seen {
        let (c, n0) = (&self.c, &self.c.nodes[0]);
        let device = device_of(c, j, n0, &self.g0.layouts(), "3g.20gb");
        let start: u8 = device.1.rsplit('@').next().unwrap().parse().unwrap();
        let file = slurmd_file(c, n0, self.count, idx(c, j));
        assert!(
            file.ends_with(&format!("/{}", simulated_file(device.0, start))),
            "job {j}: IDX {} is {file} to slurmd, {device:?} to smartmig",
            idx(c, j)
        );
        (idx(c, j), device, file)
    }

    /// Asserts that every job runs on, never restarted, on the index, instance and device
    /// file it had at the start.
    fn assert_jobs_kept_their_devices(&self) {
        for ((&j, was), started) in self.jobs.iter().zip(&self.before).zip(&self.started) {
            assert_ran_throughout(&self.c, j, started);
            assert_eq!(
                &self.seen(j),
                was,
                "job {j} keeps its index, instance and device file"
            );
        }
    }
}

/// Node `node`'s gres.conf.
fn gres_conf(c: &Cluster, node: &str) -> String {
    std::fs::read_to_string(c.dir.join(format!("etc/gres-{node}.conf"))).unwrap()
}

/// With padding, gres.conf keeps each busy device's position within its type across
/// re-layouts (`smartmig_core::mig::device_order`): three jobs run on node 0's three
/// 3g.20gb, and GPU 0 goes c2 → c5, adding a 3g.20gb@0 that GPU and placement order would
/// put before all of them (so the change would wait for them). With the busy ones kept in
/// place, the new instance takes the fourth position, the change is made under the running
/// jobs, and each job's index still names its instance: by the central role's reading, and
/// by slurmd's own listing of its devices in index order (`DebugFlags=Gres`), before and
/// after.
#[test]
fn with_padding_a_new_instance_before_busy_ones_of_its_type_leaves_their_indices_and_devices() {
    skip_unless_netns!();
    let t = ThreeJobs::start();
    let (c, n0) = (&t.c, &t.c.nodes[0]);
    // Node 0's GPU 0 c2 → c5 under the three jobs (its 4g.20gb is idle): GPU and placement
    // order would give the new 3g.20gb@0 the first place; the busy ones keep theirs and it
    // takes the fourth.
    let out = run_central(c, &padded_config(c, "\"c5\", \"c5\""), &[]);
    assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
    let status = Status::read(&c.dir.join("central")).unwrap();
    assert!(status.errors.is_empty(), "{:?}", status.errors);
    back_in_service(c);
    assert_eq!(t.g0.layouts(), format!("{C5} | {C5}"));
    let conf = gres_conf(c, n0);
    assert!(
        conf.contains("# device order: 0:3g.20gb@4 1:3g.20gb@0 1:3g.20gb@4 0:3g.20gb@0\n"),
        "{conf}"
    );
    t.assert_jobs_kept_their_devices();
    // The new instance takes jobs at the fourth index, on its own device file.
    let (j, _) = c
        .sbatch(&["-w", n0, "--gres=gpu:3g.20gb:1", "--wrap", "sleep 600"])
        .unwrap();
    c.wait_job(j, &["RUNNING"], Duration::from_secs(20));
    let (_, device, _) = t.seen(j);
    assert_eq!(device, (0, "3g.20gb@0".to_string()));
}

/// With padding, a batch Slurm does not take once the nodes installed their new gres.conf
/// (22.05: the slurmctld restart fails; 23.11 and later: the reconfigure is refused): the
/// nodes are reverted and held, node 0's gres.conf is back with the device order from
/// before, which its agent reports, and every job keeps its index, instance and device
/// file (slurmd's own list: on 22.05 slurmd was stopped for the change and started again
/// with the file put back). Resumed by the admin, the next run makes the change from there.
#[test]
fn with_padding_a_batch_slurm_refuses_after_install_puts_the_device_order_back_and_the_jobs_keep_their_devices(
) {
    skip_unless_netns!();
    let t = ThreeJobs::start();
    let (c, n0) = (&t.c, &t.c.nodes[0]);
    let (restart, faults, why) = if slurm::release().at_least(23, 11) {
        (
            String::new(),
            r#"[{"call": "reconfigure"}]"#,
            "refused (injected)",
        )
    } else {
        let wrapper = common::restart_wrapper(c, "restart-fails-once", common::RESTART_FAILS_ONCE);
        (
            format!("restart_slurmctld = [\"{}\"]\n", wrapper.display()),
            "[]",
            "restart-fails-once.sh` failed",
        )
    };
    let config = common::central_config_with(
        c,
        &Policy::Static("\"c5\", \"c5\""),
        "run/snapshot.json",
        &format!("padding = true\n{restart}"),
    );
    let out = common::run_central_under(c, &config, faults);
    assert!(out.contains("0 changed"), "{out}\n{}", c.log_tails());
    assert_eq!(t.g0.layouts(), format!("{C2} | {C5}"), "node 0's GPUs reverted");
    let conf = gres_conf(c, n0);
    assert!(
        conf.contains(&format!("# device order: {ORDER_C2_C5}\n")),
        "{conf}"
    );
    common::assert_safe_on(c, &[&t.g0, &t.g1], &t.jobs, &[(0, why), (1, why)]);
    let comment = node_field(c, n0, "Comment");
    let report: smartmigd::channel::Report = smartmigd::channel::parse(Some(&comment), "Comment")
        .unwrap()
        .expect("node 0's report");
    assert_eq!(
        report.gres_order.join(" "),
        ORDER_C2_C5,
        "the agent reports the order put back"
    );
    t.assert_jobs_kept_their_devices();

    // The admin resumes the nodes: the next run makes the change, the jobs on their devices.
    for n in &c.nodes {
        c.scontrol(&["update", &format!("nodename={n}"), "state=resume"]);
    }
    let out = run_central(c, &config, &[]);
    assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
    back_in_service(c);
    assert_eq!(t.g0.layouts(), format!("{C5} | {C5}"));
    t.assert_jobs_kept_their_devices();
}

/// With padding, a gres.conf whose recorded device order names a device the node no
/// longer has (edited by hand, or written before a GPU was re-laid out by hand): no index
/// can be placed by it. With jobs on node 0's 3g.20gb the change to node 0 waits, naming
/// the order, and the jobs keep their devices; once the node is idle the change goes ahead
/// and the new file is in GPU and placement order.
#[test]
fn with_padding_a_recorded_order_naming_a_vanished_device_holds_a_busy_nodes_change_and_lets_an_idle_ones_go()
{
    skip_unless_netns!();
    let t = ThreeJobs::start();
    let (c, n0) = (&t.c, &t.c.nodes[0]);
    let path = c.dir.join(format!("etc/gres-{n0}.conf"));
    let conf = gres_conf(c, n0);
    let stale = ORDER_C2_C5.replace("1:3g.20gb@0", "1:1g.5gb@0");
    std::fs::write(
        &path,
        conf.replace(
            &format!("# device order: {ORDER_C2_C5}\n"),
            &format!("# device order: {stale}\n"),
        ),
    )
    .unwrap();
    c.wait_for(
        "node 0's agent to report the edited order",
        Duration::from_secs(30),
        |c| node_field(c, n0, "Comment").contains("1:1g.5gb@0"),
    );

    let config = padded_config(c, "\"c5\", \"c5\"");
    let out = run_central(c, &config, &[]);
    assert!(
        out.contains("1 changed"),
        "node 1 goes on: {out}\n{}",
        c.log_tails()
    );
    let status = Status::read(&c.dir.join("central")).unwrap();
    let gpu0 = format!("{n0}/0");
    assert!(
        status.decisions.iter().any(|d| d.gpu == gpu0
            && d.action.starts_with("skip")
            && d.action.contains("gres.conf order does not list the devices")),
        "{:?}",
        status.decisions
    );
    back_in_service(c);
    assert_eq!(t.g0.layouts(), format!("{C2} | {C5}"), "node 0 unchanged");
    assert!(gres_conf(c, n0).contains(&stale), "node 0's gres.conf untouched");
    common::assert_safe_on(c, &[&t.g0, &t.g1], &t.jobs, &[]);
    // (The recorded order no longer describes the lines, so the jobs are checked by
    // slurmd's own list: the same index, the same device file.)
    for ((&j, was), started) in t.jobs.iter().zip(&t.before).zip(&t.started) {
        assert_ran_throughout(c, j, started);
        assert_eq!(idx(c, j), was.0, "job {j}'s index");
        assert_eq!(slurmd_file(c, n0, t.count, was.0), was.2, "job {j}'s device file");
    }

    // Idle, the change goes ahead, in GPU and placement order.
    for &j in &t.jobs {
        assert!(c.client("scancel", &[&j.to_string()]).status.success());
    }
    for &j in &t.jobs {
        c.wait_job(j, &["CANCELLED"], Duration::from_secs(30));
    }
    let out = run_central(c, &config, &[]);
    assert!(out.contains("1 changed"), "{out}\n{}", c.log_tails());
    back_in_service(c);
    assert_eq!(t.g0.layouts(), format!("{C5} | {C5}"));
    let conf = gres_conf(c, n0);
    assert!(
        conf.contains("# device order: 0:3g.20gb@0 0:3g.20gb@4 1:3g.20gb@0 1:3g.20gb@4\n"),
        "{conf}"
    );
    common::assert_safe_on(c, &[&t.g0, &t.g1], &[], &[]);
    // A new job's index names its device, to smartmig and to slurmd.
    let (j, _) = c
        .sbatch(&["-w", n0, "--gres=gpu:3g.20gb:1", "--wrap", "sleep 600"])
        .unwrap();
    c.wait_job(j, &["RUNNING"], Duration::from_secs(20));
    t.seen(j);
}
