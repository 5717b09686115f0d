//! `smartmig sweep`: the emitted array job, run task by task here and as a real Slurm
//! array job on the harness (root and Slurm needed; skipped otherwise), collects into
//! exactly what `smartmig compare` prints for the same seeds.

mod slurm;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use slurm::{Cluster, FakeGpu, Options};

/// A small comparison: two GPUs, a tenth of a day at twice the base rates.
const SCENARIO: [&str; 8] = [
    "--set",
    "cluster.gpus=[{model=\"a100-40gb\",count=2}]",
    "--set",
    "baselines.reference_layout=[\"c2\",\"c7\"]",
    "--set",
    "baselines.static_best=[\"c2\",\"c3\"]",
    "--set",
    "workload.multiplier=2",
];

fn smartmig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smartmig"))
        .args(args)
        .output()
        .expect("run smartmig")
}

fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn args<'a>(head: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
    head.iter()
        .chain(SCENARIO.iter())
        .chain(["--days", "0.1", "--no-model"].iter())
        .chain(tail.iter())
        .copied()
        .collect()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("smartmig-sweep-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `compare` locally with the scenario file's tuned baselines (as a sweep runs them), as
/// table and JSON.
fn local(seeds: &str) -> (String, String) {
    let table = ok(smartmig(&args(&["compare"], &["--seeds", seeds, "--no-tune"])));
    let json = ok(smartmig(&args(
        &["compare"],
        &["--seeds", seeds, "--no-tune", "--format", "json"],
    )));
    (table, json)
}

fn collected(dir: &Path) -> (String, String) {
    let d = dir.to_str().unwrap();
    let table = ok(smartmig(&["sweep", "--collect", d]));
    let json = ok(smartmig(&["sweep", "--collect", d, "--format", "json"]));
    (table, json)
}

#[test]
fn tasks_run_one_by_one_collect_into_the_local_comparison_and_gaps_are_named() {
    let dir = scratch("local");
    let d = dir.to_str().unwrap();
    ok(smartmig(&args(&["sweep"], &["--seeds", "3", "--emit-sbatch", d])));
    let script = std::fs::read_to_string(dir.join("sweep.sbatch")).unwrap();
    assert!(script.contains("#SBATCH --array=0-2\n"), "{script}");
    assert!(script.contains("--task \"$SLURM_ARRAY_TASK_ID\""), "{script}");

    ok(smartmig(&["sweep", "--run-task", d, "--task", "0"]));
    ok(smartmig(&["sweep", "--run-task", d, "--task", "2"]));
    let gap = smartmig(&["sweep", "--collect", d]);
    assert_eq!(gap.status.code(), Some(1));
    let err = String::from_utf8_lossy(&gap.stderr);
    assert!(err.contains("1 of 3 tasks have no result (tasks 1)"), "{err}");
    assert!(err.contains("logs/task-1.out"), "{err}");

    ok(smartmig(&["sweep", "--run-task", d, "--task", "1"]));
    let beyond = smartmig(&["sweep", "--run-task", d, "--task", "3"]);
    assert_eq!(beyond.status.code(), Some(3));

    assert_eq!(collected(&dir), local("3"));
    // A second sweep into a used directory is refused rather than mixed.
    let again = smartmig(&args(&["sweep"], &["--seeds", "3", "--emit-sbatch", d]));
    assert_eq!(again.status.code(), Some(3));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_emitted_array_job_runs_on_slurm_and_collects_into_the_local_comparison() {
    skip_unless_slurm!();
    let c = Cluster::start(&Options {
        gpus: vec![FakeGpu(vec![("7g.40gb", 1)])],
        more_nodes: Vec::new(),
        smartmig_toml: slurm::SMARTMIG_TOML.to_string(),
        job_submit_plugins: String::new(),
        etc_files: Vec::new(),
        extra_conf: String::new(),
        accounting: false,
        dynamic_nodes: false,
    });
    let dir = scratch("slurm");
    let d = dir.to_str().unwrap();
    ok(smartmig(&args(
        &["sweep"],
        &["--seeds", "3", "--emit-sbatch", d, "--sbatch-option=--time=10"],
    )));
    let script = dir.join("sweep.sbatch");
    let (id, err) = c
        .sbatch(&[script.to_str().unwrap()])
        .unwrap_or_else(|e| panic!("sbatch: {e}"));
    assert!(err.is_empty(), "{err}");
    // Every task of the array must end, and complete.
    let start = std::time::Instant::now();
    loop {
        let out = c.scontrol(&["show", "job", "-o", &id.to_string()]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let states: Vec<String> = text
            .lines()
            .map(|l| slurm::fields(l).get("JobState").cloned().unwrap_or_default())
            .collect();
        if states.len() == 3 && states.iter().all(|s| s == "COMPLETED") {
            break;
        }
        assert!(
            !states.iter().any(|s| s == "FAILED"),
            "a task failed: {text}\n{}",
            std::fs::read_to_string(dir.join("logs/task-0.out")).unwrap_or_default()
        );
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the array did not finish: {text}\n{}",
            c.log_tails()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(
        std::fs::read_dir(dir.join("results")).unwrap().count(),
        3,
        "one result per task"
    );
    assert_eq!(collected(&dir), local("3"));
    std::fs::remove_dir_all(&dir).unwrap();
}
