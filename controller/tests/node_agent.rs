//! The node agent as a process (`smartmigd node --once`, spool channel) on both GPU
//! backends: the simulated node and NVML on the NVML test library. Each scenario runs on
//! both (`simulated::NAME`, `nvml::NAME`) and must end the same way: a re-layout applied
//! with gres.conf staged, installed with slurmd stopped, then slurmd started; a device that
//! differs from what the central role saw left alone; a busy instance refused before any
//! step; a create error rolled back; an agent killed between destroy and create finishing
//! on restart; an interrupted plan that cannot finish rolled back.

mod backends;

use std::path::{Path, PathBuf};
use std::process::Command;

use backends::{Kind, Op, TestGpus};
use smartmigd::channel::{Desired, GpuTarget, Outcome, Phase, Report};
use smartmigd::node::journal::{Ending, Journal, Record};
use smartmigd::node::spool::SpoolChannel;

/// A node: its directory, GPUs and agent config.
struct Node {
    dir: tempfile::TempDir,
    gpus: TestGpus,
    config: PathBuf,
}

impl Node {
    /// A100-40GB GPUs in `layouts` on backend `kind`.
    fn new(kind: Kind, layouts: &[&str]) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let gpus = TestGpus::create(kind, &dir.path().join("gpus"), "a100-40gb", layouts);
        let config = write_config(dir.path(), &gpus);
        Node { dir, gpus, config }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// One `smartmigd node --once` run; its exit status and stderr.
    fn run_agent(&self) -> (std::process::ExitStatus, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_smartmigd"))
            .args(["node", "--once", "--config"])
            .arg(&self.config)
            .envs(self.gpus.env())
            .output()
            .unwrap();
        (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// Runs the agent and expects it to exit 0.
    fn agent(&self) {
        let (status, err) = self.run_agent();
        assert!(
            status.success(),
            "smartmigd node failed ({:?}): {err}",
            self.gpus.kind
        );
    }

    fn desire(&self, generation: u64, phase: Phase, gpus: &[(u32, &str, &str)]) {
        let ch = SpoolChannel::open(&self.path("spool"), "n1").unwrap();
        let mut d = Desired::new(
            generation,
            phase,
            gpus.iter()
                .map(|(i, from, to)| GpuTarget {
                    index: *i,
                    model: "a100-40gb".into(),
                    from: from.to_string(),
                    to: to.to_string(),
                })
                .collect(),
        );
        if phase == Phase::Install {
            d.stop_slurmd = true;
            d.slurmd_budget_s = 60.0;
        }
        ch.write_desired(&d).unwrap();
    }

    fn report(&self) -> Report {
        SpoolChannel::open(&self.path("spool"), "n1")
            .unwrap()
            .last_report()
            .unwrap()
            .expect("the agent wrote no report")
    }

    fn journal(&self) -> Journal {
        Journal::open(&self.path("state")).unwrap()
    }

    /// Whether the journal holds no re-layout (the agent may note the node's layouts).
    fn no_step_journaled(&self) -> bool {
        !self
            .journal()
            .records()
            .iter()
            .any(|r| matches!(r, Record::Begin { .. } | Record::Step { .. }))
    }

    fn slurmd_log(&self) -> String {
        std::fs::read_to_string(self.path("slurmd.log")).unwrap_or_default()
    }

    /// gres.conf's device lines as (Type, number of files).
    fn gres_lines(&self) -> Vec<(String, usize)> {
        let text = std::fs::read_to_string(self.path("gres.conf")).unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with("NodeName=n1"))
            .map(|l| {
                let ty = l
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("Type="))
                    .unwrap_or_default();
                let files = l
                    .split_whitespace()
                    .find_map(|w| {
                        w.strip_prefix("File=")
                            .or_else(|| w.strip_prefix("MultipleFiles="))
                    })
                    .unwrap_or_default();
                for f in files.split(',') {
                    assert!(
                        Path::new(f).exists(),
                        "gres.conf names {f}, which does not exist:\n{text}"
                    );
                }
                (ty.to_string(), files.split(',').count())
            })
            .collect()
    }
}

