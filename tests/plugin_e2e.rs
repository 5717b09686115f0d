//! End-to-end tests of job_submit_smartmig.so inside a real slurmctld: the host's (Debian
//! 12: 22.05), or the one in `$SMARTMIG_SLURM_ROOT` (Debian 13: 24.11), with the same
//! expectations, so the same requests get the same routing on both.
//!
//! Needs root and the Slurm packages (`scripts/deps.sh slurm`); skips with a "skipped:"
//! line otherwise. The plugin is built by the harness against the Slurm under test
//! unless `SMARTMIG_PLUGIN_SO` names a built one.
//! Run: `cargo test --test plugin_e2e -- --nocapture`, or `scripts/e2e.sh` for both releases.
//!
//! The node has two fake A100-40GB GPUs in different layouts, c2 (4g + 3g) and c7
//! (2g + 1g + 1g + 3g): types 4g.20gb ×1, 3g.20gb ×2, 2g.10gb ×1, 1g.5gb ×2. smartmig.toml's
//! static layout says the same, so without a snapshot routing picks among these types.
//! Expected types follow docs/admin-guide.md ("How routing decides"): run time on k slices
//! = `--time` (on 7g) × s7/sk, due time = deadline, `due=` hint, or 1.5 × run time on 7g +
//! 60 min; the slowest slice meeting it wins.

mod slurm;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use slurm::{minutes, tres, Cluster, FakeGpu, Options, SMARTMIG_TOML};
use smartmig_core::config::Config;
use smartmig_core::routing::{Job, Outcome, Router, TresStrings};

/// One cluster at a time: the machine is small and slurmctld is not light.
static SERIAL: Mutex<()> = Mutex::new(());

fn start() -> (std::sync::MutexGuard<'static, ()>, Cluster) {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    (guard, Cluster::start(&Options::two_nodes()))
}

/// A submission and where it must land.
struct Case {
    args: &'static [&'static str],
    /// Field and exact value expected in `scontrol show job` (without the release's
    /// `gres:`/`gres/` prefix, which the plugin keeps as Slurm spelled it).
    field: &'static str,
    tres: &'static str,
    /// Expected time limit in minutes (None: the partition's, unlimited here).
    limit: Option<u32>,
    /// Whether sbatch must print smartmig's info line.
    routed: bool,
}

const CASES: &[Case] = &[
    // bert-infer is linear: 60 min on 7g is 420 on 1g (misses 400), 210 on 2g (meets).
    Case {
        args: &[
            "--gres=gpu:mig:1",
            "--time=60",
            "--deadline=now+400minutes",
            "--comment=smartmig:class=bert-infer",
        ],
        field: "TresPerNode",
        tres: "gpu:2g.10gb:1",
        limit: Some(210),
        routed: true,
    },
    // No hint: the linear default class; due 1.5 × 10 + 60 = 75 min (the soft rule with
    // its grace): 1g takes 70 and meets it, so a short job gets a small slice.
    Case {
        args: &["--gres=gpu:mig:1", "--time=10"],
        field: "TresPerNode",
        tres: "gpu:1g.5gb:1",
        limit: Some(70),
        routed: true,
    },
    // Issue 17: a per-job count (`--gpus`) may spread over GPUs; it was checked against
    // one GPU's maximum and refused with "... has 0 GB for 2 instance(s)".
    Case {
        args: &["--gpus=mig:2", "--time=10"],
        field: "TresPerJob",
        tres: "gpu:1g.5gb:2",
        limit: Some(70),
        routed: true,
    },
    // `--gpus` lands in tres_per_job; a job that does not scale gets the smallest slice.
    Case {
        args: &[
            "--gpus=mig:1",
            "--time=30",
            "--comment=smartmig:speedup=1,1,1,1,1",
        ],
        field: "TresPerJob",
        tres: "gpu:1g.5gb:1",
        limit: Some(30),
        routed: true,
    },
    // 12 GB rules out 1g.5gb and 2g.10gb; 3g needs 20 × 7/3 = 46.7 min, due in 2 h.
    Case {
        args: &[
            "--gres=gpu:mig:1",
            "--time=20",
            "--comment=run42 smartmig:class=bert-infer;gpumem=12G;due=2h",
        ],
        field: "TresPerNode",
        tres: "gpu:3g.20gb:1",
        limit: Some(47),
        routed: true,
    },
    // Two instances of one type.
    Case {
        args: &[
            "--gres=gpu:mig:2",
            "--time=10",
            "--comment=smartmig:speedup=1,1,1,1,1",
        ],
        field: "TresPerNode",
        tres: "gpu:1g.5gb:2",
        limit: Some(10),
        routed: true,
    },
    // resnet-train without --time: 60 min estimate on 7g, due 90 + 60; 2g needs 60 × 2.868
    // / 1.765 = 97.5 (meets), 1g 172 (misses). The limit stays the partition's.
    Case {
        args: &["--gres=gpu:mig:1", "--comment=smartmig:class=resnet-train"],
        field: "TresPerNode",
        tres: "gpu:2g.10gb:1",
        limit: None,
        routed: true,
    },
    // `--time` given on 1g: 70 min there is 10 on 7g; as in case 2, 1g and 70.
    Case {
        args: &[
            "--gres=gpu:mig:1",
            "--time=70",
            "--comment=smartmig:class=bert-infer;time-on=1g",
        ],
        field: "TresPerNode",
        tres: "gpu:1g.5gb:1",
        limit: Some(70),
        routed: true,
    },
    // A concrete type is validated and left alone, time included.
    Case {
        args: &["--gres=gpu:3g.20gb:1", "--time=10"],
        field: "TresPerNode",
        tres: "gpu:3g.20gb:1",
        limit: Some(10),
        routed: false,
    },
    // Untyped requests are left alone with route_untyped = false.
    Case {
        args: &["--gres=gpu:1", "--time=10"],
        field: "TresPerNode",
        tres: "gpu:1",
        limit: Some(10),
        routed: false,
    },
];

