//! Submission cost: N sbatch submissions (held, never run) against a throwaway cluster
//! with no job_submit plugin, with job_submit/smartmig, and with a job_submit/lua script
//! doing a trivial rewrite. Reports client wall time per submission and slurmctld's own
//! time for the submit RPC, which includes the plugin's work under the job lock: the
//! median of `_slurm_rpc_submit_batch_job ... usec=` in its log, and the mean `sdiag`
//! reports for REQUEST_SUBMIT_BATCH_JOB. Each cluster takes two rounds of N jobs: with
//! the harness's `SlurmctldDebug=info` (every submission and every routed job logged),
//! then after `scontrol setdebug error` (nothing logged per job; sdiag still measures).
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

/// One variant: its cluster, the request it submits, and what was measured.
struct Variant {
    name: &'static str,
    gres: &'static str,
    cluster: Cluster,
    /// Client wall time of each submission, per round.
    wall: [std::time::Duration; 2],
    /// Log offset where the current round began.
    log_start: usize,
    rounds: Vec<Round>,
}

/// One round of submissions to one variant.
struct Round {
    wall_ms_per_job: f64,
    /// Median and p99 of the logged RPC times (None when not logged).
    rpc_median_us: Option<u64>,
    rpc_p99_us: Option<u64>,
    /// sdiag's mean time of REQUEST_SUBMIT_BATCH_JOB.
    sdiag_mean_us: u64,
    /// Median time inside smartmig's job_submit (logged per routed job).
    plugin_median_us: Option<u64>,
}

/// sdiag's `ave_time` of REQUEST_SUBMIT_BATCH_JOB, in µs.
fn sdiag_submit_mean(c: &Cluster) -> u64 {
    let out = c.run_client("sdiag", &[]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.trim_start().starts_with("REQUEST_SUBMIT_BATCH_JOB"))
        .and_then(|l| {
            l.split("ave_time:")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no REQUEST_SUBMIT_BATCH_JOB in sdiag:\n{text}"))
}

fn median_and_p99(mut v: Vec<u64>) -> (Option<u64>, Option<u64>) {
    v.sort_unstable();
    let p99 = v
        .get((v.len() * 99 / 100).min(v.len().saturating_sub(1)))
        .copied();
    (v.get(v.len() / 2).copied(), p99)
}

fn start(name: &'static str, plugins: &str, gres: &'static str) -> Variant {
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
    Variant {
        name,
        gres,
        cluster: Cluster::start(&opts),
        wall: Default::default(),
        log_start: 0,
        rounds: Vec::new(),
    }
}

/// Reads what a round left in the variant's log and sdiag; `logged` says whether the
/// RPC lines must be there.
fn finish_round(v: &mut Variant, r: usize, jobs: usize, logged: bool) {
    let log = v.cluster.ctld_log();
    let new = &log[v.log_start.min(log.len())..];
    let usec: Vec<u64> = new
        .lines()
        .filter(|l| l.contains("_slurm_rpc_submit_batch_job"))
        .filter_map(|l| l.rsplit("usec=").next()?.trim().parse().ok())
        .collect();
    if logged {
        assert_eq!(usec.len(), jobs, "{}: one submit RPC logged per job", v.name);
    } else {
        assert!(usec.is_empty(), "{}: RPCs logged at SlurmctldDebug=error", v.name);
    }
    let plugin: Vec<u64> = new
        .lines()
        .filter_map(|l| l.split(" us in plugin]").next()?.rsplit('[').next()?.parse().ok())
        .collect();
    let (rpc_median_us, rpc_p99_us) = median_and_p99(usec);
    v.rounds.push(Round {
        wall_ms_per_job: v.wall[r].as_secs_f64() * 1e3 / jobs as f64,
        rpc_median_us,
        rpc_p99_us,
        sdiag_mean_us: sdiag_submit_mean(&v.cluster),
        plugin_median_us: median_and_p99(plugin).0,
    });
}

#[test]
#[ignore = "benchmark: a minute or more; run with --ignored"]
fn submit_jobs_with_no_plugin_smartmig_and_lua() {
    skip_unless_slurm!();
    let jobs: usize = std::env::var("SMARTMIG_BENCH_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let mut variants = [
        start("none (concrete gpu:3g.20gb:1)", "", "--gres=gpu:3g.20gb:1"),
        start(
            "job_submit/smartmig (concrete gpu:3g.20gb:1)",
            "smartmig",
            "--gres=gpu:3g.20gb:1",
        ),
        start("job_submit/smartmig (gpu:mig:1)", "smartmig", "--gres=gpu:mig:1"),
        start("job_submit/lua (gpu:mig:1)", "lua", "--gres=gpu:mig:1"),
    ];
    // Round 0 at the harness's SlurmctldDebug=info, round 1 at error. Submissions go to
    // the variants in turn, so every variant meets the same machine load.
    for (r, level) in ["info", "error"].into_iter().enumerate() {
        for v in variants.iter_mut() {
            let c = &v.cluster;
            let out = c.scontrol(&["setdebug", level]);
            assert!(
                out.status.success(),
                "setdebug: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let reset = c.run_client("sdiag", &["-r"]);
            assert!(
                reset.status.success(),
                "sdiag -r: {}",
                String::from_utf8_lossy(&reset.stderr)
            );
            v.log_start = c.ctld_log().len();
        }
        for i in 0..jobs {
            for v in variants.iter_mut() {
                let args = [
                    "--hold",
                    v.gres,
                    "--time=60",
                    "--comment=smartmig:class=bert-train",
                    "--wrap",
                    "true",
                ];
                let t = Instant::now();
                if let Err(e) = v.cluster.sbatch(&args) {
                    panic!(
                        "{}: submission {i} refused: {e}\n{}",
                        v.name,
                        v.cluster.log_tails()
                    );
                }
                v.wall[r] += t.elapsed();
            }
        }
        for v in variants.iter_mut() {
            finish_round(v, r, jobs, level == "info");
        }
    }
    for v in &variants {
        let routed = v.cluster.job(1)["TresPerNode"].clone();
        assert!(
            !routed.contains("mig"),
            "{}: job 1 still asks for {routed}",
            v.name
        );
    }
    let us = |v: Option<u64>| v.map_or("-".to_string(), |u| format!("{u} µs"));
    println!(
        "| plugin | jobs | SlurmctldDebug | sbatch wall per job | submit RPC median (log) | p99 (log) | submit RPC mean (sdiag) | in smartmig, median |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for v in &variants {
        for (level, round) in ["info", "error"].iter().zip(&v.rounds) {
            println!(
                "| {} | {} | {level} | {:.1} ms | {} | {} | {} µs | {} |",
                v.name,
                jobs,
                round.wall_ms_per_job,
                us(round.rpc_median_us),
                us(round.rpc_p99_us),
                round.sdiag_mean_us,
                us(round.plugin_median_us)
            );
        }
    }
}