fn write_config(dir: &Path, gpus: &TestGpus) -> PathBuf {
    let p = dir.join("smartmig.toml");
    let log = dir.join("slurmd.log");
    std::fs::write(
        &p,
        format!(
            "version = 1\n\
             [controller]\nstate_dir = \"{d}/state\"\n\
             [node]\nname = \"n1\"\n{backend}\
             channel = \"spool\"\nspool_dir = \"{d}/spool\"\ngres_conf = \"{d}/gres.conf\"\n\
             slurmd_stop = [\"sh\", \"-c\", \"echo stop >> {log}\"]\n\
             slurmd_start = [\"sh\", \"-c\", \"echo start >> {log}\"]\n\
             poll_interval_s = 0.1\nmetrics_listen = \"\"\n",
            d = dir.display(),
            backend = gpus.config_lines(),
            log = log.display()
        ),
    )
    .unwrap();
    p
}

/// Files per gres.conf line: the simulated node names one device per instance; NVML the
/// GPU and the two capability devices, as Slurm's AutoDetect does.
fn files_per_line(kind: Kind) -> usize {
    match kind {
        Kind::Simulated => 1,
        Kind::Nvml => 3,
    }
}

on_both_backends!(
    apply_stages_gres_conf_install_writes_it_and_stops_slurmd_start_starts_it,
    a_device_that_differs_from_what_central_saw_is_not_touched,
    a_plan_that_destroys_a_busy_instance_is_refused_before_any_step,
    a_create_error_rolls_back_to_from_and_the_report_names_it,
    an_agent_killed_between_destroy_and_create_finishes_the_plan_on_restart,
    recovery_rolls_back_to_from_when_the_interrupted_plan_cannot_finish,
);

fn apply_stages_gres_conf_install_writes_it_and_stops_slurmd_start_starts_it(kind: Kind) {
    let n = Node::new(kind, &["7g@0", "4g@0 3g@4"]);
    n.desire(1, Phase::Apply, &[(0, "7g.40gb@0", "3g.20gb@0,3g.20gb@4")]);
    n.agent();
    let r = n.report();
    assert_eq!((r.generation, r.outcome.clone()), (1, Outcome::Done));
    assert_eq!(r.gpus[0].layout, "3g.20gb@0 3g.20gb@4");
    assert_eq!(r.gpus[1].layout, "4g.20gb@0 3g.20gb@4");
    assert!(r.slurmd_running, "Apply never touches slurmd");
    assert_eq!(n.gpus.layout(0), "3g.20gb@0 3g.20gb@4");
    let j = n.journal();
    assert!(j.is_closed());
    let steps = j
        .records()
        .iter()
        .filter(|r| matches!(r, Record::Step { .. }))
        .count();
    assert_eq!(steps, 6);
    assert!(j
        .staged(1)
        .is_some_and(|l| l.lines().filter(|l| l.starts_with("NodeName=n1")).count() == 4));
    assert!(!n.path("gres.conf").exists(), "gres.conf waits for Install");
    assert_eq!(n.slurmd_log(), "");
    // The same generation and phase is not handled twice.
    n.agent();
    assert_eq!(n.journal().records().len(), j.records().len());

    n.desire(1, Phase::Install, &[(0, "7g.40gb@0", "3g.20gb@0,3g.20gb@4")]);
    n.agent();
    let r = n.report();
    assert_eq!((r.outcome.clone(), r.slurmd_running), (Outcome::Done, false));
    let k = files_per_line(kind);
    assert_eq!(
        n.gres_lines(),
        [("3g.20gb", k), ("3g.20gb", k), ("4g.20gb", k), ("3g.20gb", k)].map(|(t, k)| (t.to_string(), k))
    );
    assert_eq!(n.slurmd_log(), "stop\n");

    n.desire(1, Phase::Start, &[]);
    n.agent();
    let r = n.report();
    assert_eq!((r.outcome, r.slurmd_running), (Outcome::Done, true));
    assert_eq!(n.slurmd_log(), "stop\nstart\n");
}

