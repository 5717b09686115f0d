//! `smartmig replay` on real `sacct` dumps: one taken live from the Slurm harness (root,
//! Slurm, slurmdbd and MariaDB needed; skipped otherwise), and the checked-in
//! `tests/data/sacct/harness.sacct`, which this same test wrote on the harness
//! (`SMARTMIG_SAVE_DUMP=tests/data/sacct/harness.sacct cargo test --test replay_e2e`).
//!
//! The as-ran energy and tardiness are recomputed here from the dump's rows, second by
//! second, independently of smartmig's event sweep; the simulated columns must stay
//! above the lower bounds, and the HTML must stand alone.

mod slurm;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use slurm::{Cluster, Options};

/// The harness node: two A100-40GB in c2 (4g + 3g) and c7 (2g + 1g + 1g + 3g).
const CLUSTER_SETS: [&str; 2] = [
    "cluster.gpus=[{model=\"a100-40gb\",count=2}]",
    "baselines.reference_layout=[\"c2\",\"c7\"]",
];

const FORMAT: &str =
    "--format=JobID,JobName,Submit,Start,End,Elapsed,Timelimit,ReqTRES,AllocTRES,State,Comment";

/// Seconds since the epoch of sacct's `YYYY-MM-DDTHH:MM:SS` (UTC).
fn seconds(s: &str) -> i64 {
    let n = |a: usize, b: usize| s[a..b].parse::<i64>().unwrap_or_else(|e| panic!("{s}: {e}"));
    let (y, m, d) = (n(0, 4), n(5, 7), n(8, 10));
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    days * 86_400 + n(11, 13) * 3600 + n(14, 16) * 60 + n(17, 19)
}

/// Minutes of a `[D-]HH:MM:SS` limit, None for UNLIMITED and the like.
fn limit_min(s: &str) -> Option<f64> {
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<f64>().ok()?, r),
        None => (0.0, s),
    };
    let parts: Vec<f64> = rest.split(':').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    let secs = match parts.as_slice() {
        [h, m, s] => h * 3600.0 + m * 60.0 + s,
        [m, s] => m * 60.0 + s,
        _ => return None,
    };
    Some(days * 1440.0 + secs / 60.0)
}

/// A finished single-GPU job of the dump: submit, start, end (s), slices, limit (min).
struct Row {
    submit: i64,
    start: i64,
    end: i64,
    slices: u32,
    limit: Option<f64>,
}

/// The GPU jobs of a dump, read here without smartmig's reader.
fn rows(dump: &str) -> Vec<Row> {
    let mut lines = dump.lines();
    let header: Vec<&str> = lines.next().unwrap().split('|').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (id, sub, st, en, lim, alloc, state) = (
        col("JobID"),
        col("Submit"),
        col("Start"),
        col("End"),
        col("Timelimit"),
        col("AllocTRES"),
        col("State"),
    );
    lines
        .map(|l| l.split('|').collect::<Vec<_>>())
        .filter(|f| !f[id].contains('.') && f[state] != "PENDING")
        .filter_map(|f| {
            let ty = f[alloc].split(',').find_map(|e| e.strip_prefix("gres/gpu:"))?;
            let slices = ty.split('g').next().unwrap().parse().unwrap();
            Some(Row {
                submit: seconds(f[sub]),
                start: seconds(f[st]),
                end: seconds(f[en]),
                slices,
                limit: limit_min(f[lim]),
            })
        })
        .collect()
}

