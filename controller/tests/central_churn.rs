//! Churn: jobs arrive and are cancelled every fraction of a second while a policy that
//! changes its mind at every decision runs in the long-running central role. The minimum
//! interval between re-layouts bounds slurmctld's restarts, and no job is lost.
//!
//! Time is compressed: decisions every second and `min_relayout_interval_s = 20` over
//! 75 s stand for a day at the default 900 s (96 batches at most); without the interval
//! the policy would start a batch at almost every decision.
//!
//! Needs root, Slurm, nsenter and ONNX Runtime (for the learned policy); skipped otherwise.

mod backends;
mod common;
#[path = "../../tests/slurm/mod.rs"]
mod slurm;

use std::time::{Duration, Instant};

use common::{central_config_with, smartmigd, start_agent, two_nodes, wait_announced, Policy, C1, C2};
use rand::SeedableRng as _;
use slurm::Cluster;
use smartmig_core::config::{Config, Mode};
use smartmig_policy::{onnx_writer, Activation, PolicyNetwork};
use smartmigd::central::decide::{expected_metadata, policy_path};
use smartmigd::central::status::Status;

const RUN: Duration = Duration::from_secs(75);
const INTERVAL_S: u64 = 20;

#[test]
fn job_churn_under_a_fickle_policy_restarts_slurmctld_no_more_than_the_interval_allows_and_loses_no_job() {
    skip_unless_netns!();
    if smartmig_policy::OnnxRuntime::init(None).is_err() {
        eprintln!("skipped: no ONNX Runtime here");
        return;
    }
    let mut c = Cluster::start(&two_nodes());
    // A job that runs throughout on node 0's first 3g (GPU 0's).
    let (long, _) = c
        .sbatch(&[
            "-w",
            &c.nodes[0].clone(),
            "--gres=gpu:3g.20gb:1",
            "--wrap",
            "sleep 600",
        ])
        .unwrap();
    c.wait_job(long, &["RUNNING"], Duration::from_secs(20));
    let s0 = start_agent(&mut c, 0, &[C2, C2], &["3g.20gb@4"]);
    let s1 = start_agent(&mut c, 1, &[C1], &[]);
    wait_announced(&c);
    let config = central_config_with(
        &c,
        &Policy::Onnx {
            prefer: 4,
            fallback: "\"c2\"",
        },
        "run/snapshot.json",
        &format!("min_relayout_interval_s = {INTERVAL_S}\npoll_interval_s = 0.5"),
    );
    // Decide every second, on a random network: a different target nearly every time.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("[policy]\n", "[policy]\ndecision_interval_s = 1\ntop_k = 12\n"),
    )
    .unwrap();
    let resolved = Config::from_file(&config).unwrap().resolve(None).unwrap();
    let meta = expected_metadata(&resolved, 0, Mode::Drain);
    let k = meta.k();
    let net = PolicyNetwork::init(
        &[meta.input_dim(), 16, k * k],
        Activation::Tanh,
        &mut rand_chacha::ChaCha8Rng::seed_from_u64(3),
    );
    onnx_writer::write(&policy_path(&resolved, 0, Mode::Drain), &net, &meta).unwrap();

    let starts_before = c.ctld_log().matches("slurmctld version").count();
    let mut cmd = smartmigd(&c, None);
    cmd.args(["central", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info");
    c.spawn_daemon("central", &mut cmd);

    let types = ["3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb", "2g.10gb"];
    let (mut submitted, mut cancelled) = (Vec::new(), Vec::new());
    let start = Instant::now();
    let mut n = 0usize;
    while start.elapsed() < RUN {
        let ty = types[n % types.len()];
        if let Ok((j, _)) = c.sbatch(&[&format!("--gres=gpu:{ty}:1"), "--wrap", "sleep 2"]) {
            submitted.push(j);
            // Every third job is cancelled again, running or not.
            if n % 3 == 2 {
                let out = c.client("scancel", &[&j.to_string()]);
                if out.status.success() {
                    cancelled.push(j);
                }
            }
        }
        n += 1;
        std::thread::sleep(Duration::from_millis(400));
    }
    let status = Status::read(&c.dir.join("central")).unwrap();
    let restarts = c.ctld_log().matches("slurmctld version").count() - starts_before;
    let allowed = (RUN.as_secs() / INTERVAL_S + 1) as usize;
    eprintln!(
        "{} jobs submitted, {} cancelled; {} decisions, {} GPUs re-laid out, {restarts} slurmctld restarts (≤ {allowed} allowed)",
        submitted.len(),
        cancelled.len(),
        status.counters.decisions,
        status.counters.repartitions,
    );
    assert!(
        restarts >= 1,
        "the fickle policy re-laid out at least once:\n{}",
        c.log_tails()
    );
    assert!(
        restarts <= allowed,
        "{restarts} restarts in {RUN:?} with a {INTERVAL_S} s interval"
    );
    assert!(
        status
            .decisions
            .iter()
            .any(|d| d.action.contains("minimum interval")),
        "the interval held batches back: {:?}",
        status.decisions
    );
    // No job lost: each finished, runs or waits (or was cancelled by the test), none
    // requeued; the long job ran throughout.
    for j in submitted.iter().chain([&long]) {
        let job = c.job(*j);
        let state = job.get("JobState").cloned().unwrap_or_default();
        let ok = ["COMPLETED", "RUNNING", "PENDING", "COMPLETING"].contains(&state.as_str())
            || (cancelled.contains(j) && state == "CANCELLED");
        assert!(ok, "job {j} is {state}: {job:?}\n{}", c.log_tails());
        assert_eq!(
            job.get("Restarts").map(String::as_str),
            Some("0"),
            "job {j}: {job:?}"
        );
    }
    assert_eq!(c.job(long).get("JobState").map(String::as_str), Some("RUNNING"));
    let _ = (s0, s1);
}
