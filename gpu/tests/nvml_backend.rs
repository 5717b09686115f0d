//! The NVML backend (`smartmig_gpu::nvml`) on the NVML test library, loaded through
//! nvml-wrapper's dlopen as `libnvidia-ml.so.1` would be: reads, re-layouts, refusals,
//! and every failed read surfacing as an error.
//!
//! The library finds its state through an environment variable, which is one per
//! process: the tests here take turns ([`node`] holds a lock for the test's duration).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use smartmig_core::mig::{Catalogue, Driver, GpuModel, Layout, Plan, Step};
use smartmig_gpu::nvml::{Nvml, NvmlOptions};
use smartmig_gpu::{compare, GpuBackend, GpuError};
use smartmig_nvml_testlib::{ErrorFault, Faults, GpuSetup, TestNode, ROOT_ENV};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A test's node: its directory, the library's view of it, and the backend on it.
struct Fixture {
    _turn: MutexGuard<'static, ()>,
    dir: tempfile::TempDir,
    node: TestNode,
    nvml: Nvml,
}

fn model(key: &str) -> GpuModel {
    Catalogue::embedded().model(key).unwrap().clone()
}

/// GPUs of `product` with `layouts` (`name@start` lists) and MIG on.
fn node(gpus: &[(&str, &[(&str, u32)])]) -> Fixture {
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let setups: Vec<GpuSetup> = gpus
        .iter()
        .map(|(p, insts)| GpuSetup {
            product: p.to_string(),
            instances: insts.iter().map(|(n, s)| (n.to_string(), *s)).collect(),
        })
        .collect();
    let node = TestNode::create(dir.path(), &setups).unwrap();
    std::env::set_var(ROOT_ENV, dir.path());
    let nvml = Nvml::open_with(&NvmlOptions {
        library: OsString::from(smartmig_nvml_testlib::library()),
        root: dir.path().to_path_buf(),
    })
    .unwrap();
    Fixture {
        _turn: turn,
        dir,
        node,
        nvml,
    }
}

impl Fixture {
    fn fail(&self, call: &str, error: &str) {
        self.node
            .set_faults(&Faults {
                errors: vec![ErrorFault::once(call, error)],
                abort_after_changes: None,
            })
            .unwrap();
    }

    fn cap(&self, gpu: u32, gi: u32, ci: Option<u32>) -> PathBuf {
        self.dir.path().join(format!(
            "dev/nvidia-caps/nvidia-cap{}",
            TestNode::cap_minor(gpu, gi, ci)
        ))
    }
}

#[test]
fn the_backend_reads_gpus_layouts_device_files_and_busy_instances() {
    let f = node(&[
        ("a100-40gb", &[("4g.20gb", 0), ("3g.20gb", 4)]),
        ("a30-24gb", &[("2g.12gb", 0), ("1g.6gb", 3)]),
        ("l40s", &[]),
    ]);
    let gpus = f.nvml.gpus().unwrap();
    let summary: Vec<(u32, Option<&str>, bool)> = gpus
        .iter()
        .map(|g| (g.index, g.model.as_deref(), g.mig_enabled))
        .collect();
    assert_eq!(
        summary,
        [
            (0, Some("a100-40gb"), true),
            (1, Some("a30-24gb"), true),
            (2, None, false)
        ]
    );
    assert_eq!(gpus[1].name, "NVIDIA A30");
    let a100 = model("a100-40gb");
    let st = f.nvml.state(0, &a100).unwrap();
    assert_eq!(st.layout, Layout::parse(&a100, "4g@0 3g@4").unwrap());
    assert!(st.is_settled() && st.busy.is_empty());
    // Files as Slurm's AutoDetect lists them: the GPU, then the GPU-instance and
    // compute-instance capabilities the driver's mig-minors names (4g got GI id 1, 3g id 2).
    assert_eq!(
        st.devices[1].files,
        [
            f.dir.path().join("dev/nvidia0"),
            f.cap(0, 2, None),
            f.cap(0, 2, Some(0))
        ]
    );
    assert!(st.devices[1].files.iter().all(|p| p.exists()));
    f.node.start_process(0, 4).unwrap();
    let st = f.nvml.state(0, &a100).unwrap();
    assert_eq!(st.busy, Layout::parse(&a100, "3g@4").unwrap().instances());
    let a30 = model("a30-24gb");
    let st = f.nvml.state(1, &a30).unwrap();
    assert_eq!(st.layout.display(&a30).to_string(), "2g.12gb@0 1g.6gb@3");
}