fn a_device_that_differs_from_what_central_saw_is_not_touched(kind: Kind) {
    let n = Node::new(kind, &["7g@0"]);
    n.desire(1, Phase::Apply, &[(0, "4g@0 3g@4", "3g@0 3g@4")]);
    n.agent();
    let r = n.report();
    let Outcome::Failed { error } = &r.outcome else {
        panic!("{r:?}")
    };
    assert!(
        error.contains("device has `7g.40gb@0`") && error.contains("nothing changed"),
        "{error}"
    );
    assert_eq!(n.gpus.layout(0), "7g.40gb@0");
    assert!(n.no_step_journaled());
    assert!(!n.path("gres.conf").exists());
    assert_eq!(n.slurmd_log(), "");
}

fn a_plan_that_destroys_a_busy_instance_is_refused_before_any_step(kind: Kind) {
    let n = Node::new(kind, &["4g@0 3g@4"]);
    n.gpus.mark_busy(0, "4g@0");
    n.desire(1, Phase::Apply, &[(0, "4g@0 3g@4", "2g@0 2g@2 3g@4")]);
    n.agent();
    let r = n.report();
    assert!(
        matches!(&r.outcome, Outcome::Failed { error } if error.contains("busy instance(s) 4g.20gb@0")),
        "{r:?}"
    );
    assert_eq!(n.gpus.layout(0), "4g.20gb@0 3g.20gb@4");
    assert!(n.no_step_journaled());
}

fn a_create_error_rolls_back_to_from_and_the_report_names_it(kind: Kind) {
    let n = Node::new(kind, &["7g@0"]);
    n.gpus
        .fail(Op::CreateGi, Some(0), "NVML_ERROR_INSUFFICIENT_RESOURCES", 1);
    n.desire(1, Phase::Apply, &[(0, "7g@0", "3g@0 3g@4")]);
    n.agent();
    let r = n.report();
    let Outcome::Failed { error } = &r.outcome else {
        panic!("{r:?}")
    };
    assert!(
        error.contains("NVML_ERROR_INSUFFICIENT_RESOURCES") && error.contains("create-gi 3g.20gb@4"),
        "{error}"
    );
    assert_eq!(n.gpus.layout(0), "7g.40gb@0");
    assert_eq!(r.gpus[0].layout, "7g.40gb@0");
    let j = n.journal();
    assert!(j.is_closed());
    assert!(
        j.records().iter().any(|r| matches!(
            r,
            Record::End {
                ending: Ending::RolledBack { .. },
                ..
            }
        )),
        "{:?}",
        j.records()
    );
    assert!(r.slurmd_running);
    assert_eq!(n.slurmd_log(), "");
    assert!(!n.path("gres.conf").exists());
}

fn an_agent_killed_between_destroy_and_create_finishes_the_plan_on_restart(kind: Kind) {
    let n = Node::new(kind, &["7g@0", "4g@0 3g@4"]);
    // Dies (SIGABRT) right after destroy-ci and destroy-gi of the 7g are done.
    n.gpus.abort_after(2);
    n.desire(9, Phase::Apply, &[(0, "7g.40gb@0", "3g.20gb@0,3g.20gb@4")]);
    let (first, _) = n.run_agent();
    assert!(!first.success(), "the injected abort did not kill the agent");
    let (l, _) = n.gpus.state(0);
    assert!(l.instances().is_empty(), "killed before the creates: {l:?}");
    assert!(n.journal().open_plan().is_some());
    // At most the start-up announcement (generation 0): generation 9 is not answered.
    let last = SpoolChannel::open(&n.path("spool"), "n1")
        .unwrap()
        .last_report()
        .unwrap();
    assert!(last.as_ref().is_none_or(|r| r.generation == 0), "{last:?}");

    n.agent();
    assert_eq!(n.gpus.layout(0), "3g.20gb@0 3g.20gb@4");
    assert_eq!(n.gpus.layout(1), "4g.20gb@0 3g.20gb@4");
    let j = n.journal();
    assert!(j.is_closed());
    assert!(
        j.records().iter().any(|r| matches!(
            r,
            Record::End {
                generation: 9,
                ending: Ending::Done
            }
        )),
        "{:?}",
        j.records()
    );
    assert!(j
        .staged(9)
        .is_some_and(|l| l.lines().filter(|l| l.starts_with("NodeName=n1")).count() == 4));
    let r = n.report();
    assert_eq!(
        (r.generation, r.phase, r.outcome.clone()),
        (9, Phase::Apply, Outcome::Done)
    );
    assert_eq!(r.gpus[0].layout, "3g.20gb@0 3g.20gb@4");
    assert!(r.slurmd_running, "Apply leaves slurmd alone");
    assert_eq!(n.slurmd_log(), "");
    assert!(!n.path("gres.conf").exists(), "gres.conf waits for Install");
}

