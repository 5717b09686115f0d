//! Benchmark of the candidate ways to make Slurm see a node's new MIG layout, each tried on
//! the harness with two GPU jobs running on the node and a storm of client calls going on
//! (squeue and sbatch, two clients each). Per path it reports how long slurmctld did not
//! answer (the longest stretch without a completed client call, and the slowest call), the
//! client calls that failed, the slurmctld processes started, whether the running jobs kept
//! running on their device (Slurm's index for it, and the device file that index names
//! before and after), and the time from the change until a job that needs the new layout
//! starts. A second table changes the node's total GPU count with the jobs running; a third
//! (its own test) changes the real instances' count while padding records keep the total.
//!
//! The node: GPU A in c2 (4g.20gb, 3g.20gb), GPU B in c7 (2g.10gb, 1g.5gb ×2, 3g.20gb).
//! Jobs run on a 3g.20gb and a 1g.5gb; a held-back job asks for two 3g.20gb (only one is
//! free). The change takes GPU A to c5 (3g.20gb ×2, the same count), which frees a second
//! 3g.20gb; the count change takes it to 2g.10gb ×2 + 3g.20gb.
//!
//! Ignored by default (about two minutes); run as root, on the host's Slurm and on another
//! release (BENCHMARKS.md, "Re-layout paths"):
//! `cargo test --test relayout_bench -- --ignored --nocapture`
//! `SMARTMIG_SLURM_ROOT=$(scripts/debian-chroot.sh --suite trixie --slurm --shared) cargo test --test relayout_bench -- --ignored --nocapture`

mod slurm;

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use slurm::{fields, Cluster, FakeGpu, Options};

/// A way of re-laying out the node.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Path {
    /// Edit slurm.conf's node line and gres.conf, `scontrol reconfigure`.
    Reconfigure,
    /// Edit gres.conf, `scontrol update NodeName=... Gres=...`, restart slurmd.
    UpdateGres,
    /// A dynamic node: `scontrol delete nodename=...`, then slurmd -Z with the new Gres.
    DynamicNode,
    /// Stop slurmd, edit both files, restart slurmctld (without -c), start slurmd.
    Restart,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Reconfigure => "`scontrol reconfigure`",
            Path::UpdateGres => "`scontrol update NodeName= Gres=` + slurmd restart",
            Path::DynamicNode => "dynamic node: `scontrol delete node` + `slurmd -Z`",
            Path::Restart => "slurmctld restart (22.05 path)",
        }
    }
}

/// The node's GPU A before, after the same-count change, after the count change.
const C2: &[(&str, u32)] = &[("4g.20gb", 1), ("3g.20gb", 1)];
const C5: &[(&str, u32)] = &[("3g.20gb", 2)];
const MORE: &[(&str, u32)] = &[("2g.10gb", 2), ("3g.20gb", 1)];
const GPU_B: &[(&str, u32)] = &[("2g.10gb", 1), ("1g.5gb", 2), ("3g.20gb", 1)];

/// One client call of the storm: when it ended (since the storm began), how long it took,
/// whether it succeeded.
struct Call {
    end: Duration,
    took: Duration,
    ok: bool,
}

/// What one trial measured.
struct Trial {
    path: Path,
    /// What the path's commands said (refusals, errors).
    notes: Vec<String>,
    longest_gap: Duration,
    slowest_call: Duration,
    failed: usize,
    calls: usize,
    ctld_starts: usize,
    ctld_pid_changed: bool,
    /// Each running job: state and restarts after, Slurm index before → after, device file
    /// before → after.
    jobs: Vec<String>,
    /// From the change's start until the job needing the new layout ran (None: it did not
    /// within the limit).
    schedulable: Option<Duration>,
    node_state: String,
    node_gres: String,
}

fn out_text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout).trim(),
        String::from_utf8_lossy(&o.stderr).trim()
    )
}

