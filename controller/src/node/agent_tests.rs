use super::*;
use crate::node::spool::SpoolChannel;
use smartmig_gpu::simulated::{FailFault, Faults, Simulated};

struct Node {
    dir: tempfile::TempDir,
    sim: Simulated,
    model: GpuModel,
}

impl Node {
    fn new(layouts: &[&str]) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let model = Catalogue::embedded().model("a100-40gb").unwrap().clone();
        let sim = Simulated::create_layouts(&dir.path().join("sim"), &model, layouts).unwrap();
        Node { dir, sim, model }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn agent(&self) -> Agent {
        let log = self.path("slurmd.log").display().to_string();
        let cfg = AgentConfig {
            node: "n1".into(),
            driver: Driver::R510,
            catalogue: Catalogue::embedded(),
            state_dir: self.path("state"),
            gres_conf: self.path("gres.conf"),
            slurmd_stop: vec!["sh".into(), "-c".into(), format!("echo stop >> {log}")],
            slurmd_start: vec!["sh".into(), "-c".into(), format!("echo start >> {log}")],
            announce_interval_s: 300.0,
            poll_interval_s: 1.0,
            idle_poll_interval_s: 100.0,
        };
        Agent::new(cfg, Box::new(self.sim.clone()), Box::new(self.spool())).unwrap()
    }

    /// Every later read of GPU `gpu` fails with NVML error `error`.
    fn fail_reads(&self, gpu: u32, error: &str) {
        self.sim
            .set_faults(&Faults {
                fail: vec![FailFault {
                    always: true,
                    ..FailFault::once("read", Some(gpu), error)
                }],
                ..Faults::default()
            })
            .unwrap();
    }

    fn spool(&self) -> SpoolChannel {
        SpoolChannel::open(&self.path("spool"), "n1").unwrap()
    }

    fn desire(&self, generation: u64, phase: Phase, gpus: &[(u32, &str, &str)]) {
        let mut d = Desired::new(
            generation,
            phase,
            gpus.iter()
                .map(|(i, from, to)| GpuTarget {
                    index: *i,
                    model: "A100-SXM4-40GB".into(),
                    from: from.to_string(),
                    to: to.to_string(),
                })
                .collect(),
        );
        if phase == Phase::Install {
            d.stop_slurmd = true;
            d.slurmd_budget_s = 60.0;
        }
        self.spool().write_desired(&d).unwrap();
    }

    /// Asks `a` to revert `generation` (7g to c5 on GPU 0) and checks that it did, with
    /// slurmd running.
    fn reverts(&self, a: &mut Agent, generation: u64) {
        self.desire(generation, Phase::Revert, &[SEVEN_TO_C5]);
        let r = a.poll().unwrap().unwrap();
        assert_eq!(
            (r.phase, &r.outcome, r.slurmd_running),
            (Phase::Revert, &Outcome::Done, true),
            "{r:?}"
        );
    }

    /// Journals the begin of `generation` (GPU 0 from 7g to two 3g) as a previous run
    /// that died would have left it.
    fn begin_seven_to_c5(&self, generation: u64) {
        let mut j = Journal::open(&self.path("state")).unwrap();
        j.append(Record::Begin {
            generation,
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

    /// Generation `generation` takes GPU 0 from 7g to c5 through Apply and Install.
    fn apply_and_install(&self, a: &mut Agent, generation: u64) {
        for phase in [Phase::Apply, Phase::Install] {
            self.desire(generation, phase, &[SEVEN_TO_C5]);
            let r = a.poll().unwrap().unwrap();
            assert_eq!((r.phase, r.outcome), (phase, Outcome::Done));
        }
    }

    /// A reboot: every instance of GPU `gpu` gone.
    fn reboot(&self, gpu: u32) {
        let mut sim = self.sim.clone();
        let st = sim.state(gpu, &self.model).unwrap();
        for i in st.layout.instances() {
            sim.apply(gpu, &self.model, Step::DestroyCompute(*i)).unwrap();
            sim.apply(gpu, &self.model, Step::DestroyGpu(*i)).unwrap();
        }
    }

    fn layout(&self, gpu: u32) -> String {
        let st = self.sim.state(gpu, &self.model).unwrap();
        assert!(st.is_settled(), "GPU {gpu} is left unsettled: {st:?}");
        let text = st.layout.display(&self.model).to_string();
        text
    }

    fn slurmd_log(&self) -> String {
        std::fs::read_to_string(self.path("slurmd.log")).unwrap_or_default()
    }

    fn gres_types(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("gres.conf"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("Type=")))
            .map(str::to_string)
            .collect()
    }
}

const SEVEN_TO_C5: (u32, &str, &str) = (0, "7g.40gb@0", "3g.20gb@0,3g.20gb@4");

#[test]
fn apply_stages_gres_conf_with_slurmd_running_install_stops_it_and_start_starts_it() {
    let n = Node::new(&["7g@0", "4g@0 3g@4"]);
    std::fs::write(n.path("gres.conf"), "AutoDetect=off\n").unwrap();
    let mut a = n.agent();
    n.desire(1, Phase::Apply, &[SEVEN_TO_C5]);
    let r = a.poll().unwrap().unwrap();
    assert_eq!(r.outcome, Outcome::Done);
    assert_eq!(r.gpus[0].layout, "3g.20gb@0 3g.20gb@4");
    assert_eq!(r.gpus[1].layout, "4g.20gb@0 3g.20gb@4");
    assert!(r.slurmd_running, "Apply never touches slurmd");
    assert_eq!(n.slurmd_log(), "");
    assert!(
        n.gres_types().is_empty(),
        "gres.conf is only staged: {:?}",
        n.gres_types()
    );
    assert!(a.journal().is_closed());
    let steps = a
        .journal()
        .records()
        .iter()
        .filter(|r| matches!(r, Record::Step { .. }))
        .count();
    assert_eq!(steps, 6);
    // The same generation and phase is not handled twice.
    assert!(a.poll().unwrap().is_none());

    n.desire(1, Phase::Install, &[SEVEN_TO_C5]);
    let r = a.poll().unwrap().unwrap();
    assert_eq!((r.outcome.clone(), r.slurmd_running), (Outcome::Done, false));
    assert_eq!(n.slurmd_log(), "stop\n");
    assert_eq!(n.gres_types(), ["3g.20gb", "3g.20gb", "4g.20gb", "3g.20gb"]);
    let gres = std::fs::read_to_string(n.path("gres.conf")).unwrap();
    assert!(
        gres.starts_with("AutoDetect=off\n"),
        "the site's line stays: {gres}"
    );
    let files: Vec<&str> = gres
        .lines()
        .filter(|l| l.starts_with("NodeName="))
        .map(|l| l.rsplit('/').next().unwrap())
        .collect();
    assert_eq!(files, ["nvidia0", "nvidia4", "nvidia8", "nvidia12"]);
    assert!(a.journal().slurmd_watchdog().is_some(), "the watchdog is armed");

    n.desire(1, Phase::Start, &[]);
    let r = a.poll().unwrap().unwrap();
    assert_eq!((r.outcome, r.slurmd_running), (Outcome::Done, true));
    assert_eq!(n.slurmd_log(), "stop\nstart\n");
    assert_eq!(a.journal().slurmd_watchdog(), None);
    assert_eq!(a.journal().layouts().unwrap()[0].layout, "3g.20gb@0 3g.20gb@4");
}

#[test]
fn padding_blocks_are_filled_with_records_of_their_own_devices_and_written_again_at_restore() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let n = Node::new(&["7g@0"]);
    std::fs::write(n.path("gres.conf"), "AutoDetect=off\n").unwrap();
    let mut a = n.agent();
    let blocks: BTreeMap<String, u32> = [("3g.20gb", 2), ("4g.20gb", 1), ("7g.40gb", 1)]
        .into_iter()
        .map(|(t, k)| (t.to_string(), k))
        .collect();
    let mut d = Desired::new(
        1,
        Phase::Apply,
        vec![GpuTarget {
            index: 0,
            model: "A100-SXM4-40GB".into(),
            from: "7g.40gb@0".into(),
            to: "4g.20gb@0,3g.20gb@4".into(),
        }],
    );
    d.padding = blocks.clone();
    n.spool().write_desired(&d).unwrap();
    assert_eq!(a.poll().unwrap().unwrap().outcome, Outcome::Done);
    n.desire(1, Phase::Install, &[]);
    assert_eq!(a.poll().unwrap().unwrap().outcome, Outcome::Done);
    // c2: one 3g.20gb of two (one padding record), the 4g.20gb block full, the 7g.40gb one
    // padded whole.
    assert_eq!(
        n.gres_types(),
        ["4g.20gb", "3g.20gb", "pad-3g.20gb", "pad-7g.40gb"]
    );
    let text = std::fs::read_to_string(n.path("gres.conf")).unwrap();
    let files: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Type=pad-"))
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("File=")))
        .collect();
    assert_eq!(files.len(), 2);
    let mut numbers = std::collections::BTreeSet::new();
    for f in &files {
        assert!(std::path::Path::new(f).starts_with(n.path("state/pad")), "{f}");
        let m = std::fs::metadata(f).unwrap();
        assert!(m.file_type().is_char_device(), "{f}");
        // A device number no driver has (not /dev/null's 1:3: Slurm's device cgroup would
        // deny that to every job not given the padding record), one per record.
        assert_eq!(
            libc::major(m.rdev()),
            smartmig_core::mig::padding::PAD_DEVICE_MAJOR,
            "{f}"
        );
        assert!(numbers.insert(m.rdev()), "{f}: a device number twice");
    }
    // After a reboot the padding comes from the file itself, with the devices' lines.
    n.desire(1, Phase::Start, &[]);
    assert_eq!(a.poll().unwrap().unwrap().outcome, Outcome::Done);
    drop(a);
    n.reboot(0);
    let mut a = n.agent();
    a.restore().unwrap();
    assert_eq!(
        n.gres_types(),
        ["4g.20gb", "3g.20gb", "pad-3g.20gb", "pad-7g.40gb"]
    );
    // A layout the blocks cannot hold is refused at Apply, before gres.conf is staged.
    let mut d = Desired::new(
        2,
        Phase::Apply,
        vec![GpuTarget {
            index: 0,
            model: "A100-SXM4-40GB".into(),
            from: "4g.20gb@0 3g.20gb@4".into(),
            to: "2g.10gb@0,2g.10gb@2,3g.20gb@4".into(),
        }],
    );
    d.padding = blocks;
    n.spool().write_desired(&d).unwrap();
    let r = a.poll().unwrap().unwrap();
    assert!(
        matches!(&r.outcome, Outcome::Failed { error } if error.contains("2g.10gb exceed its padding block") && error.ends_with("nothing changed")),
        "{r:?}"
    );
    assert_eq!(n.layout(0), "4g.20gb@0 3g.20gb@4");
}

