//! End-to-end test of cli_filter_smartmig.so with real srun, salloc and sbatch on a
//! throwaway Slurm (tests/slurm harness), beside job_submit_smartmig.so.
//!
//! Needs root and the Slurm packages; skips with a "skipped:" line otherwise. The plugins
//! are built by the harness unless `SMARTMIG_PLUGIN_SO` / `SMARTMIG_CLI_FILTER_SO` name
//! built ones. Run: `cargo test --test cli_filter_e2e -- --nocapture`.

mod slurm;

use std::process::Output;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use slurm::{Cluster, Options};

/// One cluster at a time: the machine is small and slurmctld is not light.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Issue 17: `srun --gres=gpu:mig:1 cmd` failed ("Step requested GRES (gpu:mig) not found
/// in the job"): the job was routed, its step still asked for `gpu:mig`.
#[test]
fn srun_salloc_and_steps_inside_allocations_run_with_gpu_mig() {
    skip_unless_slurm!();
    let _g = serial();
    let c = Cluster::start(&Options::two_nodes());
    let srun = |args: &[&str]| c.run_client("srun", args);

    // Without the filter: the failure users met on 22.05. On 24.11 the step of srun's own
    // allocation runs on the routed GRES even so; everything below holds on both.
    let o = srun(&["--gres=gpu:mig:1", "--time=10", "true"]);
    if slurm::release().at_least(23, 2) {
        assert!(o.status.success(), "{}", text(&o));
    } else {
        assert!(
            !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("gpu:mig"),
            "{}",
            text(&o)
        );
    }

    c.install_cli_filter();
    // srun making its own allocation: the job is routed (a 10-minute job on 1g, the
    // default soft due time), the step runs on it.
    let o = srun(&["--gres=gpu:mig:1", "--time=10", "-J", "srun-alloc", "true"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("smartmig: routed to gpu:1g.5gb:1"),
        "{}",
        text(&o)
    );
    // Per-job counts too (`--gpus`).
    let o = srun(&["--gpus=mig:2", "--time=10", "true"]);
    assert!(o.status.success(), "{}", text(&o));

    // salloc: the allocation is routed by job_submit, the srun inside by the filter.
    let o = c.run_client(
        "salloc",
        &[
            "--gres=gpu:mig:1",
            "--time=10",
            "srun",
            "--gres=gpu:mig:1",
            "true",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));

    // sbatch: steps with and without a GPU option inside the routed job.
    let (id, _) = c
        .sbatch(&[
            "--gres=gpu:mig:1",
            "--time=10",
            "--wrap",
            "srun --gres=gpu:mig:1 true && srun true",
        ])
        .expect("sbatch");
    assert_eq!(
        c.wait_job(id, &["COMPLETED", "FAILED"], Duration::from_secs(60)),
        "COMPLETED",
        "{:?}",
        c.job(id)
    );
    // A concrete type still passes untouched.
    let o = srun(&["--gres=gpu:3g.20gb:1", "true"]);
    assert!(o.status.success(), "{}", text(&o));
}

/// `sbatch -n1 --gpus-per-task=mig:1 --wrap 'srun true'`: the step's srun reads the job's
/// GPUs per task from its environment, as `SLURM_GPUS_PER_TASK=mig:1` on 22.05 and as
/// `SLURM_TRES_PER_TASK=gres/gpu:mig=1` (its `--tres-per-task`) from 23.11; the filter
/// takes `mig` out of both, so the step asks for untyped GPUs and runs on the routed one.
#[test]
fn a_batch_steps_gpus_per_task_from_the_environment_runs_with_gpu_mig() {
    skip_unless_slurm!();
    let _g = serial();
    let c = Cluster::start(&Options::two_nodes());
    c.install_cli_filter();
    for extra in [&[][..], &["--cpus-per-task=1"][..]] {
        let mut args = vec!["-n1", "--gpus-per-task=mig:1", "--time=10"];
        args.extend_from_slice(extra);
        args.extend(["--wrap", "srun true"]);
        let (id, stderr) = c.sbatch(&args).expect("sbatch");
        assert!(stderr.contains("smartmig: routed to gpu:"), "{args:?}: {stderr}");
        assert_eq!(
            c.wait_job(id, &["COMPLETED", "FAILED"], Duration::from_secs(60)),
            "COMPLETED",
            "{args:?}: {:?}\n{}",
            c.job(id),
            c.log_tails()
        );
    }
}