fn recovery_rolls_back_to_from_when_the_interrupted_plan_cannot_finish(kind: Kind) {
    let n = Node::new(kind, &["7g@0"]);
    // A previous run began generation 5, destroyed the 7g and created 3g@0 without its
    // compute instance, then died.
    n.gpus.by_hand(0, Op::DestroyCi, "7g@0");
    n.gpus.by_hand(0, Op::DestroyGi, "7g@0");
    n.gpus.by_hand(0, Op::CreateGi, "3g@0");
    {
        let mut j = Journal::open(&n.path("state")).unwrap();
        j.append(Record::Begin {
            generation: 5,
            gpus: vec![GpuTarget {
                index: 0,
                model: "a100-40gb".into(),
                from: "7g@0".into(),
                to: "3g@0 3g@4".into(),
            }],
            padding: Default::default(),
            order: Vec::new(),
        })
        .unwrap();
    }
    n.gpus.fail(Op::CreateGi, None, "NVML_ERROR_UNKNOWN", 0);
    n.agent();
    let r = n.report();
    assert_eq!(r.generation, 5);
    assert!(
        matches!(&r.outcome, Outcome::Failed { error } if error.contains("could not be finished") && error.contains("NVML_ERROR_UNKNOWN")),
        "{r:?}"
    );
    assert_eq!(n.gpus.layout(0), "7g.40gb@0");
    assert!(n.journal().is_closed());
}

/// The NVML backend only: without the driver's mig-minors file the agent cannot name the
/// MIG device files, so it reports the re-layout failed rather than write a gres.conf
/// without them.
#[test]
fn nvml_without_mig_minors_the_agent_reports_a_failure_and_writes_no_gres_conf() {
    let n = Node::new(Kind::Nvml, &["7g@0"]);
    let minors = n.gpus.dir.join("proc/driver/nvidia-caps/mig-minors");
    std::fs::remove_file(&minors).unwrap();
    n.desire(1, Phase::Apply, &[(0, "7g.40gb@0", "3g.20gb@0,3g.20gb@4")]);
    let (_, err) = n.run_agent();
    let r = SpoolChannel::open(&n.path("spool"), "n1")
        .unwrap()
        .last_report()
        .unwrap();
    let failed = r.as_ref().is_some_and(
        |r| matches!(&r.outcome, Outcome::Failed { error } if error.contains(&minors.display().to_string())),
    );
    assert!(
        failed || err.contains(&minors.display().to_string()),
        "{r:?}\n{err}"
    );
    assert!(
        !n.path("gres.conf").exists(),
        "a gres.conf without MIG device files was written"
    );
    assert_eq!(
        n.slurmd_log(),
        "",
        "slurmd was stopped for a gres.conf that was not written"
    );
}

#[test]
fn a_missing_nvml_library_stops_the_agent_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("smartmig.toml");
    std::fs::write(
        &p,
        format!(
            "version = 1\n[controller]\nstate_dir = \"{d}/state\"\n[node]\nname = \"n1\"\nchannel = \"spool\"\nspool_dir = \"{d}/spool\"\nnvml_library = \"{d}/libnvidia-ml.so.1\"\n",
            d = dir.path().display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_smartmigd"))
        .args(["node", "--once", "--config"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "cannot use NVML ({}/libnvidia-ml.so.1)",
            dir.path().display()
        )),
        "{err}"
    );
}