#[test]
fn a_padded_gres_conf_lists_the_devices_in_the_plans_order_which_reports_carry_and_restore_keeps_while_it_lists_them(
) {
    let n = Node::new(&["4g@0 3g@4", "4g@0 3g@4"]);
    std::fs::write(n.path("gres.conf"), "AutoDetect=off\n").unwrap();
    let mut a = n.agent();
    let blocks: BTreeMap<String, u32> = [("3g.20gb".to_string(), 4), ("4g.20gb".to_string(), 2)].into();
    // GPU 0 to c5: its new 3g.20gb@0 goes third, after the two 3g.20gb@4 (kept in place).
    let order = ["0:3g.20gb@4", "1:3g.20gb@4", "0:3g.20gb@0", "1:4g.20gb@0"].map(String::from);
    let apply = |generation: u64, order: &[String]| {
        let mut d = Desired::new(
            generation,
            Phase::Apply,
            vec![GpuTarget {
                index: 0,
                model: "A100-SXM4-40GB".into(),
                from: "4g.20gb@0 3g.20gb@4".into(),
                to: "3g.20gb@0 3g.20gb@4".into(),
            }],
        );
        d.padding = blocks.clone();
        d.order = order.to_vec();
        d
    };
    // An order that leaves out a device is refused before any change.
    n.spool().write_desired(&apply(1, &order[..3])).unwrap();
    let r = a.poll().unwrap().unwrap();
    assert!(
        matches!(&r.outcome, Outcome::Failed { error } if error.contains("does not list the node's devices") && error.contains("afterwards") && error.ends_with("nothing changed")),
        "{r:?}"
    );
    assert_eq!(n.layout(0), "4g.20gb@0 3g.20gb@4");
    n.spool().write_desired(&apply(2, &order)).unwrap();
    let r = a.poll().unwrap().unwrap();
    assert_eq!(r.outcome, Outcome::Done);
    assert!(r.gres_order.is_empty(), "staged, not installed: {r:?}");
    n.desire(2, Phase::Install, &[]);
    let r = a.poll().unwrap().unwrap();
    assert_eq!((r.outcome, r.gres_order.as_slice()), (Outcome::Done, &order[..]));
    let files = || -> Vec<String> {
        std::fs::read_to_string(n.path("gres.conf"))
            .unwrap()
            .lines()
            .filter(|l| !l.contains("Type=pad-"))
            .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("File=")))
            .map(|f| f.rsplit('/').next().unwrap().to_string())
            .collect()
    };
    // The simulated devices are `nvidia<gpu*8 + start>`: the lines follow the order.
    assert_eq!(files(), ["nvidia4", "nvidia12", "nvidia0", "nvidia8"]);
    assert_eq!(
        n.gres_types(),
        [
            "3g.20gb",
            "3g.20gb",
            "3g.20gb",
            "4g.20gb",
            "pad-3g.20gb",
            "pad-4g.20gb"
        ]
    );
    // After a reboot the order comes from the file itself.
    n.desire(2, Phase::Start, &[]);
    assert_eq!(a.poll().unwrap().unwrap().outcome, Outcome::Done);
    drop(a);
    n.reboot(0);
    n.reboot(1);
    let mut a = n.agent();
    a.restore().unwrap();
    assert_eq!(files(), ["nvidia4", "nvidia12", "nvidia0", "nvidia8"]);
    // GPU 1's 4g.20gb@0 re-made by hand as a 3g.20gb@0 (restore leaves it): the recorded
    // order no longer lists the devices, so the file and the reports give way to GPU and
    // placement order (no job runs before slurmd starts).
    drop(a);
    let mut sim = n.sim.clone();
    let four = Layout::parse(&n.model, "4g@0").unwrap().instances()[0];
    let three = Layout::parse(&n.model, "3g@0").unwrap().instances()[0];
    for step in [
        Step::DestroyCompute(four),
        Step::DestroyGpu(four),
        Step::CreateGpu(three),
        Step::CreateCompute(three),
    ] {
        sim.apply(1, &n.model, step).unwrap();
    }
    let mut a = n.agent();
    assert_eq!(a.restore().unwrap(), Vec::<u32>::new());
    assert_eq!(files(), ["nvidia0", "nvidia4", "nvidia8", "nvidia12"]);
    let conf = std::fs::read_to_string(n.path("gres.conf")).unwrap();
    assert!(!conf.contains("# device order:"), "{conf}");
    assert!(conf.contains("# padding blocks: 3g.20gb=4 4g.20gb=2"), "{conf}");
    // GPU 1's layout differs from the last report: re-announced at once.
    let r = a.tick(unix_now()).unwrap().unwrap();
    assert!(r.gres_order.is_empty(), "{r:?}");
}

