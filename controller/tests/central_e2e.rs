//! End to end: the central role and two node agents on a real Slurm 22.05 (the shared
//! harness: munged, slurmctld, one slurmd per network namespace), with simulated GPUs.
//!
//! The decision is forced through the real ONNX path: the test writes, with
//! `onnx_writer`, a one-layer policy whose logits send every configuration to c5
//! (3g.20gb@0 + 3g.20gb@4) with probability ≈ 1 (`decide::write_preferring`). Node 0
//! starts in c2 (4g.20gb + 3g.20gb) and runs a job on its 3g, which c5 keeps (the
//! node's GPU count stays 2: Slurm 22.05 kills running jobs when it changes); node 1
//! starts in c1 (7g.40gb). The test shows that
//! - a dry-run cycle changes nothing (no drain, no Extra, node file unchanged) and
//!   reports the decisions the real cycle then makes;
//! - the real cycle re-lays out both nodes with one slurmctld restart, and Slurm then
//!   sees `gpu:3g.20gb:2` on both;
//! - the job on the untouched 3g keeps running throughout (same job, never requeued);
//! - new jobs run on the new layout (3g.20gb on node 1, which had only a 7g).
//!
//! Needs root, Slurm and the node agent's simulated backend; skipped otherwise.

#[path = "../../tests/slurm/mod.rs"]
mod slurm;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use slurm::{Cluster, FakeGpu, Options};
use smartmig_core::config::{Config, Mode};
use smartmig_core::mig::Catalogue;
use smartmig_gpu::simulated::Simulated;
use smartmigd::central::decide::write_preferring;
use smartmigd::central::status::Status;

const BIN: &str = env!("CARGO_BIN_EXE_smartmigd");
const C2: &str = "4g.20gb@0 3g.20gb@4";

fn two_nodes() -> Options {
    Options {
        gpus: vec![FakeGpu(vec![("4g.20gb", 1), ("3g.20gb", 1)])],
        more_nodes: vec![vec![FakeGpu(vec![("7g.40gb", 1)])]],
        smartmig_toml: slurm::SMARTMIG_TOML.to_string(),
        job_submit_plugins: String::new(),
        etc_files: Vec::new(),
        extra_conf: String::new(),
        accounting: false,
    }
}

/// Starts node `i`'s agent on a simulated GPU in `layout` (the 3g busy when `busy_3g`).
fn start_agent(c: &mut Cluster, i: usize, layout: &str, busy_3g: bool) {
    let node = c.nodes[i].clone();
    let dir = c.dir.clone();
    let model = Catalogue::embedded().model("a100-40gb").unwrap().clone();
    let sim_dir = dir.join(format!("sim-{node}"));
    let sim = Simulated::create_layouts(&sim_dir, &model, &[layout]).unwrap();
    if busy_3g {
        sim.mark_busy(0, "3g.20gb@4").unwrap();
    }
    let (stop, start) = c.slurmd_scripts(i);
    let toml = format!(
        "version = 1\n[gpu]\nmodels = [\"a100-40gb\"]\n\
         [controller]\nstate_dir = \"{d}/agent-{node}\"\n\
         [node]\nname = \"{node}\"\nbackend = \"simulated\"\nsimulated_dir = \"{sim}\"\n\
         channel = \"slurm\"\ngres_conf = \"{d}/etc/gres-{node}.conf\"\n\
         slurmd_stop = [\"{stop}\"]\nslurmd_start = [\"{start}\"]\npoll_interval_s = 0.2\n",
        d = dir.display(),
        sim = sim_dir.display(),
        stop = stop.display(),
        start = start.display(),
    );
    let conf = dir.join(format!("etc/smartmig-{node}.toml"));
    std::fs::write(&conf, toml).unwrap();
    let mut cmd = c.in_node_ns(i, BIN);
    cmd.args(["node", "--config"]).arg(&conf).env("RUST_LOG", "debug");
    c.spawn_daemon(&format!("agent-{node}"), &mut cmd);
}

fn central_config(c: &Cluster) -> std::path::PathBuf {
    let d = c.dir.display();
    let text = format!(
        "version = 1\n[gpu]\nmodels = [\"a100-40gb\"]\n\
         [policy]\nkind = \"mean-field\"\nmodels_dir = \"{d}/policy\"\nstatic_layout = [\"c2\"]\n\
         [controller]\nmode = \"drain\"\nstate_dir = \"{d}/central\"\nsnapshot_path = \"{d}/run/snapshot.json\"\n\
         [controller.central]\nseed = 1\nreport_timeout_s = 60\nslurmctld_timeout_s = 30\n\
         nodes_include = \"{d}/etc/nodes.conf\"\nrestart_slurmctld = [\"{script}\"]\n",
        script = c.restart_slurmctld_script().display()
    );
    let path = c.dir.join("etc/central.toml");
    std::fs::write(&path, text).unwrap();
    std::fs::create_dir_all(c.dir.join("policy")).unwrap();
    let resolved = Config::from_file(&path).unwrap().resolve(None).unwrap();
    write_preferring(&resolved, 0, Mode::Drain, 4).unwrap();
    path
}

