//! The two GPU backends a node agent runs on in tests, behind one set-up: the simulated
//! node (`backend = "simulated"`) and the NVML backend on the NVML test library
//! (`backend = "nvml"`, the library dlopened in place of libnvidia-ml.so.1). A test runs
//! the same steps on both and checks the same outcome: any difference is a bug in one.

#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use smartmig_core::mig::{Catalogue, GpuModel, Layout};
use smartmig_gpu::simulated::{FailFault, Faults, Simulated};
use smartmig_gpu::GpuBackend;
use smartmig_nvml_testlib::{ErrorFault, GpuSetup, TestNode, ROOT_ENV};

/// Which backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The simulated node.
    Simulated,
    /// NVML on the test library.
    Nvml,
}

/// A driver call, named as each backend's faults name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Destroy a compute instance.
    DestroyCi,
    /// Destroy a GPU instance.
    DestroyGi,
    /// Create a GPU instance with a placement.
    CreateGi,
    /// Create a compute instance.
    CreateCi,
    /// List the GPUs.
    List,
    /// Read a GPU's state (its instances).
    Read,
}

impl Op {
    fn simulated(self) -> &'static str {
        match self {
            Op::DestroyCi => "destroy-ci",
            Op::DestroyGi => "destroy-gi",
            Op::CreateGi => "create-gi",
            Op::CreateCi => "create-ci",
            Op::List => "list",
            Op::Read => "read",
        }
    }

    fn nvml(self) -> &'static str {
        match self {
            Op::DestroyCi => "nvmlComputeInstanceDestroy",
            Op::DestroyGi => "nvmlGpuInstanceDestroy",
            Op::CreateGi => "nvmlDeviceCreateGpuInstanceWithPlacement",
            Op::CreateCi => "nvmlGpuInstanceCreateComputeInstance",
            // Listing takes each GPU's handle; a GPU's state starts with its instances.
            Op::List => "nvmlDeviceGetHandleByIndex_v2",
            Op::Read => "nvmlDeviceGetGpuInstances",
        }
    }
}

/// A node's GPUs on one backend: all of one catalogue model.
#[derive(Debug, Clone)]
pub struct TestGpus {
    /// The backend.
    pub kind: Kind,
    /// The simulated node's directory, or the test library's root.
    pub dir: PathBuf,
    /// The GPUs' model.
    pub model: GpuModel,
}

/// The catalogue model `key`.
pub fn model(key: &str) -> GpuModel {
    Catalogue::embedded().model(key).unwrap().clone()
}

impl TestGpus {
    /// GPUs of `model_key` in `dir`, one per entry of `layouts` (`"4g@0 3g@4"`), each
    /// instance with its compute instance; device files in `dev_dir` for the simulated node
    /// (the test library keeps its own under `dir/dev`).
    pub fn create(kind: Kind, dir: &Path, model_key: &str, layouts: &[&str]) -> TestGpus {
        let m = model(model_key);
        match kind {
            Kind::Simulated => {
                Simulated::create_layouts(dir, &m, layouts).unwrap();
            }
            Kind::Nvml => {
                let setups: Vec<GpuSetup> = layouts
                    .iter()
                    .map(|l| GpuSetup {
                        product: m.key.clone(),
                        instances: Layout::parse(&m, l)
                            .unwrap()
                            .instances()
                            .iter()
                            .map(|i| (m.profiles[i.profile].name.clone(), u32::from(i.start)))
                            .collect(),
                    })
                    .collect();
                TestNode::create(dir, &setups).unwrap();
            }
        }
        TestGpus {
            kind,
            dir: dir.to_path_buf(),
            model: m,
        }
    }

    /// The same GPUs on the simulated backend (for tests written against [`Simulated`]).
    pub fn from_simulated(sim: &Simulated, model: &GpuModel) -> TestGpus {
        TestGpus {
            kind: Kind::Simulated,
            dir: sim.dir().to_path_buf(),
            model: model.clone(),
        }
    }