#[test]
fn a_device_that_differs_from_what_central_saw_is_not_touched() {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    n.desire(1, Phase::Apply, &[(0, "4g@0 3g@4", "3g@0 3g@4")]);
    let r = a.poll().unwrap().unwrap();
    let Outcome::Failed { error } = &r.outcome else {
        panic!("{r:?}")
    };
    assert!(
        error.contains("device has `7g.40gb@0`") && error.contains("nothing changed"),
        "{error}"
    );
    assert_eq!(n.layout(0), "7g.40gb@0");
    assert!(a.journal().records().is_empty());
    assert!(!n.path("gres.conf").exists());
    assert_eq!(n.slurmd_log(), "");
}

#[test]
fn a_plan_that_destroys_a_busy_instance_is_refused_before_any_step() {
    let n = Node::new(&["4g@0 3g@4"]);
    let busy = Layout::parse(&n.model, "4g@0").unwrap().instances()[0];
    n.sim.set_busy(0, &n.model, busy, true).unwrap();
    let mut a = n.agent();
    n.desire(1, Phase::Apply, &[(0, "4g@0 3g@4", "2g@0 2g@2 3g@4")]);
    let r = a.poll().unwrap().unwrap();
    assert!(
        matches!(&r.outcome, Outcome::Failed { error } if error.contains("busy instance(s) 4g.20gb@0")),
        "{r:?}"
    );
    assert_eq!(n.layout(0), "4g.20gb@0 3g.20gb@4");
    assert!(a.journal().records().is_empty());
}

/// Whether the agent's journal ends with a rolled-back re-layout.
fn rolled_back(a: &Agent) -> bool {
    matches!(
        a.journal().records().last(),
        Some(Record::End {
            ending: Ending::RolledBack { .. },
            ..
        })
    )
}

#[test]
fn a_create_error_rolls_back_to_from_and_the_report_names_it() {
    let n = Node::new(&["7g@0"]);
    n.sim
        .set_faults(&Faults {
            fail: vec![FailFault {
                skip: 1,
                ..FailFault::once("create-gi", Some(0), "NVML_ERROR_INSUFFICIENT_RESOURCES")
            }],
            ..Faults::default()
        })
        .unwrap();
    let mut a = n.agent();
    n.desire(1, Phase::Apply, &[(0, "7g@0", "3g@0 3g@4")]);
    let r = a.poll().unwrap().unwrap();
    let Outcome::Failed { error } = &r.outcome else {
        panic!("{r:?}")
    };
    assert!(
        error.contains("NVML_ERROR_INSUFFICIENT_RESOURCES") && error.contains("create-gi 3g.20gb@4"),
        "{error}"
    );
    assert_eq!(n.layout(0), "7g.40gb@0");
    assert_eq!(r.gpus[0].layout, "7g.40gb@0");
    assert!(a.journal().is_closed());
    assert!(rolled_back(&a), "{:?}", a.journal().records());
    assert!(r.slurmd_running);
    assert_eq!(n.slurmd_log(), "");
}

#[test]
fn a_gpu_read_error_is_reported_as_such_never_as_a_node_without_gpus() {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    a.announce().unwrap().unwrap();
    n.fail_reads(0, "NVML_ERROR_GPU_IS_LOST");
    let r = a.tick(unix_now()).unwrap().unwrap();
    assert!(
        r.read_error
            .as_deref()
            .is_some_and(|e| e.contains("NVML_ERROR_GPU_IS_LOST")),
        "{r:?}"
    );
    assert!(
        r.gpu_set().is_err(),
        "the central role must not trust its GPU list"
    );
    n.desire(2, Phase::Apply, &[SEVEN_TO_C5]);
    let r = a.poll().unwrap().unwrap();
    assert!(
        matches!(r.outcome, Outcome::Failed { .. }) && r.read_error.is_some(),
        "{r:?}"
    );
}

#[test]
fn a_gres_conf_block_with_broken_markers_is_reported_as_a_read_error_never_as_gpu_order() {
    let n = Node::new(&["3g@0 3g@4"]);
    let mut a = n.agent();
    a.restore().unwrap();
    assert!(a.announce().unwrap().unwrap().read_error.is_none());
    // A second BEGIN marker (a hand edit gone wrong): slurmd still reads the lines in the
    // order written, which the agent can no longer tell.
    let conf = std::fs::read_to_string(n.path("gres.conf")).unwrap();
    std::fs::write(
        n.path("gres.conf"),
        format!("{conf}{}\n", gres::begin_marker("n1")),
    )
    .unwrap();
    let r = a.tick(unix_now()).unwrap().unwrap();
    assert!(
        r.read_error
            .as_deref()
            .is_some_and(|e| e.contains("exactly once")),
        "{r:?}"
    );
    assert!(
        r.gpu_set().is_err(),
        "the central role must not place indices on it"
    );
}

/// A node on one 7g GPU, restored, with `generation` (7g to c5) applied and installed:
/// the node, its agent and its gres.conf from before the generation.
fn installed_seven_to_c5(generation: u64) -> (Node, Agent, String) {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    a.restore().unwrap();
    let before = std::fs::read_to_string(n.path("gres.conf")).unwrap();
    n.apply_and_install(&mut a, generation);
    (n, a, before)
}

#[test]
fn revert_after_install_restores_the_gpus_the_previous_gres_conf_and_slurmd() {
    let (n, mut a, before) = installed_seven_to_c5(3);
    assert_ne!(std::fs::read_to_string(n.path("gres.conf")).unwrap(), before);
    n.reverts(&mut a, 3);
    assert_eq!(n.layout(0), "7g.40gb@0");
    assert_eq!(std::fs::read_to_string(n.path("gres.conf")).unwrap(), before);
    assert_eq!(n.slurmd_log(), "stop\nstart\n");
}

