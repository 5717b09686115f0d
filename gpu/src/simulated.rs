//! A simulated node: MIG GPUs whose driver rules come from the core `DriverModel`, with
//! state kept in a directory so that a killed agent finds the devices as it left them.
//!
//! Files in the directory:
//! - `node.json`: the GPUs and their instances ([`NodeFile`]), rewritten atomically after
//!   every step;
//! - `faults.json` (optional): faults to inject ([`Faults`]); each fires once and is
//!   removed from the file;
//! - device files, one per instance with a compute instance, in `dev_dir` (default
//!   `<dir>/dev`), named `nvidia<gpu*8 + start>` like the Slurm test harness's fake MIG
//!   devices (character devices with /dev/null's numbers when run as root).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use smartmig_core::mig::layout::display_instance;
use smartmig_core::mig::{Catalogue, Driver, DriverError, DriverModel, GpuModel, Instance, Layout, Step};

use crate::{GpuBackend, GpuError, GpuInfo, GpuState, MigDevice, PowerReading, ProbedProfile};

/// The state file's name.
pub const NODE_FILE: &str = "node.json";
/// The fault file's name.
pub const FAULTS_FILE: &str = "faults.json";

/// `node.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFile {
    /// Driver rules the simulated driver enforces.
    #[serde(default)]
    pub driver: Driver,
    /// Where device files are made (default `<dir>/dev`).
    #[serde(default)]
    pub dev_dir: Option<PathBuf>,
    /// Milliseconds each kind of step takes (`destroy-ci`, `destroy-gi`, `create-gi`, `create-ci`).
    #[serde(default)]
    pub latency_ms: BTreeMap<String, u64>,
    /// The GPUs.
    pub gpus: Vec<SimGpu>,
}

impl NodeFile {
    /// The GPU with NVML index `gpu`.
    pub fn gpu(&self, gpu: u32) -> Result<&SimGpu, GpuError> {
        self.gpus
            .iter()
            .find(|g| g.index == gpu)
            .ok_or(GpuError::NoSuchGpu(gpu))
    }

    /// The GPU with NVML index `gpu`, to change.
    pub fn gpu_mut(&mut self, gpu: u32) -> Result<&mut SimGpu, GpuError> {
        self.gpus
            .iter_mut()
            .find(|g| g.index == gpu)
            .ok_or(GpuError::NoSuchGpu(gpu))
    }
}

/// One simulated GPU.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimGpu {
    /// NVML index.
    pub index: u32,
    /// UUID.
    pub uuid: String,
    /// Product name (matched against the catalogue).
    pub name: String,
    /// MIG mode.
    pub mig_enabled: bool,
    /// GPU instances, `name@start`.
    pub gpu_instances: Vec<String>,
    /// GPU instances without a compute instance.
    #[serde(default)]
    pub without_compute: Vec<String>,
    /// Instances with processes.
    #[serde(default)]
    pub busy: Vec<String>,
    /// Profiles the probe reports instead of the catalogue's (to simulate a driver that
    /// differs from the catalogue).
    #[serde(default)]
    pub profiles: Option<Vec<SimProfile>>,
    /// Power draw the device reports, watts (None: no power reading, as on a GPU whose
    /// driver does not support it). Set by whoever drives the simulation; never invented.
    #[serde(default)]
    pub power_w: Option<f64>,
    /// Energy counter the device reports, joules (None: none).
    #[serde(default)]
    pub energy_j: Option<f64>,
}

/// A profile as a simulated driver reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimProfile {
    /// NVML profile id.
    pub nvml_id: u32,
    /// Compute slices.
    pub compute: u32,
    /// Most instances.
    pub max_count: u32,
    /// Memory in MB.
    pub memory_mb: u64,
    /// Memory slices per placement.
    pub memory_slices: u8,
    /// Allowed starts.
    pub starts: Vec<u8>,
}

/// `faults.json`: faults the next steps meet.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// Step failures, each used once by the first matching step.
    #[serde(default)]
    pub fail: Vec<FailFault>,
    /// Abort the process (as a kill would) right after this many more steps have run and
    /// been saved.
    #[serde(default)]
    pub abort_after_steps: Option<u32>,
    /// GPUs the driver no longer lists (as when one falls off the bus).
    #[serde(default)]
    pub lost: Vec<u32>,
}