#[test]
fn a_plan_runs_through_nvml_and_the_library_holds_the_new_layout() {
    let mut f = node(&[("a100-80gb", &[("7g.80gb", 0)])]);
    let m = model("a100-80gb");
    let from = Layout::parse(&m, "7g@0").unwrap();
    let to = Layout::read(&m, Driver::R510, "3g.40gb+2g.20gb+1g.10gb+1g.10gb").unwrap();
    for step in Plan::between(&m, Driver::R510, &from, &to).unwrap().steps {
        f.nvml.apply(0, &m, step).unwrap();
    }
    assert_eq!(
        f.node.layout(0).unwrap(),
        ["2g.20gb@0", "1g.10gb@2", "1g.10gb@3", "3g.40gb@4"]
    );
    let st = f.nvml.state(0, &m).unwrap();
    assert_eq!(st.layout, to);
    assert_eq!(st.devices.len(), 4);
    assert!(st.devices.iter().flat_map(|d| &d.files).all(|p| p.exists()));
}

#[test]
fn a_gpu_instance_without_its_compute_instance_is_reported_unsettled() {
    let mut f = node(&[("h100-80gb", &[("4g.40gb", 0)])]);
    let m = model("h100-80gb");
    let four = Layout::parse(&m, "4g@0").unwrap().instances()[0];
    f.nvml.apply(0, &m, Step::DestroyCompute(four)).unwrap();
    let st = f.nvml.state(0, &m).unwrap();
    assert_eq!(st.without_compute, [four]);
    assert!(st.devices.is_empty());
    f.nvml.apply(0, &m, Step::CreateCompute(four)).unwrap();
    assert!(f.nvml.state(0, &m).unwrap().is_settled());
}

#[test]
fn the_driver_refuses_a_busy_instance_an_overlap_and_a_bad_placement() {
    let mut f = node(&[("a100-40gb", &[("4g.20gb", 0), ("3g.20gb", 4)])]);
    let m = model("a100-40gb");
    f.node.start_process(0, 4).unwrap();
    let three = Layout::parse(&m, "3g@4").unwrap().instances()[0];
    let e = f
        .nvml
        .apply(0, &m, Step::DestroyCompute(three))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "GPU 0: destroy-ci 3g.20gb@4 failed: NVML_ERROR_IN_USE");
    let two = Layout::parse(&m, "2g@4").unwrap().instances()[0];
    let e = f.nvml.apply(0, &m, Step::CreateGpu(two)).unwrap_err().to_string();
    assert!(e.ends_with("NVML_ERROR_INSUFFICIENT_RESOURCES"), "{e}");
    // A GPU instance that still has its compute instance is in use too.
    let four = Layout::parse(&m, "4g@0").unwrap().instances()[0];
    let e = f
        .nvml
        .apply(0, &m, Step::DestroyGpu(four))
        .unwrap_err()
        .to_string();
    assert!(e.ends_with("NVML_ERROR_IN_USE"), "{e}");
    assert_eq!(f.node.layout(0).unwrap(), ["4g.20gb@0", "3g.20gb@4"]);
}