#[test]
fn a_reverted_generation_asked_again_after_its_report_was_lost_goes_no_further_and_the_node_stays_as_it_was()
{
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    a.restore().unwrap();
    let before = std::fs::read_to_string(n.path("gres.conf")).unwrap_or_default();
    n.desire(3, Phase::Apply, &[SEVEN_TO_C5]);
    assert_eq!(a.poll().unwrap().unwrap().outcome, Outcome::Done);
    n.desire(3, Phase::Revert, &[SEVEN_TO_C5]);
    assert_eq!(a.poll().unwrap().unwrap().outcome, Outcome::Done);
    assert_eq!(n.layout(0), "7g.40gb@0");
    // A central role restarted on a ledger that missed the revert asks for the next steps,
    // of an agent that restarted too and whose Revert report the channel lost.
    std::fs::remove_file(n.spool().report_path()).unwrap();
    drop(a);
    let mut a = n.agent();
    for phase in [Phase::Apply, Phase::Install, Phase::Start] {
        n.desire(3, phase, &[SEVEN_TO_C5]);
        let r = a.poll().unwrap().unwrap();
        assert_eq!(r.phase, phase);
        assert!(
            matches!(&r.outcome, Outcome::Failed { error } if error.contains("generation 3 was reverted")),
            "{phase:?}: {:?}",
            r.outcome
        );
        assert_eq!(n.layout(0), "7g.40gb@0", "{phase:?}");
        assert_eq!(
            std::fs::read_to_string(n.path("gres.conf")).unwrap_or_default(),
            before
        );
        assert_eq!(n.slurmd_log(), "", "slurmd never stopped");
    }
    // The next generation goes ahead.
    n.apply_and_install(&mut a, 4);
    assert_eq!(n.layout(0), "3g.20gb@0 3g.20gb@4");
}

#[test]
fn an_install_run_again_after_its_report_was_lost_keeps_the_deadline_and_revert_restores_the_gres_conf_from_before(
) {
    let (n, a, before) = installed_seven_to_c5(3);
    let armed = a.journal().slurmd_watchdog().unwrap();
    let installed = std::fs::read_to_string(n.path("gres.conf")).unwrap();
    // The report never reached the channel and the agent restarted: Install runs again
    // on a gres.conf that already has its lines.
    std::fs::remove_file(n.spool().report_path()).unwrap();
    drop(a);
    let mut a = n.agent();
    let r = a.poll().unwrap().unwrap();
    assert_eq!((r.phase, r.outcome), (Phase::Install, Outcome::Done));
    assert_eq!(std::fs::read_to_string(n.path("gres.conf")).unwrap(), installed);
    // (Read back from the journal's JSON: equal to the last bit or so.)
    let (g, deadline) = a.journal().slurmd_watchdog().unwrap();
    assert!(
        g == armed.0 && (deadline - armed.1).abs() < 1e-3,
        "the first deadline holds"
    );
    n.reverts(&mut a, 3);
    assert_eq!(n.layout(0), "7g.40gb@0");
    assert_eq!(
        std::fs::read_to_string(n.path("gres.conf")).unwrap(),
        before,
        "the content from before generation 3, not its own lines"
    );
}

#[test]
fn a_slurmd_stop_that_fails_leaves_the_watchdog_armed_and_the_revert_starts_slurmd() {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    n.desire(4, Phase::Apply, &[SEVEN_TO_C5]);
    a.poll().unwrap().unwrap();
    // A stop that fails, perhaps after slurmd stopped (a stop that outlived its timeout).
    let log = n.path("slurmd.log").display().to_string();
    a.cfg.slurmd_stop = vec!["sh".into(), "-c".into(), format!("echo stop >> {log}; exit 1")];
    n.desire(4, Phase::Install, &[SEVEN_TO_C5]);
    let r = a.poll().unwrap().unwrap();
    assert!(matches!(r.outcome, Outcome::Failed { .. }), "{r:?}");
    assert!(!r.slurmd_running, "whether slurmd runs is not known");
    assert!(a.journal().slurmd_watchdog().is_some_and(|(g, _)| g == 4));
    n.reverts(&mut a, 4);
    assert_eq!(n.slurmd_log(), "stop\nstart\n", "the revert started slurmd");
    assert!(a.journal().slurmd_watchdog().is_none());
}

#[test]
fn a_padding_block_for_a_type_the_catalogue_does_not_know_is_refused_before_any_change() {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    let mut d = Desired::new(
        2,
        Phase::Apply,
        vec![GpuTarget {
            index: 0,
            model: "A100-SXM4-40GB".into(),
            from: SEVEN_TO_C5.1.into(),
            to: SEVEN_TO_C5.2.into(),
        }],
    );
    d.padding = [("../../etc/x".to_string(), 2)].into();
    n.spool().write_desired(&d).unwrap();
    let r = a.poll().unwrap().unwrap();
    assert!(
        matches!(&r.outcome, Outcome::Failed { error } if error.contains("not a MIG type")),
        "{r:?}"
    );
    assert_eq!(n.layout(0), "7g.40gb@0");
    assert!(!n.path("state/pad").exists() || std::fs::read_dir(n.path("state/pad")).unwrap().count() == 0);
}

#[test]
fn a_revert_that_cannot_put_gres_conf_back_keeps_slurmd_stopped_and_the_watchdog_tries_again() {
    let (n, mut a, before) = installed_seven_to_c5(3);
    // The saved content cannot be read (its place taken by a directory).
    let prev = smartmig_core::durable::previous_path(&n.path("gres.conf"));
    let saved = std::fs::read(&prev).unwrap();
    std::fs::remove_file(&prev).unwrap();
    std::fs::create_dir(&prev).unwrap();
    n.desire(3, Phase::Revert, &[SEVEN_TO_C5]);
    let r = a.poll().unwrap().unwrap();
    assert!(
        matches!(&r.outcome, Outcome::Failed { error } if error.contains("gres.conf not put back")),
        "{r:?}"
    );
    // Started, slurmd would register the new gres.conf under slurmctld's old layout (Slurm
    // requeues the node's jobs over the count): it stays stopped, the watchdog armed.
    assert!(!r.slurmd_running, "{r:?}");
    assert!(
        matches!(&r.outcome, Outcome::Failed { error } if error.contains("slurmd left stopped")),
        "{r:?}"
    );
    assert_eq!(n.slurmd_log(), "stop\n");
    assert!(a.journal().installed(3), "not recorded as reverted");
    let (_, deadline) = a.journal().slurmd_watchdog().expect("the watchdog stays armed");
    std::fs::write(n.spool().gres_path(), "gpu:7g.40gb:1(S:0)").unwrap();
    // At its deadline the watchdog reverts again: still no file, still stopped.
    assert!(a.tick(deadline + 1.0).unwrap().is_some_and(|r| !r.slurmd_running));
    assert_eq!(n.slurmd_log(), "stop\n");
    // Once the file can be read, the watchdog's next revert restores it and starts slurmd.
    std::fs::remove_dir(&prev).unwrap();
    std::fs::write(&prev, saved).unwrap();
    let r = a.tick(deadline + 2.0).unwrap().unwrap();
    assert_eq!(
        (r.phase, r.outcome.clone(), r.slurmd_running),
        (Phase::Revert, Outcome::Done, true)
    );
    assert!(!a.journal().installed(3));
    assert_eq!(std::fs::read_to_string(n.path("gres.conf")).unwrap(), before);
    assert_eq!(n.slurmd_log(), "stop\nstart\n");
    assert!(a.journal().slurmd_watchdog().is_none());
}