/// A call that fails with an NVML error.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailFault {
    /// Step kind: `destroy-ci`, `destroy-gi`, `create-gi` or `create-ci`; `list` for
    /// listing the GPUs, `read` for reading a GPU's state.
    pub op: String,
    /// GPU index; any GPU when absent.
    #[serde(default)]
    pub gpu: Option<u32>,
    /// NVML error name returned, e.g. `NVML_ERROR_INSUFFICIENT_RESOURCES`.
    pub error: String,
    /// Matching calls to let through before failing.
    #[serde(default)]
    pub skip: u32,
    /// Fail every matching call from then on, not only the first.
    #[serde(default)]
    pub always: bool,
}

impl FailFault {
    /// A fault on the next `op` call (on `gpu`, or any GPU) with NVML error `error`.
    pub fn once(op: &str, gpu: Option<u32>, error: &str) -> FailFault {
        FailFault {
            op: op.to_string(),
            gpu,
            error: error.to_string(),
            ..FailFault::default()
        }
    }
}

/// What [`Simulated::create`] sets up for one GPU.
#[derive(Debug, Clone)]
pub struct GpuSpec {
    /// Catalogue model.
    pub model: GpuModel,
    /// Initial layout (with compute instances).
    pub layout: Layout,
}

/// The simulated backend over a state directory.
#[derive(Debug, Clone)]
pub struct Simulated {
    dir: PathBuf,
    catalogue: Catalogue,
}

fn op_name(step: &Step) -> &'static str {
    match step {
        Step::DestroyCompute(_) => "destroy-ci",
        Step::DestroyGpu(_) => "destroy-gi",
        Step::CreateGpu(_) => "create-gi",
        Step::CreateCompute(_) => "create-ci",
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> GpuError + '_ {
    move |source| GpuError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `bytes` to `path` durably (`smartmig_core::durable`): a crash leaves either the
/// old or the new content.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), GpuError> {
    smartmig_core::durable::write(path, bytes).map_err(|e| GpuError::Io {
        path: e.path,
        source: std::io::Error::new(e.source.kind(), format!("{}: {}", e.what, e.source)),
    })
}