#[test]
fn a_failed_mig_mode_read_is_an_error_not_a_gpu_without_mig() {
    let f = node(&[("a100-40gb", &[("7g.40gb", 0)])]);
    f.fail("nvmlDeviceGetMigMode", "NVML_ERROR_GPU_IS_LOST");
    let e = f.nvml.gpus().unwrap_err().to_string();
    assert_eq!(e, "GPU 0: nvmlDeviceGetMigMode failed: NVML_ERROR_GPU_IS_LOST");
    // The fault fired once: the next read is whole again.
    assert!(f.nvml.gpus().unwrap()[0].mig_enabled);
}

#[test]
fn every_failed_read_of_a_gpus_state_is_an_error_naming_the_call() {
    let f = node(&[("a100-40gb", &[("4g.20gb", 0), ("3g.20gb", 4)])]);
    let m = model("a100-40gb");
    for call in [
        "nvmlDeviceGetGpuInstanceProfileInfo",
        "nvmlDeviceGetGpuInstances",
        "nvmlGpuInstanceGetInfo",
        "nvmlGpuInstanceGetComputeInstanceProfileInfo",
        "nvmlGpuInstanceGetComputeInstances",
        "nvmlComputeInstanceGetInfo_v2",
        "nvmlDeviceGetMinorNumber",
        "nvmlDeviceGetComputeRunningProcesses_v3",
    ] {
        f.fail(call, "NVML_ERROR_UNKNOWN");
        match f.nvml.state(0, &m) {
            Err(GpuError::Nvml { call: c, .. }) => assert_eq!(c, call),
            other => panic!("{call}: {other:?}"),
        }
    }
    assert!(f.nvml.state(0, &m).unwrap().is_settled());
}

#[test]
fn a_missing_mig_minors_file_is_an_error_not_a_gres_conf_without_device_files() {
    let f = node(&[("a100-40gb", &[("7g.40gb", 0)])]);
    let minors = f.dir.path().join("proc/driver/nvidia-caps/mig-minors");
    std::fs::remove_file(&minors).unwrap();
    let e = f.nvml.state(0, &model("a100-40gb")).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}: ", minors.display())), "{e}");
    std::fs::write(&minors, "config 1\nmonitor 2\n").unwrap();
    let e = f.nvml.state(0, &model("a100-40gb")).unwrap_err().to_string();
    assert!(e.contains("no `gpu0/gi0/access` line"), "{e}");
}

/// The catalogue against NVIDIA's tables as the library holds them (written apart):
/// every product's profiles, counts and placements agree.
#[test]
fn every_catalogue_model_matches_what_nvml_reports_for_its_product() {
    let cat = Catalogue::embedded();
    let keys: Vec<&str> = cat.models.iter().map(|m| m.key.as_str()).collect();
    let setups: Vec<(&str, &[(&str, u32)])> = keys.iter().map(|k| (*k, &[][..])).collect();
    let f = node(&setups);
    for (g, m) in f.nvml.gpus().unwrap().iter().zip(&cat.models) {
        assert_eq!(g.model.as_deref(), Some(m.key.as_str()), "{}", g.name);
        let probed = f.nvml.probe(g.index, m).unwrap();
        assert_eq!(compare(m, &probed), Vec::<String>::new(), "{}", m.key);
        assert_eq!(probed.len(), m.profiles.len(), "{}", m.key);
    }
}

#[test]
fn power_and_energy_are_read_and_absent_when_the_gpu_has_none() {
    let f = node(&[("h200-141gb", &[])]);
    assert_eq!(f.nvml.power(0).unwrap(), None);
    f.node
        .update(|s| {
            s.gpus[0].power_mw = Some(312_500);
            s.gpus[0].energy_mj = Some(7_200_000);
        })
        .unwrap();
    let r = f.nvml.power(0).unwrap().unwrap();
    assert_eq!((r.watts, r.energy_joules), (312.5, Some(7200.0)));
    f.fail("nvmlDeviceGetPowerUsage", "NVML_ERROR_UNKNOWN");
    assert!(f.nvml.power(0).is_err());
}