#[test]
fn a_revert_whose_saved_gres_conf_is_gone_keeps_slurmd_stopped_instead_of_starting_it_on_the_new_one() {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    a.restore().unwrap();
    n.apply_and_install(&mut a, 3);
    let installed = std::fs::read_to_string(n.path("gres.conf")).unwrap();
    let prev = smartmig_core::durable::previous_path(&n.path("gres.conf"));
    std::fs::remove_file(&prev).unwrap();
    n.desire(3, Phase::Revert, &[SEVEN_TO_C5]);
    let r = a.poll().unwrap().unwrap();
    assert!(
        matches!(&r.outcome, Outcome::Failed { error }
            if error.contains("saved copy") && error.contains("is gone") && error.contains("slurmd left stopped")),
        "{r:?}"
    );
    assert!(!r.slurmd_running, "{r:?}");
    assert_eq!(n.slurmd_log(), "stop\n");
    assert_eq!(n.layout(0), "7g.40gb@0", "the GPUs are back");
    assert_eq!(std::fs::read_to_string(n.path("gres.conf")).unwrap(), installed);
    assert!(a.journal().installed(3), "not recorded as reverted");
    assert!(
        a.journal().slurmd_watchdog().is_some(),
        "the watchdog stays armed"
    );
}

#[test]
fn the_watchdog_starts_slurmd_with_the_layout_slurmctld_has() {
    for (slurm_has, layout, phase) in [
        ("gpu:3g.20gb:2", "3g.20gb@0 3g.20gb@4", Phase::Start),
        ("gpu:7g.40gb:1(S:0)", "7g.40gb@0", Phase::Revert),
    ] {
        let n = Node::new(&["7g@0"]);
        let mut a = n.agent();
        n.apply_and_install(&mut a, 5);
        let (_, deadline) = a.journal().slurmd_watchdog().unwrap();
        std::fs::write(n.spool().gres_path(), slurm_has).unwrap();
        assert!(
            a.tick(deadline - 1.0).unwrap().is_none(),
            "not before the deadline"
        );
        let r = a.tick(deadline + 1.0).unwrap().unwrap();
        assert_eq!(
            (r.generation, r.phase, r.slurmd_running),
            (5, phase, true),
            "{slurm_has}"
        );
        assert!(
            r.watchdog.as_deref().is_some_and(|w| w.contains("deadline")),
            "{r:?}"
        );
        assert_eq!(n.layout(0), layout);
        assert_eq!(n.slurmd_log(), "stop\nstart\n");
        if phase == Phase::Revert {
            // The central role's own Revert for the generation is answered already.
            n.desire(5, Phase::Revert, &[SEVEN_TO_C5]);
            assert!(a.poll().unwrap().is_none());
        }
    }
}

/// Generation 7 (GPU 0 from 7g to c5) installed, and slurmd started by the watchdog at its
/// deadline because slurmctld showed the new layout (a refresh still under way); the
/// agent and gres.conf from before the generation.
fn started_by_the_watchdog(n: &Node) -> (Agent, String) {
    let mut a = n.agent();
    a.restore().unwrap();
    let before = std::fs::read_to_string(n.path("gres.conf")).unwrap();
    n.apply_and_install(&mut a, 7);
    let (_, deadline) = a.journal().slurmd_watchdog().unwrap();
    std::fs::write(n.spool().gres_path(), "gpu:3g.20gb:2").unwrap();
    assert_eq!(a.tick(deadline + 1.0).unwrap().unwrap().phase, Phase::Start);
    assert_eq!(n.slurmd_log(), "stop\nstart\n");
    (a, before)
}

#[test]
fn a_revert_after_the_watchdog_started_slurmd_with_the_new_gres_conf_restarts_it_with_the_old_one() {
    let n = Node::new(&["7g@0"]);
    let (mut a, before) = started_by_the_watchdog(&n);
    // The refresh failed after all: the central role put Slurm back and reverts.
    n.reverts(&mut a, 7);
    assert_eq!(std::fs::read_to_string(n.path("gres.conf")).unwrap(), before);
    assert_eq!(
        n.slurmd_log(),
        "stop\nstart\nstop\nstart\n",
        "slurmd restarted to load the gres.conf put back"
    );
    assert!(a.journal().slurmd_watchdog().is_none());
}

#[test]
fn after_a_revert_of_what_the_watchdog_started_a_reboot_restores_the_layouts_reverted_to() {
    let n = Node::new(&["7g@0"]);
    let (mut a, _) = started_by_the_watchdog(&n);
    std::fs::write(n.spool().gres_path(), "gpu:7g.40gb:1(S:0)").unwrap();
    n.desire(7, Phase::Revert, &[SEVEN_TO_C5]);
    assert_eq!(a.poll().unwrap().unwrap().outcome, Outcome::Done);
    drop(a);
    n.reboot(0);
    let mut a = n.agent();
    a.restore().unwrap();
    assert_eq!(n.layout(0), "7g.40gb@0", "not the layouts reverted away");
    assert_eq!(n.gres_types(), ["7g.40gb"]);
}

#[test]
fn a_revert_cut_short_after_it_began_to_restart_slurmd_restarts_it_when_run_again() {
    let n = Node::new(&["7g@0"]);
    let (a, before) = started_by_the_watchdog(&n);
    drop(a);
    // A revert put gres.conf back and journaled slurmd's stop, then died before the stop:
    // slurmd still runs on the generation's gres.conf.
    durable::restore_previous(&n.path("gres.conf")).unwrap();
    let mut j = Journal::open(&n.path("state")).unwrap();
    j.append(Record::Slurmd {
        running: false,
        watchdog: Some((7, unix_now())),
    })
    .unwrap();
    drop(j);
    let mut a = n.agent();
    n.reverts(&mut a, 7);
    assert_eq!(std::fs::read_to_string(n.path("gres.conf")).unwrap(), before);
    assert_eq!(
        n.slurmd_log(),
        "stop\nstart\nstop\nstart\n",
        "stopped before the start: a start alone leaves a running slurmd on the old file"
    );
    assert!(a.journal().reverted(7) && a.journal().slurmd_watchdog().is_none());
}

#[test]
fn the_watchdog_waits_while_slurmctlds_gres_for_the_node_does_not_parse() {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    n.apply_and_install(&mut a, 8);
    let (_, deadline) = a.journal().slurmd_watchdog().unwrap();
    std::fs::write(n.spool().gres_path(), "gpu:3g.20gb:two").unwrap();
    assert!(
        a.tick(deadline + 1.0).unwrap().is_none(),
        "not taken for a node without MIG"
    );
    assert_eq!(n.layout(0), "3g.20gb@0 3g.20gb@4", "nothing reverted");
    std::fs::write(n.spool().gres_path(), "gpu:3g.20gb:2").unwrap();
    let r = a.tick(deadline + 2.0).unwrap().unwrap();
    assert_eq!((r.phase, r.slurmd_running), (Phase::Start, true));
}

