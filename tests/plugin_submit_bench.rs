//! Submission cost: N sbatch submissions (held, never run) against a throwaway cluster
//! with no job_submit plugin, with job_submit/smartmig, and with a job_submit/lua script
//! doing a trivial rewrite. Reports client wall time per submission and slurmctld's own
//! time for the submit RPC (`_slurm_rpc_submit_batch_job ... usec=` in its log), which
//! includes the plugin's work under the job lock.
//!
//! Ignored by default (a minute or more); run as root:
//! `cargo test --test plugin_submit_bench -- --ignored --nocapture` (the plugin is always
//! built in release; the harness speed does not matter)
//! (`SMARTMIG_BENCH_JOBS` changes N, default 1000).

mod slurm;

use std::time::Instant;

use slurm::{Cluster, FakeGpu, Options, SMARTMIG_TOML};

/// A Lua rewrite of comparable scope: `gpu:mig:N` → a fixed type, plus a user message.
const LUA: &str = r#"
function slurm_job_submit(job_desc, part_list, submit_uid)
  local t = job_desc.tres_per_node
  if t ~= nil then
    local n = string.match(t, "gres:gpu:mig:(%d+)")
    if n ~= nil then
      job_desc.tres_per_node = "gres:gpu:3g.20gb:" .. n
      slurm.user_msg("lua: routed to gpu:3g.20gb:" .. n)
    end
  end
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
"#;

struct Row {
    variant: &'static str,
    jobs: usize,
    wall_ms_per_job: f64,
    rpc_median_us: u64,
    rpc_p99_us: u64,
    plugin_median_us: Option<u64>,
}

fn run(variant: &'static str, plugins: &str, gres: &str, jobs: usize) -> Row {
    let opts = Options {
        gpus: vec![
            FakeGpu(vec![("4g.20gb", 1), ("3g.20gb", 1)]),
            FakeGpu(vec![("2g.10gb", 1), ("1g.5gb", 2), ("3g.20gb", 1)]),
        ],
        more_nodes: Vec::new(),
        smartmig_toml: SMARTMIG_TOML.into(),
        job_submit_plugins: plugins.into(),
        etc_files: vec![("job_submit.lua".into(), LUA.into())],
        extra_conf: "MaxJobCount=100000\n".into(),
        accounting: false,
        dynamic_nodes: false,
    };
    let c = Cluster::start(&opts);
    let args = [
        "--hold",
        gres,
        "--time=60",
        "--comment=smartmig:class=bert-train",
        "--wrap",
        "true",
    ];
    let start = Instant::now();
    for i in 0..jobs {
        if let Err(e) = c.sbatch(&args) {
            panic!("{variant}: submission {i} refused: {e}\n{}", c.log_tails());
        }
    }
    let wall = start.elapsed();
    let mut usec: Vec<u64> = c
        .ctld_log()
        .lines()
        .filter(|l| l.contains("_slurm_rpc_submit_batch_job"))
        .filter_map(|l| l.rsplit("usec=").next()?.trim().parse().ok())
        .collect();
    assert_eq!(usec.len(), jobs, "{variant}: one submit RPC logged per job");
    let mut plugin_us: Vec<u64> = c
        .ctld_log()
        .lines()
        .filter_map(|l| l.split(" us in plugin]").next()?.rsplit('[').next()?.parse().ok())
        .collect();
    plugin_us.sort_unstable();
    let plugin_median_us = plugin_us.get(plugin_us.len() / 2).copied();
    usec.sort_unstable();
    let routed = c.job(1)["TresPerNode"].clone();
    assert!(
        !routed.contains("mig"),
        "{variant}: job 1 still asks for {routed}"
    );
    Row {
        variant,
        jobs,
        wall_ms_per_job: wall.as_secs_f64() * 1e3 / jobs as f64,
        rpc_median_us: usec[usec.len() / 2],
        rpc_p99_us: usec[(usec.len() * 99 / 100).min(usec.len() - 1)],
        plugin_median_us,
    }
}

#[test]
#[ignore = "benchmark: a minute or more; run with --ignored"]
fn submit_jobs_with_no_plugin_smartmig_and_lua() {
    skip_unless_slurm!();
    let jobs: usize = std::env::var("SMARTMIG_BENCH_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rows = [
        run("none (concrete gpu:3g.20gb:1)", "", "--gres=gpu:3g.20gb:1", jobs),
        run(
            "job_submit/smartmig (gpu:mig:1)",
            "smartmig",
            "--gres=gpu:mig:1",
            jobs,
        ),
        run("job_submit/lua (gpu:mig:1)", "lua", "--gres=gpu:mig:1", jobs),
    ];
    println!(
        "| plugin | jobs | sbatch wall per job | slurmctld submit RPC median | p99 | in smartmig, median |"
    );
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.1} ms | {} µs | {} µs | {} |",
            r.variant,
            r.jobs,
            r.wall_ms_per_job,
            r.rpc_median_us,
            r.rpc_p99_us,
            r.plugin_median_us.map_or("-".to_string(), |u| format!("{u} µs"))
        );
    }
}
