//! GPU backends for smartmig: read a node's MIG layouts and change them one driver call at
//! a time, through NVML ([`nvml::Nvml`]) or a simulated device that enforces the driver's
//! rules ([`simulated::Simulated`]).

pub mod nvml;
pub mod simulated;

use std::path::PathBuf;

use smartmig_core::mig::{Catalogue, GpuModel, Instance, Layout, Step};

/// One GPU of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// NVML index.
    pub index: u32,
    /// GPU UUID.
    pub uuid: String,
    /// Product name as the driver reports it.
    pub name: String,
    /// Catalogue key of the model the name answers to, if any.
    pub model: Option<String>,
    /// Whether MIG mode is on (current mode).
    pub mig_enabled: bool,
    /// Whether MIG mode will be on after the next GPU reset (pending mode).
    pub mig_pending: bool,
}

/// A MIG instance and the device files a process needs to use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigDevice {
    /// The GPU instance.
    pub instance: Instance,
    /// Device files in the order Slurm's gres.conf lists them (`File=` or `MultipleFiles=`).
    pub files: Vec<PathBuf>,
}

/// What a GPU holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuState {
    /// The GPU instances.
    pub layout: Layout,
    /// GPU instances that have no compute instance (a plan was interrupted).
    pub without_compute: Vec<Instance>,
    /// Instances with processes on them.
    pub busy: Vec<Instance>,
    /// Instance → device files, in physical order (by placement start).
    pub devices: Vec<MigDevice>,
}

impl GpuState {
    /// Whether every GPU instance has its compute instance.
    pub fn is_settled(&self) -> bool {
        self.without_compute.is_empty()
    }
}

/// One profile as the device describes it, for `smartmig mig probe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbedProfile {
    /// NVML profile id (`nvml_id` in the catalogue).
    pub nvml_id: u32,
    /// Compute slices.
    pub compute: u32,
    /// Most instances on one GPU.
    pub max_count: u32,
    /// Memory in MB.
    pub memory_mb: u64,
    /// Placement starts the device allows.
    pub starts: Vec<u8>,
    /// Memory slices of one placement (0 when the device listed no placement).
    pub memory_slices: u8,
}

/// How the device's profiles differ from the catalogue's model, one line per difference.
pub fn compare(model: &GpuModel, probed: &[ProbedProfile]) -> Vec<String> {
    let mut out = Vec::new();
    for p in &model.profiles {
        let Some(d) = probed.iter().find(|d| d.nvml_id == p.nvml_id) else {
            out.push(format!(
                "{} (NVML profile id {}): not offered by the device",
                p.name, p.nvml_id
            ));
            continue;
        };
        let mut starts = d.starts.clone();
        starts.sort_unstable();
        let checks = [
            ("compute slices", u64::from(p.compute), u64::from(d.compute)),
            ("max count", u64::from(p.max_count), u64::from(d.max_count)),
        ];
        for (what, cat, dev) in checks {
            if cat != dev {
                out.push(format!(
                    "{}: {what} {cat} in the catalogue, {dev} on the device",
                    p.name
                ));
            }
        }
        if starts != p.starts {
            out.push(format!(
                "{}: placements {:?} in the catalogue, {:?} on the device",
                p.name, p.starts, starts
            ));
        }
        if d.memory_slices != 0 && d.memory_slices != p.memory_slices {
            out.push(format!(
                "{}: {} memory slices in the catalogue, {} on the device",
                p.name, p.memory_slices, d.memory_slices
            ));
        }
    }
    for d in probed {
        if !model.profiles.iter().any(|p| p.nvml_id == d.nvml_id) {
            out.push(format!(
                "NVML profile id {} ({} compute slices, {} MB): offered by the device, not in the catalogue",
                d.nvml_id, d.compute, d.memory_mb
            ));
        }
    }
    out
}

/// A GPU's power draw and energy counter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowerReading {
    /// Power draw now, watts.
    pub watts: f64,
    /// Energy used since the driver was loaded, joules (None: the GPU has no counter).
    pub energy_joules: Option<f64>,
}

/// Why a backend call failed.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The NVML library could not be loaded or initialised.
    #[error("cannot use NVML ({library}): {reason}")]
    NvmlUnavailable {
        /// The library looked for.
        library: String,
        /// What went wrong.
        reason: String,
    },
    /// An NVML call failed; `code` is the NVML name, e.g. `NVML_ERROR_INSUFFICIENT_RESOURCES`.
    #[error("GPU {gpu}: {call} failed: {code}")]
    Nvml {
        /// GPU index.
        gpu: u32,
        /// The call or step.
        call: String,
        /// NVML's error name.
        code: String,
    },
    /// No GPU with that index.
    #[error("no GPU with index {0} on this node")]
    NoSuchGpu(u32),
    /// The GPU's product is not in the catalogue.
    #[error("GPU {gpu}: `{name}` is not a catalogue model")]
    UnknownModel {
        /// GPU index.
        gpu: u32,
        /// Product name.
        name: String,
    },
    /// The device holds something the catalogue cannot describe.
    #[error("GPU {gpu}: {what}")]
    Unexpected {
        /// GPU index.
        gpu: u32,
        /// What was found.
        what: String,
    },
    /// Reading or writing a file of the driver or of the simulated device failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file of the driver or a simulated device's state file is not valid.
    #[error("{path}: {reason}")]
    State {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Access to the MIG GPUs of one node.
pub trait GpuBackend {
    /// The node's GPUs, by index.
    fn gpus(&self) -> Result<Vec<GpuInfo>, GpuError>;
    /// What a GPU holds now (read-only).
    fn state(&self, gpu: u32, model: &GpuModel) -> Result<GpuState, GpuError>;
    /// Profiles and placements as the device reports them (read-only).
    fn probe(&self, gpu: u32, model: &GpuModel) -> Result<Vec<ProbedProfile>, GpuError>;
    /// Runs one driver call.
    fn apply(&mut self, gpu: u32, model: &GpuModel, step: Step) -> Result<(), GpuError>;
    /// The GPU's power draw and energy counter (read-only; None: the device reports none).
    fn power(&self, gpu: u32) -> Result<Option<PowerReading>, GpuError>;
}

/// The catalogue key of the model a product name answers to.
pub fn model_key(catalogue: &Catalogue, name: &str) -> Option<String> {
    catalogue
        .models
        .iter()
        .find(|m| m.answers_to(name))
        .map(|m| m.key.clone())
}