#[test]
fn the_watchdog_starts_slurmd_while_the_nodes_record_does_not_read() {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    n.apply_and_install(&mut a, 9);
    let (_, deadline) = a.journal().slurmd_watchdog().unwrap();
    // slurmctld has the old layout; a site's own text stands where the central role's
    // message belongs, so the record does not read.
    std::fs::write(n.spool().gres_path(), "gpu:7g.40gb:1(S:0)").unwrap();
    std::fs::write(n.spool().desired_path(), "maintenance window 3").unwrap();
    assert!(
        a.tick(deadline - 1.0).is_err(),
        "before the deadline: the record's error"
    );
    assert_eq!(n.slurmd_log(), "stop\n", "slurmd still stopped");
    let r = a.tick(deadline + 1.0).unwrap().unwrap();
    assert_eq!(
        (r.generation, r.phase, r.slurmd_running),
        (9, Phase::Revert, true)
    );
    assert_eq!(n.layout(0), "7g.40gb@0");
    assert_eq!(n.slurmd_log(), "stop\nstart\n");
    assert!(a.journal().slurmd_watchdog().is_none());
    assert!(a.tick(deadline + 2.0).is_err(), "the record still does not read");
}

#[test]
fn the_watchdog_starts_slurmd_while_the_gpus_cannot_be_read() {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    n.apply_and_install(&mut a, 6);
    let (_, deadline) = a.journal().slurmd_watchdog().unwrap();
    std::fs::write(n.spool().gres_path(), "gpu:3g.20gb:2").unwrap();
    n.sim
        .set_faults(&Faults {
            fail: vec![FailFault {
                always: true,
                ..FailFault::once("read", None, "NVML_ERROR_UNKNOWN")
            }],
            ..Faults::default()
        })
        .unwrap();
    let r = a.tick(deadline + 1.0).unwrap().unwrap();
    assert_eq!((r.phase, r.slurmd_running), (Phase::Start, true), "{r:?}");
    assert!(
        r.read_error.is_some(),
        "the report says the GPUs could not be read"
    );
    assert_eq!(n.slurmd_log(), "stop\nstart\n");
}

#[test]
fn recovery_rolls_back_to_from_when_the_interrupted_plan_cannot_finish() {
    let n = Node::new(&["7g@0"]);
    // A previous run began generation 5, destroyed the 7g and created 3g@0 without
    // its compute instance, then died.
    let m = &n.model;
    let mut sim = n.sim.clone();
    let seven = Layout::parse(m, "7g@0").unwrap().instances()[0];
    let three = Layout::parse(m, "3g@0").unwrap().instances()[0];
    for s in [
        Step::DestroyCompute(seven),
        Step::DestroyGpu(seven),
        Step::CreateGpu(three),
    ] {
        sim.apply(0, m, s).unwrap();
    }
    n.begin_seven_to_c5(5);
    sim.set_faults(&Faults {
        fail: vec![FailFault::once("create-gi", None, "NVML_ERROR_UNKNOWN")],
        ..Faults::default()
    })
    .unwrap();
    let mut a = n.agent();
    let r = a.recover().unwrap().unwrap();
    assert_eq!(r.generation, 5);
    assert!(
        matches!(&r.outcome, Outcome::Failed { error } if error.contains("could not be finished") && error.contains("NVML_ERROR_UNKNOWN")),
        "{r:?}"
    );
    assert_eq!(n.layout(0), "7g.40gb@0");
    assert!(a.journal().is_closed());
    assert!(a.recover().unwrap().is_none());
}

#[test]
fn at_boot_a_plan_left_open_goes_back_to_the_layouts_gres_conf_and_slurmctld_have_even_unpublished() {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    a.restore().unwrap();
    let before = std::fs::read_to_string(n.path("gres.conf")).unwrap();
    drop(a);
    // A run began generation 6 and died; the node rebooted. slurmctld does not answer at
    // boot: here, the report cannot be written.
    n.begin_seven_to_c5(6);
    n.reboot(0);
    std::fs::create_dir_all(n.spool().report_path()).unwrap();
    let mut a = n.agent();
    let r = a.recover_at_boot().unwrap().expect("the reconciled re-layout");
    assert_eq!(r.generation, 6);
    assert!(
        matches!(&r.outcome, Outcome::Failed { error } if error.contains("before slurmd's start")),
        "{r:?}"
    );
    assert!(a.journal().is_closed());
    assert_eq!(n.layout(0), "7g.40gb@0");
    a.restore()
        .expect("the layouts are restored and gres.conf written");
    assert_eq!(
        std::fs::read_to_string(n.path("gres.conf")).unwrap(),
        before,
        "slurmd starts on the lines slurmctld has"
    );
    // Restarted without a reboot (no restore), an agent finishes such a plan instead.
    let n = Node::new(&["7g@0"]);
    n.begin_seven_to_c5(6);
    let r = n.agent().recover().unwrap().unwrap();
    assert_eq!((r.generation, r.outcome), (6, Outcome::Done));
    assert_eq!(n.layout(0), "3g.20gb@0 3g.20gb@4");
}

/// Generation 5 applied (and installed, with `install`) on GPU 0, from 7g to c5, then a
/// reboot, slurmctld showing `slurm_gres` (None: no answer), and the restore before
/// slurmd; the agent after it and gres.conf from before the generation.
fn rebooted_in_flight(install: bool, slurm_gres: Option<&str>) -> (Node, Agent, String) {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    a.restore().unwrap();
    let before = std::fs::read_to_string(n.path("gres.conf")).unwrap();
    n.desire(5, Phase::Apply, &[SEVEN_TO_C5]);
    assert_eq!(a.poll().unwrap().unwrap().outcome, Outcome::Done);
    if install {
        n.desire(5, Phase::Install, &[SEVEN_TO_C5]);
        assert_eq!(a.poll().unwrap().unwrap().outcome, Outcome::Done);
        assert!(!a.journal().slurmd_running());
    }
    drop(a);
    n.reboot(0);
    if let Some(gres) = slurm_gres {
        std::fs::write(n.spool().gres_path(), gres).unwrap();
    }
    let mut a = n.agent();
    assert!(a.recover_at_boot().unwrap().is_none(), "no plan was open");
    a.restore().unwrap();
    assert!(
        a.journal().slurmd_running() && a.journal().slurmd_watchdog().is_none(),
        "slurmd starts after the restore"
    );
    (n, a, before)
}