fn run_central(c: &Cluster, config: &Path, extra: &[&str]) -> String {
    let out = c
        .in_ctl_ns(BIN)
        .args(["central", "--once", "--config"])
        .arg(config)
        .args(extra)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "smartmigd central failed:\n{text}\n{}",
        c.log_tails()
    );
    text
}

fn node_field(c: &Cluster, node: &str, key: &str) -> String {
    let out = c.scontrol(&["show", "node", node, "-o"]);
    slurm::fields(&String::from_utf8_lossy(&out.stdout))
        .get(key)
        .cloned()
        .unwrap_or_default()
}

fn decisions(s: &Status) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = s
        .decisions
        .iter()
        .map(|d| (d.gpu.clone(), d.from.clone(), d.to.clone()))
        .collect();
    v.sort();
    v
}

#[test]
fn the_central_role_relayouts_idle_slices_on_two_nodes_and_running_jobs_survive() {
    skip_unless_slurm!();
    if Command::new("nsenter").arg("--version").output().is_err() {
        eprintln!("skipped: nsenter missing");
        return;
    }
    let mut c = Cluster::start(&two_nodes());
    let nodes = c.nodes.clone();
    // The job on node 0's 3g, which c5 keeps.
    let (keep, _) = c
        .sbatch(&["-w", &nodes[0], "--gres=gpu:3g.20gb:1", "--wrap", "sleep 600"])
        .unwrap();
    c.wait_job(keep, &["RUNNING"], Duration::from_secs(20));
    let started = c.job(keep).get("StartTime").cloned().unwrap_or_default();
    start_agent(&mut c, 0, C2, true);
    start_agent(&mut c, 1, "7g.40gb@0", false);
    c.wait_for("the agents' first reports", Duration::from_secs(30), |c| {
        nodes
            .iter()
            .all(|n| node_field(c, n, "Comment").contains("\"smartmig\""))
    });
    let config = central_config(&c);
    let nodes_conf = std::fs::read_to_string(c.dir.join("etc/nodes.conf")).unwrap();

    // Dry-run: the decisions, and nothing touched.
    let out = run_central(&c, &config, &["--dry-run"]);
    assert!(out.contains("2 changed (dry-run: would be)"), "{out}");
    let dry = Status::read(&c.dir.join("central")).unwrap();
    assert!(dry.decisions.iter().all(|d| d.action == "would apply"), "{dry:?}");
    for n in &nodes {
        assert!(node_field(&c, n, "Extra").is_empty(), "dry-run wrote {n}'s Extra");
        assert!(!c.node_state(n).contains("DRAIN"), "dry-run drained {n}");
    }
    assert_eq!(
        std::fs::read_to_string(c.dir.join("etc/nodes.conf")).unwrap(),
        nodes_conf
    );
    assert!(!c.snapshot_path().exists(), "dry-run published a snapshot");

    // The real cycle.
    let out = run_central(&c, &config, &[]);
    assert!(out.contains("2 changed"), "{out}\n{}", c.log_tails());
    let real = Status::read(&c.dir.join("central")).unwrap();
    let applied: Vec<_> = real.decisions.iter().filter(|d| d.action == "applied").collect();
    assert_eq!(applied.len(), 2, "{real:?}");
    assert_eq!(decisions(&dry), {
        let mut v: Vec<_> = applied
            .iter()
            .map(|d| (d.gpu.clone(), d.from.clone(), d.to.clone()))
            .collect();
        v.sort();
        v
    });
    for n in &nodes {
        c.wait_for("the node back to service", Duration::from_secs(30), |c| {
            !c.node_state(n).contains("DRAIN") && !c.node_state(n).contains("DOWN")
        });
        let gres = node_field(&c, n, "Gres");
        assert!(gres.starts_with("gpu:3g.20gb:2"), "{n}: {gres}");
    }
    // The job on the kept instance ran throughout.
    let job = c.job(keep);
    assert_eq!(
        job.get("JobState").map(String::as_str),
        Some("RUNNING"),
        "{job:?}"
    );
    assert_eq!(job.get("StartTime"), Some(&started), "never restarted");
    assert_eq!(job.get("Restarts").map(String::as_str), Some("0"));
    // New jobs run on the new type, on both nodes.
    for n in &nodes {
        let (j, _) = c
            .sbatch(&["-w", n, "--gres=gpu:3g.20gb:1", "--wrap", "sleep 1"])
            .unwrap_or_else(|e| panic!("submit on {n}: {e}"));
        c.wait_job(j, &["COMPLETED"], Duration::from_secs(30));
    }
    let snap = std::fs::read_to_string(c.snapshot_path()).unwrap();
    assert!(snap.contains("3g.20gb") && !snap.contains("7g.40gb"), "{snap}");
}