#[test]
fn pending_mig_mode_and_a_missing_gpu_are_reported() {
    let f = node(&[("a100-40gb", &[])]);
    f.node.update(|s| s.gpus[0].mig_pending = false).unwrap();
    let g = &f.nvml.gpus().unwrap()[0];
    assert!(g.mig_enabled && !g.mig_pending);
    assert!(matches!(
        f.nvml.state(3, &model("a100-40gb")),
        Err(GpuError::NoSuchGpu(3))
    ));
}

#[test]
fn without_the_root_the_library_answers_like_a_host_without_a_driver() {
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    std::env::remove_var(ROOT_ENV);
    let e = Nvml::open_library(smartmig_nvml_testlib::library().as_os_str())
        .unwrap_err()
        .to_string();
    assert!(e.ends_with("NVML_ERROR_DRIVER_NOT_LOADED"), "{e}");
    drop(turn);
}

/// A GPU error as the NVML error name it carries.
fn code(r: Result<(), GpuError>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(GpuError::Nvml { code, .. }) => code,
        Err(e) => panic!("not a driver refusal: {e}"),
    }
}

/// The simulated backend and the NVML backend on the test library take the same random
/// driver calls (valid and invalid, busy instances included) and must answer each with the
/// same NVML code and hold the same instances afterwards: a disagreement is a bug in one.
#[test]
fn the_simulated_and_nvml_backends_agree_on_every_driver_call() {
    for key in ["a100-40gb", "a30-24gb"] {
        let mut f = node(&[(key, &[])]);
        let m = model(key);
        let sim_dir = tempfile::tempdir().unwrap();
        let mut sim = smartmig_gpu::simulated::Simulated::create_layouts(sim_dir.path(), &m, &[""]).unwrap();
        // Every profile at every start, allowed or not.
        let candidates: Vec<smartmig_core::mig::Instance> = (0..m.profiles.len())
            .flat_map(|p| {
                (0..m.memory_slices).map(move |start| smartmig_core::mig::Instance { start, profile: p })
            })
            .collect();
        // A small linear congruential generator: the same calls on every run.
        let mut x: u64 = 0x5eed;
        let mut next = |n: usize| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) % n as u64) as usize
        };
        let mut refusals = std::collections::BTreeSet::new();
        for round in 0..400 {
            let inst = candidates[next(candidates.len())];
            let step = match next(4) {
                0 => Step::CreateGpu(inst),
                1 => Step::CreateCompute(inst),
                2 => Step::DestroyCompute(inst),
                _ => Step::DestroyGpu(inst),
            };
            let (a, b) = (code(sim.apply(0, &m, step)), code(f.nvml.apply(0, &m, step)));
            assert_eq!(
                a,
                b,
                "{key}, call {round}: {} (simulated vs NVML)",
                step.describe(&m)
            );
            refusals.insert(a);
            let (s, n) = (sim.state(0, &m).unwrap(), f.nvml.state(0, &m).unwrap());
            assert_eq!(
                (&s.layout, &s.without_compute),
                (&n.layout, &n.without_compute),
                "{key}, call {round}"
            );
            // Now and then a process starts on a settled instance, or all of them end.
            if round % 25 == 0 {
                if let Some(d) = n.devices.first() {
                    sim.set_busy(0, &m, d.instance, true).unwrap();
                    f.node.start_process(0, u32::from(d.instance.start)).unwrap();
                }
            } else if round % 25 == 12 {
                for b in &s.busy {
                    sim.set_busy(0, &m, *b, false).unwrap();
                }
                f.node.end_processes(0).unwrap();
            }
        }
        let seen: Vec<&str> = refusals.iter().map(String::as_str).collect();
        assert_eq!(
            seen,
            [
                "NVML_ERROR_INSUFFICIENT_RESOURCES",
                "NVML_ERROR_INVALID_ARGUMENT",
                "NVML_ERROR_IN_USE",
                "NVML_ERROR_NOT_FOUND",
                "ok"
            ],
            "{key}: every kind of answer was exercised"
        );
    }
}