#[test]
fn at_boot_an_installed_generation_slurmctld_has_comes_back_with_its_layouts_and_gres_conf() {
    let (n, mut a, before) = rebooted_in_flight(true, Some("gpu:3g.20gb:2"));
    assert_eq!(n.layout(0), "3g.20gb@0 3g.20gb@4");
    assert_eq!(n.gres_types(), ["3g.20gb", "3g.20gb"]);
    assert_ne!(std::fs::read_to_string(n.path("gres.conf")).unwrap(), before);
    // The central role's Start then finds the node as slurmctld has it.
    n.desire(5, Phase::Start, &[SEVEN_TO_C5]);
    let r = a.poll().unwrap().unwrap();
    assert_eq!((r.phase, r.outcome), (Phase::Start, Outcome::Done));
    // A second reboot brings the generation's layouts back.
    drop(a);
    n.reboot(0);
    n.agent().restore().unwrap();
    assert_eq!(n.layout(0), "3g.20gb@0 3g.20gb@4");
}

#[test]
fn at_boot_an_installed_generation_slurmctld_does_not_show_goes_back_and_its_start_is_refused() {
    let (n, mut a, before) = rebooted_in_flight(true, Some("gpu:7g.40gb:1(S:0)"));
    assert_eq!(n.layout(0), "7g.40gb@0");
    assert_eq!(std::fs::read_to_string(n.path("gres.conf")).unwrap(), before);
    assert!(a.journal().reverted(5));
    n.desire(5, Phase::Start, &[SEVEN_TO_C5]);
    let r = a.poll().unwrap().unwrap();
    assert!(
        matches!(&r.outcome, Outcome::Failed { error } if error.contains("reverted")),
        "{r:?}"
    );
    assert_eq!(n.layout(0), "7g.40gb@0");
    // The central role puts Slurm's definitions of the node back (slurmd, started at
    // boot, may have read the generation's) and asks for the revert again: slurmd is
    // restarted to read them, on the same GPUs and gres.conf.
    let log = n.slurmd_log();
    n.reverts(&mut a, 5);
    assert_eq!(n.slurmd_log(), format!("{log}stop\nstart\n"));
    assert_eq!(n.layout(0), "7g.40gb@0");
    assert_eq!(std::fs::read_to_string(n.path("gres.conf")).unwrap(), before);
}

#[test]
fn at_boot_an_installed_generation_the_central_role_asks_back_goes_back_though_slurmctld_shows_it() {
    // The reconfigure path: slurmctld is undone only after the nodes' reverts.
    let (n, a, before) = installed_seven_to_c5(5);
    drop(a);
    n.desire(5, Phase::Revert, &[SEVEN_TO_C5]);
    n.reboot(0);
    std::fs::write(n.spool().gres_path(), "gpu:3g.20gb:2").unwrap();
    let mut a = n.agent();
    a.restore().unwrap();
    assert_eq!(n.layout(0), "7g.40gb@0");
    assert_eq!(std::fs::read_to_string(n.path("gres.conf")).unwrap(), before);
    // Its Revert, handled then, is done with the node as it is.
    let r = a.poll().unwrap().unwrap();
    assert_eq!((r.phase, r.outcome), (Phase::Revert, Outcome::Done));
}

#[test]
fn at_boot_an_installed_generation_waits_while_slurmctld_does_not_answer_then_settles() {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    a.restore().unwrap();
    n.apply_and_install(&mut a, 5);
    drop(a);
    n.reboot(0);
    // slurmctld may have loaded the generation (a power loss after its refresh): the
    // restore fails, and slurmd does not start on a guess.
    for gres in [None, Some("gpu:3g.20gb:two")] {
        if let Some(g) = gres {
            std::fs::write(n.spool().gres_path(), g).unwrap();
        }
        let mut a = n.agent();
        let e = a.restore().unwrap_err();
        assert!(
            e.to_string().contains("generation 5") && e.to_string().contains("slurmd waits"),
            "{gres:?}: {e}"
        );
        assert!(!a.journal().reverted(5) && !a.journal().slurmd_running());
    }
    std::fs::write(n.spool().gres_path(), "gpu:3g.20gb:2").unwrap();
    n.agent().restore().unwrap();
    assert_eq!(n.layout(0), "3g.20gb@0 3g.20gb@4");
}

#[test]
fn at_boot_an_applied_generation_goes_back_so_its_install_writes_no_lines_for_instances_the_reboot_took() {
    let (n, mut a, before) = rebooted_in_flight(false, Some("gpu:7g.40gb:1(S:0)"));
    assert_eq!(n.layout(0), "7g.40gb@0");
    n.desire(5, Phase::Install, &[SEVEN_TO_C5]);
    let r = a.poll().unwrap().unwrap();
    assert!(
        matches!(&r.outcome, Outcome::Failed { error } if error.contains("reverted")),
        "{r:?}"
    );
    assert_eq!(std::fs::read_to_string(n.path("gres.conf")).unwrap(), before);
}

#[test]
fn at_boot_an_installed_generation_whose_saved_gres_conf_is_gone_fails_the_restore_so_slurmd_does_not_start()
{
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    a.restore().unwrap();
    n.apply_and_install(&mut a, 5);
    drop(a);
    n.reboot(0);
    std::fs::write(n.spool().gres_path(), "gpu:7g.40gb:1(S:0)").unwrap();
    std::fs::remove_file(durable::previous_path(&n.path("gres.conf"))).unwrap();
    let e = n.agent().restore().unwrap_err();
    assert!(
        e.to_string().contains("generation 5") && e.to_string().contains("is gone"),
        "{e}"
    );
}

#[test]
fn after_a_reboot_empty_gpus_get_their_last_layout_back_and_others_are_left_alone() {
    let n = Node::new(&["3g@0 3g@4", "7g@0"]);
    let mut a = n.agent();
    a.announce().unwrap().unwrap();
    // The reboot: GPU 0 comes back empty; GPU 1 was re-made by hand meanwhile.
    let mut sim = n.sim.clone();
    for text in ["3g@0", "3g@4"] {
        let i = Layout::parse(&n.model, text).unwrap().instances()[0];
        sim.apply(0, &n.model, Step::DestroyCompute(i)).unwrap();
        sim.apply(0, &n.model, Step::DestroyGpu(i)).unwrap();
    }
    let seven = Layout::parse(&n.model, "7g@0").unwrap().instances()[0];
    sim.apply(1, &n.model, Step::DestroyCompute(seven)).unwrap();
    sim.apply(1, &n.model, Step::DestroyGpu(seven)).unwrap();
    let four = Layout::parse(&n.model, "4g@0").unwrap().instances()[0];
    sim.apply(1, &n.model, Step::CreateGpu(four)).unwrap();
    sim.apply(1, &n.model, Step::CreateCompute(four)).unwrap();
    drop(a);
    let mut a = n.agent();
    assert_eq!(a.restore().unwrap(), vec![0]);
    assert_eq!(n.layout(0), "3g.20gb@0 3g.20gb@4");
    assert_eq!(n.layout(1), "4g.20gb@0");
    assert_eq!(n.gres_types(), ["3g.20gb", "3g.20gb", "4g.20gb"]);
}