/// The harness's per-node gres file (`etc/gres-<node>.conf`) for GPU A in `a` and GPU B,
/// with device files nvidia0.. for A (nvidia6 added when A has more instances than 2) and
/// nvidia2..5 for B, as the harness made them.
fn gres_file(c: &Cluster, a: &[(&str, u32)]) -> String {
    let dev = |i: u32| c.dir.join(format!("dev/nvidia{i}"));
    let mut a_files = vec![0, 1, 6].into_iter();
    let mut text = String::new();
    for &(ty, n) in a {
        for _ in 0..n {
            let f = a_files.next().expect("at most 3 instances on GPU A");
            if !dev(f).exists() {
                let ok = Command::new("mknod")
                    .arg(dev(f))
                    .args(["c", "1", "3"])
                    .status()
                    .unwrap();
                assert!(ok.success());
            }
            text += &format!(
                "NodeName={} Name=gpu Type={ty} File={}\n",
                c.node,
                dev(f).display()
            );
        }
    }
    let mut b = 2;
    for &(ty, n) in GPU_B {
        for _ in 0..n {
            text += &format!(
                "NodeName={} Name=gpu Type={ty} File={}\n",
                c.node,
                dev(b).display()
            );
            b += 1;
        }
    }
    text
}

/// `gpu:<type>:<n>,...` in type order (as smartmig and the harness write it).
fn gres_value(a: &[(&str, u32)]) -> String {
    let mut m: BTreeMap<&str, u32> = BTreeMap::new();
    for &(ty, n) in a.iter().chain(GPU_B) {
        *m.entry(ty).or_default() += n;
    }
    m.iter()
        .map(|(t, n)| format!("gpu:{t}:{n}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Slurm's device numbering: the types in the order of the node's configured `Gres=`,
/// gres.conf order within a type (verified on 22.05 and 24.11). Index → device file name.
fn index_files(gres: &str, gres_conf: &str) -> Vec<String> {
    let mut files = Vec::new();
    for entry in gres.split(',') {
        let ty = entry.split(':').nth(1).unwrap_or("");
        for l in gres_conf.lines() {
            if l.contains(&format!("Type={ty} ")) {
                let f = l.rsplit('/').next().unwrap_or("").to_string();
                files.push(f);
            }
        }
    }
    files
}

/// The running job's device index (`GRES=gpu:3g.20gb:1(IDX:3)` of `scontrol -d show job`).
fn job_index(c: &Cluster, id: u32) -> Option<usize> {
    let out = c.client_output("scontrol", &["-d", "show", "job", &id.to_string()]);
    let at = out.find("(IDX:")? + 5;
    out[at..].split([')', ',', '-']).next()?.parse().ok()
}

fn ctld_pid(c: &Cluster) -> String {
    std::fs::read_to_string(c.dir.join("run/slurmctld.pid"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn run_script(path: &std::path::Path) -> String {
    let out = Command::new(path).output().unwrap();
    format!("{} {}", path.file_name().unwrap().to_string_lossy(), out.status)
}

/// Replaces the `Gres=` of the node's line in nodes.conf.
fn set_node_gres(c: &Cluster, gres: &str) {
    let path = c.nodes_include();
    let text = std::fs::read_to_string(&path).unwrap();
    let new: Vec<String> = text
        .lines()
        .map(|l| match l.find("Gres=") {
            Some(at) if l.starts_with(&format!("NodeName={} ", c.node)) => format!("{}Gres={gres}", &l[..at]),
            _ => l.to_string(),
        })
        .collect();
    std::fs::write(&path, new.join("\n") + "\n").unwrap();
}

/// Applies the new layout `a` of GPU A by `path`; returns what the commands said.
fn apply(c: &Cluster, path: Path, a: &[(&str, u32)]) -> Vec<String> {
    apply_files(c, path, &gres_file(c, a), &gres_value(a))
}

/// Applies a node whose gres.conf is `gres_text` and whose `Gres=` is `gres` by `path`.
fn apply_files(c: &Cluster, path: Path, gres_text: &str, gres: &str) -> Vec<String> {
    let gres_path = c.dir.join(format!("etc/gres-{}.conf", c.node));
    let (stop, start) = c.slurmd_scripts(0);
    let mut notes = Vec::new();
    match path {
        Path::Reconfigure => {
            std::fs::write(&gres_path, gres_text).unwrap();
            set_node_gres(c, gres);
            notes.push(format!(
                "reconfigure: {}",
                out_text(&c.scontrol(&["reconfigure"]))
            ));
        }
        Path::UpdateGres => {
            std::fs::write(&gres_path, gres_text).unwrap();
            let o = c.scontrol(&["update", &format!("NodeName={}", c.node), &format!("Gres={gres}")]);
            notes.push(format!("update: {} {}", o.status, out_text(&o)));
            notes.push(run_script(&stop));
            notes.push(run_script(&start));
        }
        Path::DynamicNode => {
            std::fs::write(&gres_path, gres_text).unwrap();
            let o = c.scontrol(&["delete", &format!("nodename={}", c.node)]);
            notes.push(format!("delete: {} {}", o.status, out_text(&o)));
            let conf = c.dynamic_conf(0);
            let def = std::fs::read_to_string(&conf).unwrap();
            let at = def.find("Gres=").unwrap();
            std::fs::write(&conf, format!("{}Gres={gres}", &def[..at])).unwrap();
            notes.push(run_script(&stop));
            notes.push(run_script(&start));
        }
        Path::Restart => {
            notes.push(run_script(&stop));
            std::fs::write(&gres_path, gres_text).unwrap();
            set_node_gres(c, gres);
            notes.push(run_script(&c.restart_slurmctld_script()));
            notes.push(run_script(&start));
        }
    }
    notes
}

/// The first line of a trial's panic message.
fn panic_line(e: &(dyn std::any::Any + Send)) -> &str {
    let why = e
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| e.downcast_ref::<&str>().copied())
        .unwrap_or("panic");
    why.lines().next().unwrap_or("")
}

/// Starts the two long jobs of every trial on the node, a 3g.20gb and a 1g.5gb; their ids.
fn start_jobs(c: &Cluster) -> Vec<u32> {
    ["3g.20gb", "1g.5gb"]
        .iter()
        .map(|ty| {
            let (id, _) = c
                .sbatch(&[
                    "-w",
                    &c.node,
                    &format!("--gres=gpu:{ty}:1"),
                    "--wrap",
                    "sleep 600",
                ])
                .unwrap();
            c.wait_job(id, &["RUNNING"], Duration::from_secs(30));
            id
        })
        .collect()
}

/// One trial: a fresh cluster, the jobs, the storm, the change to `a` by `path`.
fn trial(path: Path, a: &[(&str, u32)]) -> Trial {
    let mut opts = Options::two_nodes();
    opts.gpus = vec![FakeGpu(C2.to_vec()), FakeGpu(GPU_B.to_vec())];
    opts.job_submit_plugins = String::new();
    opts.dynamic_nodes = path == Path::DynamicNode;
    let c = Cluster::start(&opts);
    let node = c.node.clone();
    let gres_path = c.dir.join(format!("etc/gres-{node}.conf"));
    let running = start_jobs(&c);
    let (probe, _) = c
        .sbatch(&["-w", &node, "--gres=gpu:3g.20gb:2", "--wrap", "sleep 1"])
        .unwrap();
    let before_gres = fields(&c.client_output("scontrol", &["show", "node", &node, "-o"]))["Gres"].clone();
    let before_files = index_files(&before_gres, &std::fs::read_to_string(&gres_path).unwrap());
    let before: Vec<Option<usize>> = running.iter().map(|&j| job_index(&c, j)).collect();
    let pid = ctld_pid(&c);
    let starts_before = c.ctld_log().matches("slurmctld version").count();

    let stop = AtomicBool::new(false);
    let epoch = Instant::now();
    let (calls, (notes, change_at, schedulable)) = std::thread::scope(|s| {
        let clients: Vec<_> = [&["squeue"][..], &["squeue"], &["sbatch"], &["sbatch"]]
            .into_iter()
            .map(|what| {
                let (c, stop) = (&c, &stop);
                s.spawn(move || {
                    let mut calls = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let t = Instant::now();
                        let ok = if what[0] == "squeue" {
                            c.client("squeue", &["-h"]).status.success()
                        } else {
                            c.sbatch(&["--hold", "--wrap", "true"]).is_ok()
                        };
                        calls.push(Call {
                            end: epoch.elapsed(),
                            took: t.elapsed(),
                            ok,
                        });
                    }
                    calls
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        let change_at = epoch.elapsed();
        let notes = apply(&c, path, a);
        let limit = Duration::from_secs(40);
        let started = Instant::now();
        let mut schedulable = None;
        while started.elapsed() < limit {
            let state = c.job(probe).get("JobState").cloned().unwrap_or_default();
            if ["RUNNING", "COMPLETED", "COMPLETING"].contains(&state.as_str()) {
                schedulable = Some(epoch.elapsed() - change_at);
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        let calls: Vec<Call> = clients.into_iter().flat_map(|h| h.join().unwrap()).collect();
        (calls, (notes, change_at, schedulable))
    });

    let mut ends: Vec<Duration> = calls.iter().filter(|k| k.ok).map(|k| k.end).collect();
    ends.sort();
    let longest_gap = ends
        .windows(2)
        .filter(|w| w[1] >= change_at)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    let node_fields = fields(&c.client_output("scontrol", &["show", "node", &node, "-o"]));
    let node_gres = node_fields.get("Gres").cloned().unwrap_or_default();
    let after_files = index_files(&node_gres, &std::fs::read_to_string(&gres_path).unwrap());
    let jobs = running
        .iter()
        .zip(&before)
        .map(|(&j, b)| {
            let job = c.job(j);
            let a = job_index(&c, j);
            let file = |files: &Vec<String>, i: Option<usize>| {
                i.and_then(|i| files.get(i).cloned())
                    .unwrap_or_else(|| "-".into())
            };
            format!(
                "{} {} restarts {}, IDX {} → {}, {} → {}",
                job["TresPerNode"].rsplit(':').nth(1).unwrap_or(""),
                job["JobState"],
                job["Restarts"],
                b.map_or("-".into(), |i| i.to_string()),
                a.map_or("-".into(), |i| i.to_string()),
                file(&before_files, *b),
                file(&after_files, a),
            )
        })
        .collect();
    Trial {
        path,
        notes,
        longest_gap,
        slowest_call: calls.iter().map(|k| k.took).max().unwrap_or_default(),
        failed: calls.iter().filter(|k| !k.ok).count(),
        calls: calls.len(),
        ctld_starts: c.ctld_log().matches("slurmctld version").count() - starts_before,
        ctld_pid_changed: ctld_pid(&c) != pid,
        jobs,
        schedulable,
        node_state: node_fields.get("State").cloned().unwrap_or_default(),
        node_gres,
    }
}

#[test]
#[ignore = "benchmark: about two minutes; run with --ignored"]
fn relayout_paths_with_running_jobs_and_a_storm_of_client_calls() {
    skip_unless_slurm!();
    let release = slurm::release();
    println!("\nSlurm {release}: GPU A c2 → c5 (same GPU count), jobs on 3g.20gb and 1g.5gb\n");
    println!("| path | longest stretch without an answer | slowest call | failed calls | slurmctld processes started | running jobs after (Slurm index, device file) | job needing the new layout ran after | node after |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut notes = Vec::new();
    for path in [
        Path::Reconfigure,
        Path::UpdateGres,
        Path::DynamicNode,
        Path::Restart,
    ] {
        // A path may break the cluster itself (22.05's slurmctld does not survive a dynamic
        // node with GRES): that is a result too.
        let t = match std::panic::catch_unwind(|| trial(path, C5)) {
            Ok(t) => t,
            Err(e) => {
                println!("| {} | the trial failed: {} |", path.name(), panic_line(&*e));
                continue;
            }
        };
        println!(
            "| {} | {:.2} s | {:.2} s | {} of {} | {}{} | {} | {} | {} {} |",
            t.path.name(),
            t.longest_gap.as_secs_f64(),
            t.slowest_call.as_secs_f64(),
            t.failed,
            t.calls,
            t.ctld_starts,
            if t.ctld_pid_changed { " (new pid)" } else { "" },
            t.jobs.join("; "),
            t.schedulable
                .map_or("not within 40 s".into(), |d| format!("{:.2} s", d.as_secs_f64())),
            t.node_state,
            t.node_gres,
        );
        notes.push((t.path, t.notes));
    }
    println!("\nSlurm {release}: GPU A c2 → 2g.10gb ×2 + 3g.20gb (the node's GPU count 6 → 7), same jobs\n");
    println!("| path | running jobs after | node after |");
    println!("|---|---|---|");
    for path in [Path::Reconfigure, Path::Restart] {
        let t = trial(path, MORE);
        println!(
            "| {} | {} | {} {} |",
            t.path.name(),
            t.jobs.join("; "),
            t.node_state,
            t.node_gres
        );
        notes.push((t.path, t.notes));
    }
    println!("\nWhat the commands said:");
    for (path, n) in notes {
        println!("- {}: {}", path.name(), n.join(" | "));
    }
}

/// The type of the padding records: GPUs that exist only so the node's total GPU count
/// stays the same whatever the layout (it sorts after every MIG type, so it never shifts
/// their indices).
const PAD: &str = "zpad";

/// How the padding records name their devices.
#[derive(Debug, Clone, Copy)]
enum Padding {
    /// One record per padding GPU, each with a device file of its own.
    Files,
    /// One record `Count=N` without `File=`.
    CountOnly,
}

/// gres.conf and `Gres=` for GPU A in `a`, GPU B, and `pad` padding GPUs.
fn padded(c: &Cluster, a: &[(&str, u32)], pad: u32, how: Padding) -> (String, String) {
    let mut text = gres_file(c, a);
    let mut gres = gres_value(a);
    if pad > 0 {
        gres += &format!(",gpu:{PAD}:{pad}");
        match how {
            Padding::Files => {
                for k in 0..pad {
                    let dev = c.dir.join(format!("dev/nvidia{}", 10 + k));
                    if !dev.exists() {
                        let ok = Command::new("mknod")
                            .arg(&dev)
                            .args(["c", "1", "3"])
                            .status()
                            .unwrap();
                        assert!(ok.success());
                    }
                    text += &format!("NodeName={} Name=gpu Type={PAD} File={}\n", c.node, dev.display());
                }
            }
            Padding::CountOnly => {
                text += &format!("NodeName={} Name=gpu Type={PAD} Count={pad}\n", c.node);
            }
        }
    }
    (text, gres)
}

/// A count change under running jobs with padding that keeps the node's total: the node
/// starts as GPU A in c2 + one padding GPU + GPU B (7), jobs run on a 3g.20gb and a
/// 1g.5gb, then GPU A becomes 2g.10gb ×2 + 3g.20gb and the padding goes (7).
fn padded_trial(path: Path, how: Padding) -> String {
    let mut opts = Options::two_nodes();
    opts.gpus = vec![FakeGpu(C2.to_vec()), FakeGpu(GPU_B.to_vec())];
    opts.job_submit_plugins = String::new();
    let c = Cluster::start(&opts);
    let node = c.node.clone();
    // The padded layout is installed while the node is idle (a count change then is safe).
    let (text, gres) = padded(&c, C2, 1, how);
    let setup = apply_files(&c, Path::Restart, &text, &gres);
    c.wait_for("the padded node idle", Duration::from_secs(40), |c| {
        c.node_state(&node).starts_with("IDLE")
    });
    let before = fields(&c.client_output("scontrol", &["show", "node", &node, "-o"]))["Gres"].clone();
    let running = start_jobs(&c);
    let idx_before: Vec<Option<usize>> = running.iter().map(|&j| job_index(&c, j)).collect();
    let (text, gres) = padded(&c, MORE, 0, how);
    let notes = apply_files(&c, path, &text, &gres);
    // A requeue shows within a few seconds of the node registering again.
    std::thread::sleep(Duration::from_secs(8));
    let node_fields = fields(&c.client_output("scontrol", &["show", "node", &node, "-o"]));
    let jobs: Vec<String> = running
        .iter()
        .zip(&idx_before)
        .map(|(&j, b)| {
            let job = c.job(j);
            format!(
                "{} {} restarts {}, IDX {} → {}",
                job["TresPerNode"].rsplit(':').nth(1).unwrap_or(""),
                job["JobState"],
                job["Restarts"],
                b.map_or("-".into(), |i| i.to_string()),
                job_index(&c, j).map_or("-".into(), |i| i.to_string()),
            )
        })
        .collect();
    format!(
        "| {} | {:?} | {} | {} | {} {} | set-up: {}; change: {} |",
        path.name(),
        how,
        before,
        jobs.join("; "),
        node_fields.get("State").cloned().unwrap_or_default(),
        node_fields.get("Gres").cloned().unwrap_or_default(),
        setup.join(" "),
        notes.join(" "),
    )
}

#[test]
#[ignore = "benchmark: about a minute; run with --ignored"]
fn a_padding_type_that_keeps_the_node_gpu_count_across_a_count_change() {
    skip_unless_slurm!();
    let release = slurm::release();
    println!("\nSlurm {release}: GPU A c2 + 1 padding GPU → 2g.10gb ×2 + 3g.20gb (the node's total stays 7), jobs on 3g.20gb and 1g.5gb\n");
    println!("| path | padding records | node Gres before | running jobs after | node after | commands |");
    println!("|---|---|---|---|---|---|");
    for path in [Path::Reconfigure, Path::Restart] {
        for how in [Padding::Files, Padding::CountOnly] {
            match std::panic::catch_unwind(|| padded_trial(path, how)) {
                Ok(row) => println!("{row}"),
                Err(e) => println!(
                    "| {} | {how:?} | the trial failed: {} |",
                    path.name(),
                    panic_line(&*e)
                ),
            }
        }
    }
}