/// As-ran energy (busy slices packed onto the fewest GPUs), W·min, and mean tardiness.
fn recompute(rows: &[Row], gpus: u32) -> (f64, f64) {
    let cat = smartmig::mig::Catalogue::embedded();
    let p = &cat.model("a100-40gb").unwrap().power_w;
    let origin = rows.iter().map(|r| r.submit).min().unwrap();
    let last = rows.iter().map(|r| r.end).max().unwrap();
    let mut energy = 0.0;
    for t in origin..last {
        let mut busy: u32 = rows
            .iter()
            .filter(|r| r.start <= t && t < r.end)
            .map(|r| r.slices)
            .sum();
        for _ in 0..gpus {
            let b = busy.min(7);
            energy += p[b as usize] / 60.0;
            busy -= b;
        }
        assert_eq!(busy, 0, "more busy slices than the node has at {t}");
    }
    let tardiness = rows
        .iter()
        .map(|r| {
            let run = (r.end - r.start) as f64 / 60.0;
            let window = r.limit.map_or(1.25 * run, |l| l.min(1.25 * run));
            let late = (r.end - r.submit) as f64 / 60.0 - window;
            late.max(0.0)
        })
        .sum::<f64>()
        / rows.len() as f64;
    (energy, tardiness)
}

/// Runs `smartmig replay` on a dump and checks it against the independent recompute.
fn check_replay(dump: &Path, gpu_jobs: usize, cpu_jobs: u64) {
    let text = std::fs::read_to_string(dump).unwrap();
    let rows = rows(&text);
    assert_eq!(rows.len(), gpu_jobs, "{text}");
    let html = std::env::temp_dir().join(format!("smartmig-replay-{}.html", std::process::id()));
    let mut args: Vec<String> = vec!["replay".into(), "--sacct".into(), dump.display().to_string()];
    for s in CLUSTER_SETS {
        args.extend(["--set".to_string(), s.to_string()]);
    }
    args.extend(["--format", "json", "--html"].map(String::from));
    args.push(html.display().to_string());
    // From a directory with no onnx/, so the shipped-model lookup finds nothing.
    let out = Command::new(env!("CARGO_BIN_EXE_smartmig"))
        .args(&args)
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    assert_eq!(v["jobs"].as_u64(), Some(gpu_jobs as u64), "{v}");
    let skipped = v["skipped"].as_array().unwrap();
    assert!(
        skipped.contains(&serde_json::json!(["without GPU", cpu_jobs])),
        "{skipped:?}"
    );
    let (energy, tardiness) = recompute(&rows, 2);
    let low = v["as_ran"]["energy_wmin_low"].as_f64().unwrap();
    assert!(
        (low - energy).abs() < 1e-6 * energy,
        "as-ran energy {low} vs recomputed {energy}"
    );
    let t = v["as_ran"]["avg_tardiness_min"].as_f64().unwrap();
    assert!(
        (t - tardiness).abs() < 1e-9,
        "as-ran tardiness {t} vs recomputed {tardiness}"
    );
    assert!(v["as_ran"]["energy_wmin_high"].as_f64().unwrap() >= low);

    // No learned policy is installed here: the column is absent and the report says why.
    let columns = v["columns"].as_array().unwrap();
    assert_eq!(columns.len(), 1, "{v}");
    let why = v["smart_mig_missing"].as_str().unwrap();
    assert!(
        why.contains("no policy file a100-40gb-preempt.onnx") && why.contains("--model"),
        "{why}"
    );
    let s = &columns[0];
    assert_eq!(s["name"], "static-best");
    let e_lb = v["bounds"]["energy_wmin"].as_f64().unwrap();
    assert!(e_lb > 0.0);
    assert!(s["energy_wmin"].as_f64().unwrap() >= e_lb - 1e-6, "{s} vs {e_lb}");
    assert!(low >= e_lb - 1e-6, "as ran {low} below the bound {e_lb}");
    let t_lb = v["bounds"]["tardiness_min"].as_f64().unwrap();
    assert!(s["avg_tardiness_min"].as_f64().unwrap() >= t_lb - 1e-6);
    // ET of the bounds against the as-ran schedule is no more than static-best's.
    let a = v["energy_weight"].as_f64().unwrap();
    let e_ref = v["as_ran"]["energy_wmin"].as_f64().unwrap();
    let et_lb = (a * e_lb / e_ref + t_lb / t.max(0.01)) / (a + 1.0);
    assert!(s["et_vs_as_ran"].as_f64().unwrap() >= et_lb - 1e-9);
    let layout = s["layout"].as_array().unwrap();
    assert_eq!(layout.len(), 2);

    let page = std::fs::read_to_string(&html).unwrap();
    std::fs::remove_file(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.matches("<svg").count() >= 2, "figures inline");
    for external in ["<script", "src=", "<link", "@import", "url("] {
        assert!(
            !page.contains(external),
            "the report refers outside itself: {external}"
        );
    }
    assert!(page.contains("What is inferred, and how confident each number is"));
    assert!(page.contains(&format!("{gpu_jobs} jobs replayed")));
}