#[test]
fn a_lost_report_is_reannounced_with_the_answered_generation_and_not_applied_again() {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    a.announce().unwrap().unwrap();
    n.desire(3, Phase::Apply, &[SEVEN_TO_C5]);
    let r = a.tick(unix_now()).unwrap().unwrap();
    assert_eq!(
        (r.generation, r.phase, r.outcome),
        (3, Phase::Apply, Outcome::Done)
    );
    assert!(a.tick(unix_now()).unwrap().is_none(), "nothing new to say");
    // slurmctld forgets the node's Comment (here: the spool loses the report).
    let spool = n.spool();
    std::fs::remove_file(spool.report_path()).unwrap();
    let again = a.tick(unix_now()).unwrap().unwrap();
    assert_eq!(
        (again.generation, again.phase, again.outcome.clone()),
        (3, Phase::Apply, Outcome::Done)
    );
    assert_eq!(again.gpus[0].layout, "3g.20gb@0 3g.20gb@4");
    let on_spool = spool.last_report().unwrap().unwrap();
    assert_eq!(
        (on_spool.generation, on_spool.gpus),
        (again.generation, again.gpus)
    );
    // Generation 3 was answered already: no second apply.
    assert_eq!(
        a.journal()
            .records()
            .iter()
            .filter(|r| matches!(r, Record::Begin { .. }))
            .count(),
        1
    );
}

#[test]
fn a_layout_changed_behind_the_agents_back_is_reannounced_at_once_else_only_periodically() {
    let n = Node::new(&["4g@0 3g@4"]);
    let mut a = n.agent();
    let first = a.announce().unwrap().unwrap();
    let t = unix_now();
    assert!(a.tick(t).unwrap().is_none());
    assert!(a.tick(t + 290.0).unwrap().is_none(), "not before the interval");
    let periodic = a.tick(t + 301.0).unwrap().unwrap();
    assert_eq!((periodic.generation, &periodic.gpus), (0, &first.gpus));
    assert_eq!(periodic.at, t + 301.0);
    assert!(a.tick(t + 302.0).unwrap().is_none(), "the interval restarts");
    // Someone destroys the 4g by hand.
    let four = Layout::parse(&n.model, "4g@0").unwrap().instances()[0];
    let mut sim = n.sim.clone();
    sim.apply(0, &n.model, Step::DestroyCompute(four)).unwrap();
    sim.apply(0, &n.model, Step::DestroyGpu(four)).unwrap();
    let changed = a.tick(t + 303.0).unwrap().unwrap();
    assert_eq!(changed.gpus[0].layout, "3g.20gb@4");
    assert!(a.tick(t + 304.0).unwrap().is_none());
}

#[test]
fn an_idle_agent_polls_rarely_with_jitter_and_fast_while_a_relayout_is_under_way() {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    a.announce().unwrap().unwrap();
    let delays: Vec<f64> = (0..200).map(|_| a.poll_delay().as_secs_f64()).collect();
    assert!(delays.iter().all(|d| (75.0..125.0).contains(d)), "{delays:?}");
    let spread =
        delays.iter().cloned().fold(f64::MIN, f64::max) - delays.iter().cloned().fold(f64::MAX, f64::min);
    assert!(spread > 20.0, "drawn, not fixed: {spread}");
    n.desire(1, Phase::Apply, &[SEVEN_TO_C5]);
    a.poll().unwrap().unwrap();
    assert_eq!(
        a.poll_delay(),
        Duration::from_secs(1),
        "between Apply and Install"
    );
}

#[test]
fn a_gres_conf_that_cannot_be_staged_after_the_move_rolls_the_gpus_back() {
    // One failed GPU read, at each read of the re-layout in turn: where it hits the
    // staging after the GPUs moved, the GPUs go back, so that gres.conf still describes them.
    let mut staged_failures = 0;
    for skip in 0..40 {
        let n = Node::new(&["7g@0"]);
        let mut a = n.agent();
        a.announce().unwrap().unwrap();
        n.sim
            .set_faults(&Faults {
                fail: vec![FailFault {
                    skip,
                    ..FailFault::once("read", Some(0), "NVML_ERROR_UNKNOWN")
                }],
                ..Faults::default()
            })
            .unwrap();
        n.desire(1, Phase::Apply, &[SEVEN_TO_C5]);
        let Some(r) = a.poll().unwrap() else { continue };
        if let Outcome::Failed { error } = &r.outcome {
            if error.contains("cannot stage gres.conf") {
                staged_failures += 1;
                assert_eq!(n.layout(0), "7g.40gb@0", "skip {skip}: {error}");
                assert!(rolled_back(&a), "skip {skip}: {:?}", a.journal().records());
            }
        }
    }
    assert!(staged_failures > 0, "no read failed at the staging");
}

#[test]
fn a_gpu_read_error_at_start_records_the_layouts_the_plan_left_not_the_ones_before() {
    let n = Node::new(&["7g@0", "4g@0 3g@4"]);
    std::fs::write(n.path("gres.conf"), "AutoDetect=off\n").unwrap();
    let mut a = n.agent();
    a.announce().unwrap().unwrap();
    assert_eq!(a.journal().layouts().unwrap()[0].layout, "7g.40gb@0");
    n.desire(1, Phase::Apply, &[SEVEN_TO_C5]);
    assert_eq!(a.poll().unwrap().unwrap().outcome, Outcome::Done);
    n.desire(1, Phase::Install, &[SEVEN_TO_C5]);
    assert_eq!(a.poll().unwrap().unwrap().outcome, Outcome::Done);
    // NVML stops answering for GPU 0 while slurmd is down.
    n.fail_reads(0, "NVML_ERROR_UNKNOWN");
    n.desire(1, Phase::Start, &[]);
    let r = a.poll().unwrap().unwrap();
    assert!(r.read_error.is_some(), "{r:?}");
    assert_eq!(n.slurmd_log(), "stop\nstart\n");
    // After a reboot the agent restores what gres.conf and slurmctld now describe.
    let layouts: Vec<(u32, &str)> = a
        .journal()
        .layouts()
        .unwrap()
        .iter()
        .map(|g| (g.index, g.layout.as_str()))
        .collect();
    assert_eq!(layouts, [(0, "3g.20gb@0 3g.20gb@4"), (1, "4g.20gb@0 3g.20gb@4")]);
}

#[test]
fn a_gpu_read_error_at_start_after_a_rolled_back_plan_keeps_the_layouts_recorded_before() {
    let n = Node::new(&["7g@0"]);
    let mut a = n.agent();
    a.announce().unwrap().unwrap();
    n.sim
        .set_faults(&Faults {
            fail: vec![FailFault::once(
                "create-gi",
                Some(0),
                "NVML_ERROR_INSUFFICIENT_RESOURCES",
            )],
            ..Faults::default()
        })
        .unwrap();
    n.desire(1, Phase::Apply, &[SEVEN_TO_C5]);
    assert!(matches!(
        a.poll().unwrap().unwrap().outcome,
        Outcome::Failed { .. }
    ));
    n.fail_reads(0, "NVML_ERROR_UNKNOWN");
    // A Start the central role should not send: the plan never ended done.
    n.desire(1, Phase::Start, &[]);
    a.poll().unwrap().unwrap();
    assert_eq!(a.journal().layouts().unwrap()[0].layout, "7g.40gb@0");
}
