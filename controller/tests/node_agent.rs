//! The node agent as a process: killed between destroy and create, then restarted.

use std::path::{Path, PathBuf};
use std::process::Command;

use smartmig_core::mig::{Catalogue, Layout};
use smartmig_gpu::simulated::{Faults, Simulated};
use smartmig_gpu::GpuBackend;
use smartmigd::channel::{Desired, GpuTarget, Outcome, Phase, Report};
use smartmigd::node::journal::{Ending, Journal, Record};
use smartmigd::node::spool::SpoolChannel;

fn write_config(dir: &Path) -> PathBuf {
    let p = dir.join("smartmig.toml");
    let log = dir.join("slurmd.log");
    std::fs::write(
        &p,
        format!(
            "version = 1\n\
             [controller]\nstate_dir = \"{d}/state\"\n\
             [node]\nname = \"n1\"\nbackend = \"simulated\"\nsimulated_dir = \"{d}/sim\"\n\
             channel = \"spool\"\nspool_dir = \"{d}/spool\"\ngres_conf = \"{d}/gres.conf\"\n\
             slurmd_stop = [\"sh\", \"-c\", \"echo stop >> {log}\"]\n\
             slurmd_start = [\"sh\", \"-c\", \"echo start >> {log}\"]\n\
             poll_interval_s = 0.1\n",
            d = dir.display(),
            log = log.display()
        ),
    )
    .unwrap();
    p
}

fn smartmigd(config: &Path) -> std::process::ExitStatus {
    Command::new(env!("CARGO_BIN_EXE_smartmigd"))
        .args(["node", "--once", "--config"])
        .arg(config)
        .status()
        .unwrap()
}

#[test]
fn an_agent_killed_between_destroy_and_create_finishes_the_plan_on_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = Catalogue::embedded().model("a100-40gb").unwrap().clone();
    let sim = Simulated::create_layouts(&d.join("sim"), &m, &["7g@0", "4g@0 3g@4"]).unwrap();
    // Dies (SIGABRT) right after destroy-ci and destroy-gi of the 7g are done.
    sim.set_faults(&Faults {
        abort_after_steps: Some(2),
        ..Faults::default()
    })
    .unwrap();
    let config = write_config(d);
    let spool = SpoolChannel::open(&d.join("spool"), "n1").unwrap();
    spool
        .write_desired(&Desired::new(
            9,
            Phase::Apply,
            vec![GpuTarget {
                index: 0,
                model: "a100-40gb".into(),
                from: "7g.40gb@0".into(),
                to: "3g.20gb@0,3g.20gb@4".into(),
            }],
        ))
        .unwrap();

    let first = smartmigd(&config);
    assert!(!first.success(), "the injected abort did not kill the agent");
    let st = sim.state(0, &m).unwrap();
    assert!(
        st.layout.instances().is_empty(),
        "killed before the creates: {st:?}"
    );
    assert!(Journal::open(&d.join("state")).unwrap().open_plan().is_some());
    // At most the start-up announcement (generation 0): generation 9 is not answered.
    let last = SpoolChannel::open(&d.join("spool"), "n1")
        .unwrap()
        .last_report()
        .unwrap();
    assert!(last.as_ref().is_none_or(|r| r.generation == 0), "{last:?}");

    let second = smartmigd(&config);
    assert!(second.success());
    let st = sim.state(0, &m).unwrap();
    assert_eq!(st.layout, Layout::parse(&m, "3g@0 3g@4").unwrap());
    assert!(st.is_settled());
    assert_eq!(
        sim.state(1, &m).unwrap().layout,
        Layout::parse(&m, "4g@0 3g@4").unwrap()
    );
    let j = Journal::open(&d.join("state")).unwrap();
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
    let spool = SpoolChannel::open(&d.join("spool"), "n1").unwrap();
    let r: Report = spool.last_report().unwrap().unwrap();
    assert_eq!(
        (r.generation, r.phase, r.outcome.clone()),
        (9, Phase::Apply, Outcome::Done)
    );
    assert_eq!(r.gpus[0].layout, "3g.20gb@0 3g.20gb@4");
    assert!(r.slurmd_running, "Apply leaves slurmd alone");
    assert!(!d.join("slurmd.log").exists());
    assert!(!d.join("gres.conf").exists(), "gres.conf waits for Install");
}

#[test]
fn a_missing_nvml_library_stops_the_agent_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("smartmig.toml");
    std::fs::write(
        &p,
        format!(
            "version = 1\n[controller]\nstate_dir = \"{d}/state\"\n[node]\nname = \"n1\"\nchannel = \"spool\"\nspool_dir = \"{d}/spool\"\n",
            d = dir.path().display()
        ),
    )
    .unwrap();
    if Path::new("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").exists() {
        eprintln!("skipped: this machine has NVML");
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_smartmigd"))
        .args(["node", "--once", "--config"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot use NVML (libnvidia-ml.so.1)"), "{err}");
}