#[test]
fn a_matrix_of_requests_lands_on_the_expected_type_and_limit_and_runs() {
    skip_unless_slurm!();
    let (_g, c) = start();
    let mut ids = Vec::new();
    for case in CASES {
        let mut args = case.args.to_vec();
        args.extend(["--wrap", "sleep 1"]);
        let (id, stderr) = c
            .sbatch(&args)
            .unwrap_or_else(|e| panic!("{:?} refused: {e}\n{}", case.args, c.log_tails()));
        eprintln!("sbatch {:?}: {}", case.args, stderr.trim());
        let job = c.job(id);
        assert_eq!(
            job.get(case.field),
            Some(&tres(case.tres)),
            "{:?}: {job:?}",
            case.args
        );
        let limit = job.get("TimeLimit").map(String::as_str).unwrap_or("");
        assert_eq!(minutes(limit), case.limit, "{:?}: TimeLimit={limit}", case.args);
        assert_eq!(
            stderr.contains("smartmig: routed to gpu:"),
            case.routed,
            "{:?}: sbatch said {stderr:?}",
            case.args
        );
        // A routed job carries what the user asked (the controller re-routes only those);
        // an explicit request none.
        let mark = job.get("AdminComment").cloned().unwrap_or_default();
        let from = smartmig_core::routing::RoutedFrom::find(&mark);
        assert_eq!(
            from.is_some(),
            case.routed,
            "{:?}: AdminComment={mark:?}",
            case.args
        );
        if case.routed {
            let ty = case.tres.rsplit_once(':').map_or("", |(a, _)| a);
            assert!(
                stderr.contains(ty),
                "{:?}: info line {stderr:?} should name {ty}",
                case.args
            );
            let asked = from.unwrap().tres.iter().flatten().any(|t| t.contains(":mig"));
            assert!(
                asked,
                "{:?}: the mark keeps the request as written: {mark}",
                case.args
            );
            // And what it was routed to, as this Slurm shows the job's request.
            let now = c.job_tres(id);
            assert!(
                smartmig_core::routing::RoutedFrom::find_current(&mark, &now).is_some(),
                "{:?}: the mark names the routed request {now:?}: {mark}",
                case.args
            );
        }
        ids.push(id);
    }
    // Every job runs to completion on its fake instances (the untyped one too).
    for id in ids {
        c.wait_job(id, &["COMPLETED"], Duration::from_secs(90));
    }
    assert!(
        c.ctld_log().contains("job_submit/smartmig: loaded"),
        "{}",
        c.log_tails()
    );
}

#[test]
fn bad_requests_are_refused_with_their_reason() {
    skip_unless_slurm!();
    let (_g, c) = start();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--gres=gpu:mig:8"],
            "asks for 8 instances; one GPU holds at most 7",
        ),
        (
            &["--gres=gpu:mig:1,gpu:3g.20gb:1"],
            "mixes gpu:mig with concrete GPU types",
        ),
        (
            &["--gres=gpu:mig:1", "--comment=smartmig:clas=x"],
            "unknown hint `clas`",
        ),
        (
            &["--gres=gpu:mig:1", "--comment=smartmig:class=nope"],
            "unknown class `nope`",
        ),
        (
            &["--gres=gpu:mig:1", "--comment=smartmig:gpumem=30G"],
            "no MIG slice in the cluster has 30 GB",
        ),
        (
            &["--gres=gpu:mig:1", "--time=120", "--deadline=now+30minutes"],
            "--deadline: no MIG slice present can finish the job in time",
        ),
    ];
    for (args, reason) in cases {
        let mut all = args.to_vec();
        all.extend(["--wrap", "true"]);
        match c.sbatch(&all) {
            Ok((id, _)) => panic!("{args:?} accepted as job {id}: {:?}", c.job(id)),
            Err(stderr) => assert!(
                stderr.contains("sbatch: error: smartmig: ") && stderr.contains(reason),
                "{args:?}: expected {reason:?}, sbatch said {stderr:?}"
            ),
        }
    }
    // Concrete types are Slurm's to check, whatever the name and count: one this node
    // lacks, and 3 × 3g.20gb per node (one A100-40GB holds at most 2, and this node has 2
    // in all). The plugin passes both; whatever Slurm answers is not smartmig's refusal.
    for args in [&["--gres=gpu:5g.50gb:1"][..], &["--gres=gpu:3g.20gb:3"][..]] {
        let mut all = args.to_vec();
        all.extend(["--hold", "--wrap", "true"]);
        match c.sbatch(&all) {
            Ok((id, stderr)) => {
                assert!(!stderr.contains("smartmig"), "{args:?}: {stderr}");
                let asked = args[0].trim_start_matches("--gres=");
                assert_eq!(c.job(id)["TresPerNode"], tres(asked), "{args:?}");
            }
            Err(stderr) => assert!(!stderr.contains("smartmig"), "{args:?}: {stderr}"),
        }
    }
    // A 0-count GPU entry asks for no GPU (Slurm drops it): the plugin passes it on.
    for zero in ["--gres=gpu:0", "--gres=gpu:mig:0"] {
        match c.sbatch(&[zero, "--wrap", "true"]) {
            Ok((id, stderr)) => {
                assert!(!stderr.contains("smartmig"), "{zero}: {stderr}");
                c.wait_job(id, &["COMPLETED"], Duration::from_secs(30));
            }
            Err(stderr) => assert!(!stderr.contains("smartmig"), "{zero}: {stderr}"),
        }
    }
    // Jobs without GPUs are not affected.
    let (id, stderr) = c.sbatch(&["--wrap", "true"]).expect("a CPU job is accepted");
    assert!(!stderr.contains("smartmig"), "{stderr}");
    c.wait_job(id, &["COMPLETED"], Duration::from_secs(30));
}