    fn sim(&self) -> Simulated {
        Simulated::open(&self.dir).unwrap()
    }

    fn node(&self) -> TestNode {
        TestNode::open(&self.dir)
    }

    /// How many GPUs the node has.
    pub fn count(&self) -> u32 {
        let n = match self.kind {
            Kind::Simulated => self.sim().load().unwrap().gpus.len(),
            Kind::Nvml => self.node().load().unwrap().gpus.len(),
        };
        n as u32
    }

    /// Every GPU's layout, `|` between GPUs (see [`TestGpus::layout`]).
    pub fn layouts(&self) -> String {
        (0..self.count())
            .map(|g| self.layout(g))
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// GPU `gpu`'s layout and whether every instance has its compute instance.
    pub fn state(&self, gpu: u32) -> (Layout, bool) {
        match self.kind {
            Kind::Simulated => {
                let st = self.sim().state(gpu, &self.model).unwrap();
                let settled = st.is_settled();
                (st.layout, settled)
            }
            Kind::Nvml => {
                let names = self.node().layout(gpu).unwrap();
                let settled = names.iter().all(|n| !n.ends_with('!'));
                let text: Vec<&str> = names.iter().map(|n| n.trim_end_matches('!')).collect();
                (Layout::parse(&self.model, &text.join(" ")).unwrap(), settled)
            }
        }
    }

    /// GPU `gpu`'s layout as profile names (`3g.20gb@0 3g.20gb@4`); panics if unsettled.
    pub fn layout(&self, gpu: u32) -> String {
        let (l, settled) = self.state(gpu);
        assert!(settled, "GPU {gpu} ({:?}) is left unsettled: {l:?}", self.kind);
        let text = l.display(&self.model).to_string().replace("(empty)", "");
        text
    }

    /// Puts a process on each instance of `instances` (`"3g@4"`) of GPU `gpu`.
    pub fn mark_busy(&self, gpu: u32, instances: &str) {
        match self.kind {
            Kind::Simulated => self.sim().mark_busy(gpu, instances).unwrap(),
            Kind::Nvml => {
                for i in Layout::parse(&self.model, instances).unwrap().instances() {
                    self.node().start_process(gpu, u32::from(i.start)).unwrap();
                }
            }
        }
    }

    /// Makes the `skip + 1`-th `op` (on `gpu`, or any GPU) fail with NVML error `error`.
    pub fn fail(&self, op: Op, gpu: Option<u32>, error: &str, skip: u32) {
        match self.kind {
            Kind::Simulated => {
                let s = self.sim();
                let mut f = s.faults().unwrap();
                f.fail.push(FailFault {
                    op: op.simulated().into(),
                    gpu,
                    error: error.into(),
                    skip,
                    ..FailFault::default()
                });
                s.set_faults(&f).unwrap();
            }
            Kind::Nvml => {
                let n = self.node();
                let mut f = n.faults().unwrap();
                f.errors.push(ErrorFault {
                    gpu,
                    skip,
                    ..ErrorFault::once(op.nvml(), error)
                });
                n.set_faults(&f).unwrap();
            }
        }
    }

    /// Aborts the process using the GPUs right after `steps` more driver calls changed them.
    pub fn abort_after(&self, steps: u32) {
        match self.kind {
            Kind::Simulated => {
                let s = self.sim();
                let f = s.faults().unwrap();
                s.set_faults(&Faults {
                    abort_after_steps: Some(steps),
                    ..f
                })
                .unwrap();
            }
            Kind::Nvml => {
                let n = self.node();
                let mut f = n.faults().unwrap();
                f.abort_after_changes = Some(steps);
                n.set_faults(&f).unwrap();
            }
        }
    }

    /// Whether an abort set with [`TestGpus::abort_after`] has yet to happen.
    pub fn abort_pending(&self) -> bool {
        match self.kind {
            Kind::Simulated => self.sim().faults().unwrap().abort_after_steps.is_some(),
            Kind::Nvml => self.node().faults().unwrap().abort_after_changes.is_some(),
        }
    }

    /// Runs driver calls on GPU `gpu` by hand, as an admin (or an earlier run) would, from
    /// this process: destroys (`Op::DestroyCi`, `Op::DestroyGi`) or creates the instance
    /// `instance` (`"4g@0"`).
    pub fn by_hand(&self, gpu: u32, op: Op, instance: &str) {
        let i = Layout::parse(&self.model, instance).unwrap().instances()[0];
        let step = match op {
            Op::DestroyCi => smartmig_core::mig::Step::DestroyCompute(i),
            Op::DestroyGi => smartmig_core::mig::Step::DestroyGpu(i),
            Op::CreateGi => smartmig_core::mig::Step::CreateGpu(i),
            Op::CreateCi => smartmig_core::mig::Step::CreateCompute(i),
            Op::List | Op::Read => panic!("a read changes nothing"),
        };
        match self.kind {
            Kind::Simulated => self.sim().apply(gpu, &self.model, step).unwrap(),
            Kind::Nvml => {
                let p = &self.model.profiles[i.profile];
                let start = u32::from(i.start);
                let node = self.node();
                node.update(|s| {
                    let version = s.driver_version.clone();
                    let g = &mut s.gpus[gpu as usize];
                    let gi = g.gpu_instances.iter().find(|x| x.start == start).map(|x| x.id);
                    let full = smartmig_nvml_testlib::ops::full_ci_profile(u32::from(p.compute));
                    let result = match (op, gi) {
                        (Op::DestroyCi, Some(id)) => smartmig_nvml_testlib::ops::destroy_ci(g, id, 0),
                        (Op::DestroyGi, Some(id)) => smartmig_nvml_testlib::ops::destroy_gi(g, id),
                        (Op::CreateCi, Some(id)) => {
                            smartmig_nvml_testlib::ops::create_ci(g, id, full).map(|_| ())
                        }
                        (Op::CreateGi, None) => {
                            let prof = g.profiles.iter().find(|q| q.id == p.nvml_id).unwrap().clone();
                            smartmig_nvml_testlib::ops::create_gi(&version, g, &prof, start).map(|_| ())
                        }
                        _ => panic!("{op:?} {instance}: no such instance state"),
                    };
                    result.unwrap_or_else(|code| panic!("{op:?} {instance}: NVML error {code}"));
                })
                .unwrap();
            }
        }
    }

    /// The `[node]` keys that put an agent on these GPUs.
    pub fn config_lines(&self) -> String {
        match self.kind {
            Kind::Simulated => format!(
                "backend = \"simulated\"\nsimulated_dir = \"{}\"\n",
                self.dir.display()
            ),
            Kind::Nvml => format!(
                "backend = \"nvml\"\nnvml_library = \"{}\"\nnvidia_root = \"{}\"\n",
                smartmig_nvml_testlib::library().display(),
                self.dir.display()
            ),
        }
    }

    /// The environment a process using these GPUs needs.
    /// Host directories an agent on these GPUs must see (the test library's, for a root's
    /// Slurm, whose mount namespace shows only what is bound).
    pub fn binds(&self) -> Vec<PathBuf> {
        match self.kind {
            Kind::Simulated => Vec::new(),
            Kind::Nvml => smartmig_nvml_testlib::library()
                .parent()
                .map(Path::to_path_buf)
                .into_iter()
                .collect(),
        }
    }

    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        match self.kind {
            Kind::Simulated => Vec::new(),
            Kind::Nvml => vec![(ROOT_ENV, self.dir.clone().into_os_string())],
        }
    }
}

/// One `#[test]` per backend for each function `f(Kind)` named: `simulated::f` and
/// `nvml::f`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod simulated {
            $( #[test] fn $name() { super::$name($crate::backends::Kind::Simulated) } )*
        }
        mod nvml {
            $( #[test] fn $name() { super::$name($crate::backends::Kind::Nvml) } )*
        }
    };
}