fn parse_instances(model: &GpuModel, names: &[String], path: &Path) -> Result<Vec<Instance>, GpuError> {
    let layout = Layout::parse(model, &names.join(",")).map_err(|e| GpuError::State {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(layout.instances().to_vec())
}

/// A layout given as text for GPU `gpu`, or an error naming the GPU, the text and the fault.
fn parse_layout(gpu: u32, model: &GpuModel, text: &str) -> Result<Layout, GpuError> {
    Layout::parse(model, text).map_err(|e| GpuError::Unexpected {
        gpu,
        what: format!("layout `{text}`: {e}"),
    })
}

fn names(model: &GpuModel, insts: &[Instance]) -> Vec<String> {
    insts.iter().map(|i| display_instance(model, i)).collect()
}

impl Simulated {
    /// Opens an existing simulated node.
    pub fn open(dir: &Path) -> Result<Simulated, GpuError> {
        let s = Simulated {
            dir: dir.to_path_buf(),
            catalogue: Catalogue::embedded(),
        };
        s.load()?;
        Ok(s)
    }

    /// Creates a simulated node in `dir` with the given GPUs, MIG on, device files in
    /// `<dir>/dev`.
    pub fn create(dir: &Path, driver: Driver, gpus: &[GpuSpec]) -> Result<Simulated, GpuError> {
        Simulated::create_with_dev_dir(dir, None, driver, gpus)
    }

    /// Creates a node of `model` GPUs in `dir`, one per entry of `layouts` (a layout as
    /// [`Layout::parse`] reads it, e.g. `"4g@0 3g@4"`), with the R510 driver and device
    /// files in `<dir>/dev`: the usual set-up of tests. See [`Simulated::mark_busy`].
    pub fn create_layouts(dir: &Path, model: &GpuModel, layouts: &[&str]) -> Result<Simulated, GpuError> {
        let gpus = layouts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                Ok(GpuSpec {
                    model: model.clone(),
                    layout: parse_layout(i as u32, model, text)?,
                })
            })
            .collect::<Result<Vec<_>, GpuError>>()?;
        Simulated::create(dir, Driver::R510, &gpus)
    }

    /// Like [`Simulated::create`], with device files in `dev_dir` (e.g. the `dev/` of a
    /// Slurm test cluster, whose gres.conf then names them).
    pub fn create_with_dev_dir(
        dir: &Path,
        dev_dir: Option<PathBuf>,
        driver: Driver,
        gpus: &[GpuSpec],
    ) -> Result<Simulated, GpuError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let file = NodeFile {
            driver,
            dev_dir,
            latency_ms: BTreeMap::new(),
            gpus: gpus
                .iter()
                .enumerate()
                .map(|(i, g)| SimGpu {
                    index: i as u32,
                    uuid: format!("GPU-5e000000-0000-0000-0000-{i:012}"),
                    name: g.model.name.clone(),
                    mig_enabled: true,
                    gpu_instances: names(&g.model, g.layout.instances()),
                    without_compute: Vec::new(),
                    busy: Vec::new(),
                    profiles: None,
                    power_w: None,
                    energy_j: None,
                })
                .collect(),
        };
        let s = Simulated {
            dir: dir.to_path_buf(),
            catalogue: Catalogue::embedded(),
        };
        s.save(&file)?;
        for (i, g) in gpus.iter().enumerate() {
            for inst in g.layout.instances() {
                s.make_device(&file, i as u32, inst)?;
            }
        }
        Ok(s)
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads `node.json`.
    pub fn load(&self) -> Result<NodeFile, GpuError> {
        let path = self.dir.join(NODE_FILE);
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        serde_json::from_str(&text).map_err(|e| GpuError::State {
            path,
            reason: e.to_string(),
        })
    }

    /// Writes `node.json` atomically.
    pub fn save(&self, file: &NodeFile) -> Result<(), GpuError> {
        let text = serde_json::to_vec_pretty(file).map_err(|e| GpuError::State {
            path: self.dir.join(NODE_FILE),
            reason: e.to_string(),
        })?;
        write_atomic(&self.dir.join(NODE_FILE), &text)
    }

    /// Reads `faults.json` (none when absent).
    pub fn faults(&self) -> Result<Faults, GpuError> {
        let path = self.dir.join(FAULTS_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| GpuError::State {
                path,
                reason: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Faults::default()),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// Writes `faults.json` atomically.
    pub fn set_faults(&self, faults: &Faults) -> Result<(), GpuError> {
        let path = self.dir.join(FAULTS_FILE);
        let text = serde_json::to_vec_pretty(faults).map_err(|e| GpuError::State {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        write_atomic(&path, &text)
    }

    /// Marks the instances `instances` of GPU `gpu` (a layout as [`Layout::parse`] reads it
    /// for the GPU's model, e.g. `"3g@4"`) as used by a process.
    pub fn mark_busy(&self, gpu: u32, instances: &str) -> Result<(), GpuError> {
        let file = self.load()?;
        let g = file.gpu(gpu)?;
        let model = self.gpu_model(g)?;
        for inst in parse_layout(gpu, &model, instances)?.instances() {
            self.set_busy(gpu, &model, *inst, true)?;
        }
        Ok(())
    }

    /// Marks an instance as used by a process, or not.
    pub fn set_busy(&self, gpu: u32, model: &GpuModel, inst: Instance, busy: bool) -> Result<(), GpuError> {
        let mut file = self.load()?;
        let g = file.gpu_mut(gpu)?;
        let name = display_instance(model, &inst);
        g.busy.retain(|b| *b != name);
        if busy {
            g.busy.push(name);
        }
        self.save(&file)
    }

    /// Sets the time one kind of step takes.
    pub fn set_latency(&self, op: &str, ms: u64) -> Result<(), GpuError> {
        let mut file = self.load()?;
        file.latency_ms.insert(op.to_string(), ms);
        self.save(&file)
    }

    fn dev_dir(&self, file: &NodeFile) -> PathBuf {
        file.dev_dir.clone().unwrap_or_else(|| self.dir.join("dev"))
    }

    /// The device file of an instance: `nvidia<gpu*8 + start>`, so that file order is
    /// physical order.
    pub fn device_path(&self, file: &NodeFile, gpu: u32, inst: &Instance) -> PathBuf {
        self.dev_dir(file)
            .join(format!("nvidia{}", gpu * 8 + u32::from(inst.start)))
    }

    fn make_device(&self, file: &NodeFile, gpu: u32, inst: &Instance) -> Result<(), GpuError> {
        let dir = self.dev_dir(file);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let path = self.device_path(file, gpu, inst);
        if path.exists() {
            return Ok(());
        }
        // As root, a character device with /dev/null's numbers (what slurmd accepts as a GPU
        // file); otherwise a plain file stands in.
        let made = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .ok()
            .is_some_and(|c| {
                // SAFETY: `c` is a valid NUL-terminated path; mknod only reads it.
                unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) == 0 }
            });
        if !made {
            std::fs::write(&path, b"").map_err(io(&path))?;
        }
        Ok(())
    }

    /// Fails the call `call` (of kind `op`, on `gpu`) when a fault in faults.json matches.
    fn inject(&self, op: &str, gpu: u32, call: &str) -> Result<(), GpuError> {
        let mut faults = self.faults()?;
        let Some(pos) = faults
            .fail
            .iter()
            .position(|f| f.op == op && f.gpu.is_none_or(|g| g == gpu))
        else {
            return Ok(());
        };
        if faults.fail[pos].skip > 0 {
            faults.fail[pos].skip -= 1;
            return self.set_faults(&faults);
        }
        let f = if faults.fail[pos].always {
            faults.fail[pos].clone()
        } else {
            let f = faults.fail.remove(pos);
            self.set_faults(&faults)?;
            f
        };
        log::info!("simulated GPU {gpu}: injected {} on {call}", f.error);
        Err(GpuError::Nvml {
            gpu,
            call: call.to_string(),
            code: f.error,
        })
    }

    fn gpu_model(&self, g: &SimGpu) -> Result<GpuModel, GpuError> {
        self.catalogue
            .models
            .iter()
            .find(|m| m.answers_to(&g.name))
            .cloned()
            .ok_or_else(|| GpuError::UnknownModel {
                gpu: g.index,
                name: g.name.clone(),
            })
    }

    fn check_model(&self, g: &SimGpu, model: &GpuModel) -> Result<(), GpuError> {
        if model.answers_to(&g.name) {
            Ok(())
        } else {
            Err(GpuError::Unexpected {
                gpu: g.index,
                what: format!("is a `{}`, not a {}", g.name, model.key),
            })
        }
    }

    fn driver_model(&self, file: &NodeFile, g: &SimGpu, model: &GpuModel) -> Result<DriverModel, GpuError> {
        let path = self.dir.join(NODE_FILE);
        let gis = Layout::new(parse_instances(model, &g.gpu_instances, &path)?);
        let mut d = DriverModel::new(model.clone(), file.driver, gis).map_err(|e| GpuError::State {
            path: path.clone(),
            reason: format!("GPU {}: {e}", g.index),
        })?;
        for i in parse_instances(model, &g.without_compute, &path)? {
            d.apply(Step::DestroyCompute(i)).map_err(|e| GpuError::State {
                path: path.clone(),
                reason: format!("GPU {}: {e}", g.index),
            })?;
        }
        for i in parse_instances(model, &g.busy, &path)? {
            d.set_busy(i, true);
        }
        Ok(d)
    }
}

/// The NVML error name the driver would return for a refused step.
fn nvml_code(e: &DriverError) -> &'static str {
    match e {
        DriverError::NotFound(_) => "NVML_ERROR_NOT_FOUND",
        DriverError::Exists(_) | DriverError::Layout(_) => "NVML_ERROR_INSUFFICIENT_RESOURCES",
        DriverError::InUse(_) => "NVML_ERROR_IN_USE",
        DriverError::ComputeState(..) => "NVML_ERROR_INVALID_ARGUMENT",
    }
}

impl GpuBackend for Simulated {
    fn gpus(&self) -> Result<Vec<GpuInfo>, GpuError> {
        let file = self.load()?;
        let lost = self.faults()?.lost;
        for g in &file.gpus {
            self.inject("list", g.index, "nvmlDeviceGetHandleByIndex")?;
        }
        Ok(file
            .gpus
            .iter()
            .filter(|g| !lost.contains(&g.index))
            .map(|g| GpuInfo {
                index: g.index,
                uuid: g.uuid.clone(),
                name: g.name.clone(),
                model: crate::model_key(&self.catalogue, &g.name),
                mig_enabled: g.mig_enabled,
            })
            .collect())
    }

    fn state(&self, gpu: u32, model: &GpuModel) -> Result<GpuState, GpuError> {
        self.inject("read", gpu, "nvmlDeviceGetGpuInstances")?;
        let file = self.load()?;
        let g = file.gpu(gpu)?;
        self.check_model(g, model)?;
        let path = self.dir.join(NODE_FILE);
        let layout = Layout::new(parse_instances(model, &g.gpu_instances, &path)?);
        let without_compute = parse_instances(model, &g.without_compute, &path)?;
        let devices = layout
            .instances()
            .iter()
            .filter(|i| !without_compute.contains(i))
            .map(|i| MigDevice {
                instance: *i,
                files: vec![self.device_path(&file, gpu, i)],
            })
            .collect();
        Ok(GpuState {
            layout,
            without_compute,
            busy: parse_instances(model, &g.busy, &path)?,
            devices,
        })
    }

    fn probe(&self, gpu: u32, model: &GpuModel) -> Result<Vec<ProbedProfile>, GpuError> {
        let file = self.load()?;
        let g = file.gpu(gpu)?;
        if let Some(ps) = &g.profiles {
            return Ok(ps
                .iter()
                .map(|p| ProbedProfile {
                    nvml_id: p.nvml_id,
                    compute: p.compute,
                    max_count: p.max_count,
                    memory_mb: p.memory_mb,
                    starts: p.starts.clone(),
                    memory_slices: p.memory_slices,
                })
                .collect());
        }
        let own = self.gpu_model(g)?;
        let _ = model;
        Ok(own
            .profiles
            .iter()
            .map(|p| ProbedProfile {
                nvml_id: p.nvml_id,
                compute: u32::from(p.compute),
                max_count: u32::from(p.max_count),
                memory_mb: (p.memory_gb * 1024.0).round() as u64,
                starts: p.starts.clone(),
                memory_slices: p.memory_slices,
            })
            .collect())
    }

    fn apply(&mut self, gpu: u32, model: &GpuModel, step: Step) -> Result<(), GpuError> {
        let mut file = self.load()?;
        let op = op_name(&step);
        if let Some(ms) = file.latency_ms.get(op) {
            std::thread::sleep(Duration::from_millis(*ms));
        }
        let call = step.describe(model);
        self.inject(op, gpu, &call)?;
        let gi = file
            .gpus
            .iter()
            .position(|g| g.index == gpu)
            .ok_or(GpuError::NoSuchGpu(gpu))?;
        self.check_model(&file.gpus[gi], model)?;
        if !file.gpus[gi].mig_enabled {
            return Err(GpuError::Nvml {
                gpu,
                call,
                code: "NVML_ERROR_NOT_SUPPORTED".into(),
            });
        }
        let mut d = self.driver_model(&file, &file.gpus[gi], model)?;
        d.apply(step).map_err(|e| {
            log::info!("simulated GPU {gpu}: driver refused {call}: {e}");
            GpuError::Nvml {
                gpu,
                call: format!("{call} ({e})"),
                code: nvml_code(&e).into(),
            }
        })?;
        let path = self.dir.join(NODE_FILE);
        let mut without = parse_instances(model, &file.gpus[gi].without_compute, &path)?;
        match step {
            Step::DestroyCompute(i) => {
                without.push(i);
                let dev = self.device_path(&file, gpu, &i);
                if let Err(e) = std::fs::remove_file(&dev) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        return Err(io(&dev)(e));
                    }
                }
            }
            Step::DestroyGpu(i) => without.retain(|w| *w != i),
            Step::CreateGpu(i) => without.push(i),
            Step::CreateCompute(i) => {
                without.retain(|w| *w != i);
                self.make_device(&file, gpu, &i)?;
            }
        }
        without.sort();
        file.gpus[gi].gpu_instances = names(model, d.layout().instances());
        file.gpus[gi].without_compute = names(model, &without);
        self.save(&file)?;
        let mut faults = self.faults()?;
        if let Some(n) = faults.abort_after_steps {
            if n <= 1 {
                faults.abort_after_steps = None;
                self.set_faults(&faults)?;
                log::warn!("simulated GPU {gpu}: injected abort after {call}");
                std::process::abort();
            }
            faults.abort_after_steps = Some(n - 1);
            self.set_faults(&faults)?;
        }
        Ok(())
    }
    fn power(&self, gpu: u32) -> Result<Option<PowerReading>, GpuError> {
        let file = self.load()?;
        let g = file.gpu(gpu)?;
        Ok(g.power_w.map(|watts| PowerReading {
            watts,
            energy_joules: g.energy_j,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a100() -> GpuModel {
        Catalogue::embedded().model("a100-40gb").unwrap().clone()
    }

    fn node(layout: &str) -> (tempfile::TempDir, Simulated, GpuModel) {
        let dir = tempfile::tempdir().unwrap();
        let m = a100();
        let s = Simulated::create_layouts(dir.path(), &m, &[layout]).unwrap();
        (dir, s, m)
    }

    fn inst(m: &GpuModel, text: &str) -> Instance {
        Layout::parse(m, text).unwrap().instances()[0]
    }

    #[test]
    fn overlap_and_bad_placements_are_refused_like_the_driver_does() {
        let (_d, mut s, m) = node("4g@0");
        let e = s
            .apply(0, &m, Step::CreateGpu(inst(&m, "2g@2")))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("NVML_ERROR_INSUFFICIENT_RESOURCES") && e.contains("overlap"),
            "{e}"
        );
        let e = s
            .apply(0, &m, Step::CreateGpu(inst(&m, "3g@2")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an allowed placement"), "{e}");
        assert_eq!(s.state(0, &m).unwrap().layout, Layout::parse(&m, "4g@0").unwrap());
    }

    #[test]
    fn power_is_what_the_state_file_says_and_absent_by_default() {
        let (_d, s, _m) = node("7g@0");
        assert_eq!(s.power(0).unwrap(), None);
        let mut f = s.load().unwrap();
        f.gpus[0].power_w = Some(212.5);
        f.gpus[0].energy_j = Some(3.6e6);
        s.save(&f).unwrap();
        let r = s.power(0).unwrap().unwrap();
        assert_eq!((r.watts, r.energy_joules), (212.5, Some(3.6e6)));
        assert!(matches!(s.power(3), Err(GpuError::NoSuchGpu(3))));
    }

    #[test]
    fn a_busy_instance_cannot_be_destroyed() {
        let (_d, mut s, m) = node("4g@0 3g@4");
        let three = inst(&m, "3g@4");
        s.mark_busy(0, "3g@4").unwrap();
        let e = s
            .apply(0, &m, Step::DestroyCompute(three))
            .unwrap_err()
            .to_string();
        assert!(e.contains("NVML_ERROR_IN_USE"), "{e}");
        assert_eq!(s.state(0, &m).unwrap().busy, vec![three]);
    }

    #[test]
    fn a_bad_layout_or_busy_instance_text_is_an_error_naming_gpu_and_text() {
        let dir = tempfile::tempdir().unwrap();
        let e = Simulated::create_layouts(dir.path(), &a100(), &["7g@0", "4g@0 5g@4"])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("GPU 1: layout `4g@0 5g@4`: "), "{e}");
        let (_d, s, m) = node("7g@0");
        let e = s.mark_busy(0, "9g@0").unwrap_err().to_string();
        assert!(e.starts_with("GPU 0: layout `9g@0`: "), "{e}");
        assert!(s.state(0, &m).unwrap().busy.is_empty());
    }

    #[test]
    fn a_plan_runs_end_to_end_and_the_state_survives_reopening() {
        let (d, mut s, m) = node("7g@0");
        let from = Layout::parse(&m, "7g@0").unwrap();
        let to = Layout::parse(&m, "3g@0 3g@4").unwrap();
        let plan = smartmig_core::mig::Plan::between(&m, Driver::R510, &from, &to).unwrap();
        for step in &plan.steps {
            s.apply(0, &m, *step).unwrap();
        }
        let again = Simulated::open(d.path()).unwrap();
        let st = again.state(0, &m).unwrap();
        assert_eq!(st.layout, to);
        assert!(st.is_settled());
        let files: Vec<String> = st
            .devices
            .iter()
            .map(|dv| dv.files[0].file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(files, ["nvidia0", "nvidia4"]);
        assert!(d.path().join("dev/nvidia4").exists());
    }

    #[test]
    fn device_files_go_to_the_given_dev_dir_in_physical_order() {
        let dir = tempfile::tempdir().unwrap();
        let m = a100();
        let devs = dir.path().join("cluster/dev");
        let s = Simulated::create_with_dev_dir(
            &dir.path().join("sim"),
            Some(devs.clone()),
            Driver::R510,
            &[
                GpuSpec {
                    model: m.clone(),
                    layout: Layout::parse(&m, "7g@0").unwrap(),
                },
                GpuSpec {
                    model: m.clone(),
                    layout: Layout::parse(&m, "3g@4 2g@0 1g@2").unwrap(),
                },
            ],
        )
        .unwrap();
        let files: Vec<PathBuf> = s
            .state(1, &m)
            .unwrap()
            .devices
            .iter()
            .map(|d| d.files[0].clone())
            .collect();
        assert_eq!(
            files,
            [devs.join("nvidia8"), devs.join("nvidia10"), devs.join("nvidia12")]
        );
        assert!(files.iter().all(|f| f.exists()) && devs.join("nvidia0").exists());
    }

    #[test]
    fn an_injected_create_error_fires_once_and_changes_nothing() {
        let (_d, mut s, m) = node("");
        s.set_faults(&Faults {
            fail: vec![FailFault::once(
                "create-gi",
                None,
                "NVML_ERROR_INSUFFICIENT_RESOURCES",
            )],
            ..Faults::default()
        })
        .unwrap();
        let seven = inst(&m, "7g@0");
        let e = s.apply(0, &m, Step::CreateGpu(seven)).unwrap_err().to_string();
        assert!(e.contains("NVML_ERROR_INSUFFICIENT_RESOURCES"), "{e}");
        assert!(s.state(0, &m).unwrap().layout.instances().is_empty());
        s.apply(0, &m, Step::CreateGpu(seven)).unwrap();
        assert!(!s.state(0, &m).unwrap().is_settled());
    }

    #[test]
    fn read_faults_fail_every_read_when_always_and_a_lost_gpu_is_not_listed() {
        let (_d, s, m) = node("7g@0");
        s.set_faults(&Faults {
            fail: vec![FailFault {
                always: true,
                ..FailFault::once("read", Some(0), "NVML_ERROR_GPU_IS_LOST")
            }],
            ..Faults::default()
        })
        .unwrap();
        for _ in 0..2 {
            let e = s.state(0, &m).unwrap_err().to_string();
            assert!(e.contains("NVML_ERROR_GPU_IS_LOST"), "{e}");
        }
        s.set_faults(&Faults {
            fail: vec![FailFault::once("list", None, "NVML_ERROR_UNKNOWN")],
            ..Faults::default()
        })
        .unwrap();
        assert!(s.gpus().is_err());
        assert!(s.gpus().is_ok(), "once");
        s.set_faults(&Faults {
            lost: vec![0],
            ..Faults::default()
        })
        .unwrap();
        assert!(s.gpus().unwrap().is_empty());
    }
}