#[test]
fn scontrol_update_to_gpu_mig_goes_through_job_modify() {
    skip_unless_slurm!();
    let (_g, c) = start();
    let (id, _) = c
        .sbatch(&["--hold", "--gres=gpu:1g.5gb:1", "--time=10", "--wrap", "true"])
        .unwrap();
    assert_eq!(c.job(id)["TresPerNode"], tres("gpu:1g.5gb:1"));
    // No hint: default (linear) class, TimeLimit 60 on 7g, due 90 + 60: 3g needs 140
    // (meets), 2g 210; so 3g and 60 × 7/3 → 140.
    let out = c.scontrol(&["update", &format!("jobid={id}"), "Gres=gpu:mig:1", "TimeLimit=60"]);
    assert!(
        out.status.success(),
        "update: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = c.job(id);
    assert_eq!(job["TresPerNode"], tres("gpu:3g.20gb:1"), "{job:?}");
    assert_eq!(minutes(&job["TimeLimit"]), Some(140), "{job:?}");
    assert!(c.ctld_log().contains("job_modify"), "{}", c.log_tails());
    // A bad update is refused and leaves the job as it was.
    let out = c.scontrol(&["update", &format!("jobid={id}"), "Gres=gpu:mig:9"]);
    assert!(!out.status.success(), "Gres=gpu:mig:9 was accepted");
    assert_eq!(c.job(id)["TresPerNode"], tres("gpu:3g.20gb:1"));
    let out = c.scontrol(&["release", &id.to_string()]);
    assert!(out.status.success());
    c.wait_job(id, &["COMPLETED"], Duration::from_secs(60));
}

/// An ordinary user (not root, SlurmUser or a Slurm admin), as users run sbatch and
/// scontrol.
const USER: Option<u32> = Some(65534);

#[test]
fn an_ordinary_users_submission_and_own_update_are_routed_and_the_admin_comment_is_kept() {
    skip_unless_slurm!();
    let (_g, c) = start();
    // Submitted: routed, and marked for re-routing (Slurm checks the admin comment of a
    // submission before the plugin writes it).
    let (id, stderr) = c
        .sbatch_as(
            USER,
            &["--hold", "--gres=gpu:mig:1", "--time=60", "--wrap", "true"],
        )
        .unwrap_or_else(|e| panic!("an ordinary user's gpu:mig job was refused: {e}"));
    assert!(stderr.contains("routed to"), "{stderr}");
    let job = c.job(id);
    assert_eq!(job["UserId"].split('(').next(), Some("nobody"), "{job:?}");
    assert_eq!(job["TresPerNode"], tres("gpu:3g.20gb:1"), "{job:?}");
    assert!(job["AdminComment"].contains("smartmig-routed="), "{job:?}");
    // The same user's update: Slurm refuses a non-admin's update that sets the admin
    // comment, even one the plugin set, so routing an update must not touch it.
    let (id2, _) = c
        .sbatch_as(
            USER,
            &["--hold", "--gres=gpu:1g.5gb:1", "--time=10", "--wrap", "true"],
        )
        .unwrap();
    let out = c.client_as(
        USER,
        "scontrol",
        &[
            "update",
            &format!("jobid={id2}"),
            "Gres=gpu:mig:1",
            "TimeLimit=60",
        ],
    );
    assert!(
        out.status.success(),
        "the owner's update: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(c.job(id2)["TresPerNode"], tres("gpu:3g.20gb:1"));
    // An admin's update keeps the admin comment a site wrote (an update carries none).
    let out = c.scontrol(&["update", &format!("jobid={id2}"), "AdminComment=ticket-4711"]);
    assert!(out.status.success());
    let out = c.scontrol(&[
        "update",
        &format!("jobid={id2}"),
        "Gres=gpu:mig:2",
        "TimeLimit=60",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let job = c.job(id2);
    assert_eq!(job["TresPerNode"], tres("gpu:3g.20gb:2"), "{job:?}");
    assert_eq!(job["AdminComment"], "ticket-4711", "{job:?}");
    for j in [id, id2] {
        assert!(c.client("scancel", &[&j.to_string()]).status.success());
    }
}

/// Slurm 22.05 calls the plugin's init/fini on reconfigure only when JobSubmitPlugins
/// changes; from 23.11 on a reconfigure re-executes slurmctld, which loads the plugin
/// afresh. Either way the plugin reloads smartmig.toml itself when the file changes.
#[test]
fn a_changed_config_takes_effect_and_a_broken_one_keeps_the_last_good() {
    skip_unless_slurm!();
    let (_g, c) = start();
    let submit = || {
        let (id, _) = c
            .sbatch(&["--gres=gpu:mig:1", "--time=60", "--hold", "--wrap", "true"])
            .unwrap();
        c.job(id)["TresPerNode"].clone()
    };
    // Linear default class, due 1.5 × 60 + 60 = 150 min: 3g (140 min).
    assert_eq!(submit(), tres("gpu:3g.20gb:1"));
    // A site class that does not scale becomes the default: the smallest slice wins.
    // The plugin's watcher thread reads it within a second, without a reconfigure.
    c.write_smartmig_toml_and_wait(
        &format!(
            "{SMARTMIG_TOML}default_class = \"flat\"\n[[routing.class]]\nname = \"flat\"\nspeedup = [1, 1, 1, 1, 1]\n"
        ),
        "job_submit/smartmig: reloaded",
    );
    assert_eq!(submit(), tres("gpu:1g.5gb:1"));
    // A reconfigure keeps it (24.11 re-executes slurmctld, which loads the file afresh).
    c.reconfigure();
    assert_eq!(submit(), tres("gpu:1g.5gb:1"));
    // A broken edit is reported and the last good config stays in force.
    c.write_smartmig_toml_and_wait(&format!("{SMARTMIG_TOML}slak = 2\n"), "keeping the previous one");
    assert_eq!(submit(), tres("gpu:1g.5gb:1"));
    assert!(c.ctld_log().contains("slak"), "{}", c.log_tails());
}

/// A reconfigure that takes smartmig out of JobSubmitPlugins and one that puts it back:
/// on 22.05 slurmctld calls `fini` (which stops the plugin's watcher thread) and `init`
/// again in the same process; from 23.11 a reconfigure starts slurmctld afresh. Either
/// way the plugin routes again afterwards, and its new watcher reads a changed file.
#[test]
fn the_plugin_taken_out_and_put_back_by_reconfigure_routes_and_watches_again() {
    skip_unless_slurm!();
    let (_g, c) = start();
    let submit = || {
        c.sbatch(&["--gres=gpu:mig:1", "--time=60", "--hold", "--wrap", "true"])
            .map(|(id, _)| c.job(id)["TresPerNode"].clone())
    };
    assert_eq!(submit().unwrap(), tres("gpu:3g.20gb:1"));
    let conf = std::fs::read_to_string(&c.conf).unwrap();
    assert!(conf.contains("JobSubmitPlugins=smartmig\n"), "{conf}");
    std::fs::write(&c.conf, conf.replace("JobSubmitPlugins=smartmig\n", "")).unwrap();
    c.reconfigure();
    // Without the plugin nobody routes `mig` (Slurm keeps a held job's unknown type).
    match submit() {
        Ok(t) => assert_eq!(t, tres("gpu:mig:1")),
        Err(e) => assert!(!e.contains("smartmig"), "{e}"),
    }
    let loads = c.ctld_log().matches("job_submit/smartmig: loaded").count();
    std::fs::write(&c.conf, &conf).unwrap();
    c.reconfigure();
    c.wait_ctld_log("job_submit/smartmig: loaded", loads + 1);
    assert_eq!(submit().unwrap(), tres("gpu:3g.20gb:1"));
    c.write_smartmig_toml_and_wait(
        &format!(
            "{SMARTMIG_TOML}default_class = \"flat\"\n[[routing.class]]\nname = \"flat\"\nspeedup = [1, 1, 1, 1, 1]\n"
        ),
        "job_submit/smartmig: reloaded",
    );
    assert_eq!(submit().unwrap(), tres("gpu:1g.5gb:1"));
    assert!(
        !c.ctld_log().contains("watcher thread is still reading"),
        "fini left the watcher behind:\n{}",
        c.log_tails()
    );
}

#[test]
fn a_broken_config_at_start_refuses_only_gpu_mig_requests() {
    skip_unless_slurm!();
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut opts = Options::two_nodes();
    opts.smartmig_toml = format!("{SMARTMIG_TOML}slak = 2\n");
    let c = Cluster::start(&opts);
    let e = c.sbatch(&["--gres=gpu:mig:1", "--wrap", "true"]).unwrap_err();
    assert!(
        e.contains("automatic MIG routing is unavailable") && e.contains("slak"),
        "{e}"
    );
    let (id, _) = c
        .sbatch(&["--gres=gpu:3g.20gb:1", "--hold", "--wrap", "true"])
        .unwrap();
    assert_eq!(c.job(id)["TresPerNode"], tres("gpu:3g.20gb:1"));
    let (id, _) = c.sbatch(&["--wrap", "true"]).expect("CPU job accepted");
    c.wait_job(id, &["COMPLETED"], Duration::from_secs(30));
    // Fixing the file brings routing back without a restart.
    c.write_smartmig_toml_and_wait(slurm::SMARTMIG_TOML, "job_submit/smartmig: reloaded");
    let (id, _) = c
        .sbatch(&["--gres=gpu:mig:1", "--time=10", "--hold", "--wrap", "true"])
        .unwrap();
    assert_eq!(c.job(id)["TresPerNode"], tres("gpu:1g.5gb:1"));
}

/// With `[controller.central] padding`, Slurm could give an untyped GPU request a padding
/// record: the plugin refuses such requests (unless it routes them), and nobody can ask for
/// a padding type by name; typed and `gpu:mig` requests go on as before.
#[test]
fn with_padding_untyped_gpu_requests_and_padding_types_are_refused_and_the_rest_goes_on() {
    skip_unless_slurm!();
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut opts = Options::two_nodes();
    opts.smartmig_toml = format!("{SMARTMIG_TOML}[controller.central]\npadding = true\n");
    let c = Cluster::start(&opts);
    for args in [&["--gres=gpu:1"][..], &["--gpus=1"][..]] {
        let mut all = args.to_vec();
        all.extend(["--wrap", "true"]);
        let e = c.sbatch(&all).unwrap_err();
        assert!(
            e.contains("sbatch: error: smartmig: ") && e.contains("padding records"),
            "{args:?}: {e}"
        );
    }
    let e = c
        .sbatch(&["--gres=gpu:pad-3g.20gb:1", "--wrap", "true"])
        .unwrap_err();
    assert!(
        e.contains("sbatch: error: smartmig: ") && e.contains("`pad-3g.20gb` is a padding record"),
        "{e}"
    );
    let (id, _) = c
        .sbatch(&["--gres=gpu:3g.20gb:1", "--hold", "--wrap", "true"])
        .unwrap();
    assert_eq!(c.job(id)["TresPerNode"], tres("gpu:3g.20gb:1"));
    let (id, _) = c
        .sbatch(&["--gres=gpu:mig:1", "--time=10", "--wrap", "true"])
        .unwrap();
    c.wait_job(id, &["COMPLETED"], Duration::from_secs(30));
    // Routing untyped requests makes them typed: nothing left to refuse.
    c.write_smartmig_toml_and_wait(
        &format!("{SMARTMIG_TOML}route_untyped = true\n[controller.central]\npadding = true\n"),
        "job_submit/smartmig: reloaded",
    );
    let (id, _) = c
        .sbatch(&["--gres=gpu:1", "--time=10", "--hold", "--wrap", "true"])
        .unwrap();
    assert_ne!(c.job(id)["TresPerNode"], tres("gpu:1"));
}

/// The job of the snapshot tests: bert-infer, 60 minutes on a full GPU, due in 400.
const SNAPSHOT_JOB: [&str; 7] = [
    "--gres=gpu:mig:1",
    "--time=60",
    "--deadline=now+400minutes",
    "--comment=smartmig:class=bert-infer",
    "--hold",
    "--wrap",
    "true",
];

/// A fresh snapshot where 2g.10gb is busy and 3g.20gb free: [`SNAPSHOT_JOB`] gets a 3g
/// (140 min meets 400) where the static rule gives it a 2g.
fn snapshot_with_a_free_3g() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    format!(
        r#"{{"version":1,"generated_at":{now},"soon_free_within_s":300,"queue_pressure":0.5,
        "types":{{"2g.10gb":{{"free":0,"soon_free":0}},"3g.20gb":{{"free":1,"soon_free":0}},
        "4g.20gb":{{"free":1,"soon_free":0}},"1g.5gb":{{"free":2,"soon_free":0}}}}}}"#
    )
}

/// Submits [`SNAPSHOT_JOB`] and checks that the snapshot steered it to a free 3g.
fn routed_to_the_free_3g(c: &Cluster) {
    let (id, stderr) = c.sbatch(&SNAPSHOT_JOB).unwrap();
    assert_eq!(c.job(id)["TresPerNode"], tres("gpu:3g.20gb:1"), "{stderr}");
    assert_eq!(minutes(&c.job(id)["TimeLimit"]), Some(140));
    assert!(stderr.contains("free now"), "{stderr}");
}

#[test]
fn a_garbage_snapshot_does_not_stop_submissions_and_a_good_one_steers_routing() {
    skip_unless_slurm!();
    let (_g, c) = start();
    std::fs::write(c.snapshot_path(), b"{\"version\": 1, garbage").unwrap();
    c.wait_ctld_log("snapshot is not valid", 1);
    for _ in 0..2 {
        let (id, _) = c
            .sbatch(&SNAPSHOT_JOB)
            .expect("submission with a garbage snapshot");
        // Static rule: as in the matrix, 2g.10gb.
        assert_eq!(c.job(id)["TresPerNode"], tres("gpu:2g.10gb:1"));
        // The watcher reads the file again meanwhile (once a second).
        std::thread::sleep(Duration::from_millis(1100));
    }
    let log = c.ctld_log();
    assert_eq!(
        log.matches("snapshot is not valid").count(),
        1,
        "logged once:\n{log}"
    );
    std::fs::write(c.snapshot_path(), snapshot_with_a_free_3g()).unwrap();
    c.wait_ctld_log("snapshot usable again", 1);
    routed_to_the_free_3g(&c);
}

/// The plugin reads the snapshot off slurmctld's job lock: a read that hangs (a FIFO
/// whose writer writes nothing, as a hung file system would) holds up no submission, and
/// each is routed with the last snapshot read.
#[test]
fn a_snapshot_read_that_hangs_holds_up_no_submission() {
    use std::os::unix::fs::OpenOptionsExt;
    skip_unless_slurm!();
    let (_g, c) = start();
    // The first read finds no file; the snapshot is then read and used.
    c.wait_ctld_log("routing by the static rule until it is usable", 1);
    std::fs::write(c.snapshot_path(), snapshot_with_a_free_3g()).unwrap();
    c.wait_ctld_log("snapshot usable again", 1);
    let fifo = c.dir.join("run/snapshot.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    std::fs::rename(&fifo, c.snapshot_path()).unwrap();
    // A writer opens once the plugin has opened the FIFO to read; kept open and silent,
    // it leaves that read blocked.
    let start = std::time::Instant::now();
    let writer = loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(c.snapshot_path())
        {
            Ok(w) => break w,
            Err(e) => {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "the plugin never opened the snapshot: {e}\n{}",
                    c.log_tails()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    for _ in 0..3 {
        routed_to_the_free_3g(&c);
    }
    // The read returns (an empty file): the plugin reads on and says so.
    drop(writer);
    c.wait_ctld_log("snapshot is not valid", 1);
}

#[test]
fn sacct_records_the_routed_type_and_limit() {
    skip_unless_slurm!();
    if slurm::slurm_which("slurmdbd").is_none() || slurm::slurm_which("mariadbd").is_none() {
        eprintln!(
            "skipped: slurmdbd or mariadbd missing beside {} (scripts/deps.sh slurm installs them on the host)",
            slurm::install()
        );
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut opts = Options::two_nodes();
    opts.accounting = true;
    let c = Cluster::start(&opts);
    let (id, _) = c
        .sbatch(
            &CASES[0]
                .args
                .iter()
                .copied()
                .chain(["--wrap", "sleep 1"])
                .collect::<Vec<_>>(),
        )
        .unwrap();
    c.wait_job(id, &["COMPLETED"], Duration::from_secs(60));
    // Right after a job ends sacct may still show a placeholder row: poll.
    let id_s = id.to_string();
    let mut last = String::new();
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        let out = c.sacct(&[
            "-X",
            "-n",
            "--parsable2",
            "-j",
            &id_s,
            "--format=JobID,ReqTRES,AllocTRES,Timelimit,State,Comment",
        ]);
        last = String::from_utf8_lossy(&out.stdout).into_owned();
        // slurmdbd may store the completion before the comment (seen once in CI): wait for
        // both; a comment that never comes still fails the assertion below.
        let commented = last.trim().rsplit('|').next().is_some_and(|c| !c.is_empty());
        if last.contains("COMPLETED") && commented {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let row: Vec<&str> = last.trim().split('|').collect();
    assert_eq!(row.len(), 6, "sacct row {last:?}\n{}", c.log_tails());
    assert!(row[1].contains("gres/gpu:2g.10gb=1"), "ReqTRES {}", row[1]);
    assert!(row[2].contains("gres/gpu:2g.10gb=1"), "AllocTRES {}", row[2]);
    assert_eq!(minutes(row[3]), Some(210), "Timelimit {}", row[3]);
    assert_eq!(row[4], "COMPLETED");
    assert_eq!(row[5], "smartmig:class=bert-infer");

    // The simulator's sacct reader on this real dump (steps included): one job, on the
    // 2g slice it ran on, with its class from the comment.
    let dump = c.sacct(&[
        "--parsable2",
        "-j",
        &id_s,
        "--format=JobID,JobName,Submit,Start,End,Elapsed,Timelimit,ReqTRES,AllocTRES,State,Comment",
    ]);
    let text = String::from_utf8_lossy(&dump.stdout).into_owned();
    let (jobs, stats) = smartmig_sim::workload::sacct::read_sacct(text.as_bytes(), "sacct dump", false)
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(jobs.jobs.len(), 1, "{text}");
    assert!(
        stats.total_skipped() >= 1,
        "the batch step row is skipped: {stats}\n{text}"
    );
    let j = &jobs.jobs[0];
    assert_eq!(j.release, 0.0);
    assert!(
        j.times[1] > 0.0 && j.times[1] < 1.0,
        "ran about a second on the 2g: {:?}",
        j.times
    );
    assert!(
        (j.times[0] - 2.0 * j.times[1]).abs() < 1e-9,
        "twice as long on a 1g: {:?}",
        j.times
    );
    assert_eq!(jobs.classes[usize::from(j.class)], "bert-infer");
}

/// Two nodes, each slurmd in its own network namespace, one per layout: routed jobs
/// land on the node that has their type.
#[test]
fn two_nodes_in_network_namespaces_take_routed_jobs() {
    skip_unless_slurm!();
    if let Some(b) = slurm::NETNS_BINARIES.iter().find(|b| slurm::which(b).is_none()) {
        eprintln!("skipped: `{b}` missing (iproute2, util-linux)");
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut opts = Options::two_nodes();
    opts.gpus = vec![FakeGpu(vec![("4g.20gb", 1), ("3g.20gb", 1)])];
    opts.more_nodes = vec![vec![FakeGpu(vec![("2g.10gb", 1), ("1g.5gb", 2), ("3g.20gb", 1)])]];
    let c = Cluster::start(&opts);
    assert_eq!(c.nodes.len(), 2);
    // Due in 15 min, 10 on 7g: no slice meets it, so the fastest present, 4g.20gb (only
    // on the first node); and as in the matrix 2g.10gb (only on the second).
    let (a, _) = c
        .sbatch(&[
            "--gres=gpu:mig:1",
            "--time=10",
            "--comment=smartmig:due=15",
            "--wrap",
            "sleep 1",
        ])
        .unwrap();
    let mut args = CASES[0].args.to_vec();
    args.extend(["--wrap", "sleep 1"]);
    let (b, _) = c.sbatch(&args).unwrap();
    for (id, ty, node) in [(a, "4g.20gb", &c.nodes[0]), (b, "2g.10gb", &c.nodes[1])] {
        c.wait_job(id, &["COMPLETED"], Duration::from_secs(60));
        let job = c.job(id);
        assert_eq!(job["TresPerNode"], tres(&format!("gpu:{ty}:1")));
        assert_eq!(&job["NodeList"], node, "{job:?}");
    }
}

/// The requests of the storm: GPU request, comment, and whether it has a time limit.
const STORM: &[(&str, Option<&str>, bool)] = &[
    ("gpu:mig:1", None, true),
    ("gpu:mig:1", Some("smartmig:class=bert-infer"), true),
    ("gpu:mig:2", Some("smartmig:speedup=1,1,1,1,1"), true),
    ("gpu:mig:1", Some("smartmig:class=resnet-train"), false),
    (
        "gpu:mig:1",
        Some("run42 smartmig:class=bert-infer;gpumem=12G;due=2h"),
        true,
    ),
    ("gpu:mig:1", Some("smartmig:class=bert-infer;time-on=1g"), true),
    ("gpu:mig:1", Some("smartmig:class=resnet-train;due=3h"), true),
    ("gpu:3g.20gb:1", None, true),
    ("gpu:1", None, true),
    ("gpu:mig:8", None, false),
    ("gpu:mig:1", Some("smartmig:gpumem=30G"), true),
];
/// Time limits (minutes) cycled through the storm's requests that have one.
const STORM_TIMES: [u32; 5] = [5, 17, 45, 90, 240];

/// 1,000 submissions from four clients at once (held, never run): slurmctld answers every
/// one, and each lands exactly where smartmig-core's router, fed the same smartmig.toml
/// and request, puts it (type, spelling and time limit; refusals refused). The router is
/// the same on every release, so this shows the same stream routes the same on each.
#[test]
fn a_storm_of_1000_submissions_routes_each_job_as_the_router_decides() {
    skip_unless_slurm!();
    let (_g, c) = start();
    let jobs = 1000;
    let request = |i: usize| {
        let (gres, comment, timed) = STORM[i % STORM.len()];
        let time = timed.then_some(STORM_TIMES[(i / STORM.len()) % STORM_TIMES.len()]);
        (gres, comment, time)
    };
    let clients = 4;
    let results: Vec<(usize, Result<u32, String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|k| {
                let c = &c;
                s.spawn(move || {
                    (k..jobs)
                        .step_by(clients)
                        .map(|i| {
                            let (gres, comment, time) = request(i);
                            let mut args = vec![format!("--gres={gres}"), "--hold".into()];
                            args.extend(comment.map(|t| format!("--comment={t}")));
                            args.extend(time.map(|t| format!("--time={t}")));
                            args.extend(["--wrap".to_string(), "true".into()]);
                            let args: Vec<&str> = args.iter().map(String::as_str).collect();
                            (i, c.sbatch(&args).map(|(id, _)| id))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results.len(), jobs);

    let text = slurm::SMARTMIG_TOML.replace("@DIR@", &c.dir.display().to_string());
    let resolved = Config::parse(&text, "smartmig.toml")
        .unwrap()
        .resolve(None)
        .unwrap();
    let router = Router::from_resolved(&resolved).unwrap();
    let out = c.client_output("squeue", &["-h", "-t", "all", "-o", "%i|%b|%l"]);
    let shown: HashMap<u32, (String, Option<u32>)> = out
        .lines()
        .filter_map(|l| {
            let mut f = l.split('|');
            let id = f.next()?.trim().parse().ok()?;
            Some((id, (f.next()?.to_string(), minutes(f.next()?.trim()))))
        })
        .collect();
    let mut routed = 0;
    for (i, got) in &results {
        let (gres, comment, time) = request(*i);
        let asked = tres(gres);
        let job = Job {
            tres: TresStrings([Some(&asked), None, None, None]),
            name: Some("wrap"),
            comment,
            time_limit_min: time,
            ..Job::default()
        };
        match (router.route(&job, None), got) {
            (Ok(outcome), Ok(id)) => {
                let expected = match outcome {
                    Outcome::Routed(r) => {
                        routed += 1;
                        (r.tres[0].1.clone(), r.time_limit_min.or(time))
                    }
                    Outcome::Unchanged(_) => (asked.clone(), time),
                };
                assert_eq!(
                    shown.get(id),
                    Some(&expected),
                    "request {i} {:?} (job {id})",
                    request(*i)
                );
            }
            (Err(_), Err(stderr)) => {
                assert!(
                    stderr.contains("sbatch: error: smartmig: "),
                    "request {i}: {stderr}"
                )
            }
            (want, got) => panic!(
                "request {i} {:?}: router says {want:?}, Slurm {got:?}",
                request(*i)
            ),
        }
    }
    assert!(routed > jobs / 2, "only {routed} routed");
}

/// slurmctld's loader refuses a plugin built for another release, naming its version, so
/// it never runs inside a slurmctld whose structures it does not know (here: the host's
/// build loaded by the root's slurmctld at a reconfigure). Needs two releases.
#[test]
fn a_plugin_built_for_another_release_is_refused_by_slurmctld_naming_its_version() {
    skip_unless_slurm!();
    if *slurm::install() == slurm::Install::Host {
        eprintln!(
            "skipped: needs a second Slurm release ({}; scripts/e2e.sh sets it)",
            slurm::ROOT_ENV
        );
        return;
    }
    let (_g, c) = start();
    let stranger = slurm::host_plugin_so();
    let host = slurm::Install::Host.release();
    assert_ne!(host, slurm::release(), "the root's Slurm is the host's release");
    std::fs::copy(&stranger, c.dir.join("plugins/job_submit_smartmig.so")).unwrap();
    let _ = c.scontrol(&["reconfigure"]);
    let line = format!("job_submit_smartmig.so version ({host})");
    c.wait_for("slurmctld to refuse the plugin", Duration::from_secs(20), |c| {
        c.ctld_log()
            .lines()
            .any(|l| l.contains("Incompatible Slurm plugin") && l.contains(&line))
    });
    // Nothing of it ran: its init's first line is nowhere.
    assert!(!c.ctld_log().contains(&format!("built for Slurm {host}")));
}

/// The GPUs a job's `TresPerTask` asks for, as (type, count).
fn per_task_gpus(c: &Cluster, id: u32) -> Vec<(String, u64)> {
    let text = c.job(id).get("TresPerTask").cloned().unwrap_or_default();
    smartmig_core::tres::entries(&text)
        .filter_map(|e| smartmig_core::tres::parse(e).ok())
        .filter(|e| e.is_gpu())
        .map(|e| (e.gpu_type.unwrap_or("").to_string(), e.count().unwrap_or(0)))
        .collect()
}

#[test]
fn gpus_per_task_requests_are_routed_in_the_form_this_slurm_writes_and_run() {
    skip_unless_slurm!();
    let (_g, c) = start();
    // From 23.11 clients write `--gpus-per-task` as `gres/gpu:mig=1`, beside `cpu=N`.
    let (routed, said) = c
        .sbatch(&[
            "-n1",
            "--cpus-per-task=1",
            "--gpus-per-task=mig:1",
            "--time=60",
            "--wrap",
            "true",
        ])
        .unwrap_or_else(|e| panic!("--gpus-per-task=mig:1 was refused: {e}"));
    assert!(said.contains("routed to gpu:3g.20gb:1"), "{said}");
    assert_eq!(per_task_gpus(&c, routed), [("3g.20gb".to_string(), 1)]);
    let (named, said) = c
        .sbatch(&["-n1", "--gpus-per-task=1g.5gb:1", "--time=60", "--wrap", "true"])
        .unwrap_or_else(|e| panic!("--gpus-per-task=1g.5gb:1 was refused: {e}"));
    assert!(!said.contains("smartmig"), "{said}");
    assert_eq!(per_task_gpus(&c, named), [("1g.5gb".to_string(), 1)]);
    for id in [routed, named] {
        c.wait_job(id, &["COMPLETED"], Duration::from_secs(60));
    }
}