#[test]
fn replay_of_the_checked_in_harness_dump_matches_an_independent_recompute() {
    let dump = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sacct/harness.sacct");
    check_replay(&dump, 9, 1);
}

#[test]
fn replay_of_a_live_harness_dump_matches_an_independent_recompute() {
    skip_unless_slurm!();
    if slurm::which("slurmdbd").is_none() || slurm::which("mariadbd").is_none() {
        eprintln!("skipped: slurmdbd or mariadbd missing (run scripts/deps.sh slurm)");
        return;
    }
    // sacct prints local time; the reader and the recompute take it as UTC.
    std::env::set_var("TZ", "UTC");
    let c = Cluster::start(&Options {
        accounting: true,
        ..Options::two_nodes()
    });
    let jobs: &[&[&str]] = &[
        // Four jobs on the two 1g.5gb instances: some wait, and are late.
        &["--gres=gpu:1g.5gb:1", "--time=1", "--wrap", "sleep 3"],
        &["--gres=gpu:1g.5gb:1", "--time=1", "--wrap", "sleep 3"],
        &["--gres=gpu:1g.5gb:1", "--time=1", "--wrap", "sleep 3"],
        &["--gres=gpu:1g.5gb:1", "--time=1", "--wrap", "sleep 3"],
        &[
            "--gres=gpu:3g.20gb:1",
            "--time=2",
            "--comment=smartmig:class=resnet-train",
            "--wrap",
            "sleep 4",
        ],
        &[
            "--gres=gpu:3g.20gb:1",
            "--time=2",
            "--comment=smartmig:class=resnet-train",
            "--wrap",
            "sleep 4",
        ],
        &["--gres=gpu:4g.20gb:1", "--wrap", "sleep 2"],
        // Routed by the plugin.
        &[
            "--gres=gpu:mig:1",
            "--time=1",
            "--comment=smartmig:class=bert-infer",
            "--wrap",
            "sleep 2",
        ],
        // A failed job held its slice too.
        &["--gres=gpu:2g.10gb:1", "--wrap", "sleep 1; exit 1"],
        // No GPU: left out.
        &["--wrap", "sleep 1"],
    ];
    let ids: Vec<u32> = jobs
        .iter()
        .map(|a| c.sbatch(a).unwrap_or_else(|e| panic!("{a:?}: {e}")).0)
        .collect();
    for id in &ids {
        c.wait_job(*id, &["COMPLETED", "FAILED"], Duration::from_secs(120));
    }
    // Right after jobs end sacct may still show placeholder rows: poll until every job
    // has its end time.
    let start = std::time::Instant::now();
    let dump = loop {
        let out = c.sacct(&["-a", "-X", "--parsable2", "--starttime=2000-01-01", FORMAT]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let done = text
            .lines()
            .skip(1)
            .filter(|l| l.contains("|COMPLETED|") || l.contains("|FAILED|"))
            .filter(|l| !l.contains("|Unknown|"))
            .count();
        if done == ids.len() {
            break text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "sacct never showed every job ended:\n{text}\n{}",
            c.log_tails()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let path = c.dir.join("history.sacct");
    std::fs::write(&path, &dump).unwrap();
    if let Ok(save) = std::env::var("SMARTMIG_SAVE_DUMP") {
        std::fs::write(&save, &dump).unwrap();
    }
    check_replay(&path, 9, 1);
}
