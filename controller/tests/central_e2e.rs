//! End to end: the central role and two node agents on a real Slurm (the shared harness:
//! munged, slurmctld, one slurmd per network namespace; the host's 22.05, or 24.11 with
//! `$SMARTMIG_SLURM_ROOT`, see scripts/e2e.sh), with simulated GPUs.
//!
//! The decision is forced through the real ONNX path: the test writes, with
//! `onnx_writer`, a one-layer policy whose logits send every configuration to c5
//! (3g.20gb@0 + 3g.20gb@4) with probability ≈ 1 (`decide::write_preferring`). Node 0
//! starts in c2 (4g.20gb + 3g.20gb) and runs a job on its 3g, which c5 keeps (the
//! node's GPU count stays 2: Slurm 22.05 kills running jobs when it changes); node 1
//! starts in c1 (7g.40gb). The test shows that
//! - a dry-run cycle changes nothing (no drain, no Extra, node file unchanged) and
//!   reports the decisions the real cycle then makes;
//! - the real cycle re-lays out both nodes with one slurmctld restart (22.05) or one
//!   reconfigure (23.11 and later: `relayout = "auto"`), and Slurm then sees
//!   `gpu:3g.20gb:2` on both;
//! - the job on the untouched 3g keeps running throughout (same job, never requeued);
//! - new jobs run on the new layout (3g.20gb on node 1, which had only a 7g).
//!
//! Needs root, Slurm and the node agent's simulated backend; skipped otherwise.

mod common;
#[path = "../../tests/slurm/mod.rs"]
mod slurm;

use std::time::Duration;

use common::{node_field, run_central, start_agent, two_nodes, Policy, C1, C2};
use slurm::Cluster;
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

#[test]
fn the_central_role_relayouts_idle_slices_on_two_nodes_and_running_jobs_survive() {
    skip_unless_netns!();
    let mut c = Cluster::start(&two_nodes());
    let nodes = c.nodes.clone();
    // The job on node 0's 3g, which c5 keeps.
    let (keep, _) = c
        .sbatch(&["-w", &nodes[0], "--gres=gpu:3g.20gb:1", "--wrap", "sleep 600"])
        .unwrap();
    c.wait_job(keep, &["RUNNING"], Duration::from_secs(20));
    let started = c.job(keep).get("StartTime").cloned().unwrap_or_default();
    start_agent(&mut c, 0, C2, &["3g.20gb@4"]);
    start_agent(&mut c, 1, C1, &[]);
    common::wait_announced(&c);
    let config = common::central_config(
        &c,
        &Policy::Onnx {
            prefer: 4,
            fallback: "\"c2\"",
        },
        "run/snapshot.json",
    );
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
    let path = if slurm::release().at_least(23, 11) {
        "reconfiguring Slurm for 2 node(s)"
    } else {
        "restarting slurmctld for 2 node(s)"
    };
    assert_eq!(out.matches(path).count(), 1, "one {path:?} for the batch: {out}");
    let real = Status::read(&c.dir.join("central")).unwrap();
    assert!(real.errors.is_empty(), "{:?}", real.errors);
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
