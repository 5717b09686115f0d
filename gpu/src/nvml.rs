//! The NVML backend: `libnvidia-ml.so.1` loaded at run time through `nvml-wrapper`, with
//! raw calls for what its safe API lacks (GPU and compute instances with placements;
//! `possible_placements` in nvml-wrapper 0.13 returns an empty list).
//!
//! `gpus`, `state` and `probe` only read; only `apply` changes a GPU. Every failed NVML
//! read is an error naming the GPU and the call, never an empty or partial answer; the
//! answers NVML documents for "not there" (a GPU without MIG, a profile the GPU does not
//! offer) are not errors.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings as sys;
use smartmig_core::mig::{Catalogue, GpuModel, Instance, Layout, Step};

use crate::{GpuBackend, GpuError, GpuInfo, GpuState, MigDevice, PowerReading, ProbedProfile};

/// The library NVML is loaded from unless told otherwise.
pub const LIBRARY: &str = "libnvidia-ml.so.1";

/// Where the driver lists the capability device minors of MIG instances, under the root.
pub const MIG_MINORS: &str = "proc/driver/nvidia-caps/mig-minors";

/// Most GPU instances, compute instances or placements one call returns.
const MAX_ITEMS: usize = 32;

/// Where the NVML backend finds the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlOptions {
    /// The NVML library (a file name the loader searches for, or a path).
    pub library: OsString,
    /// The file-system root of the driver's `proc/driver/nvidia-caps/mig-minors` and of
    /// the device files under `dev/` (`/` on a GPU node; a container's view of the host,
    /// or a test's directory).
    pub root: PathBuf,
}

impl From<&smartmig_core::config::node::NodeConfig> for NvmlOptions {
    /// `[node] nvml_library` and `nvidia_root`.
    fn from(n: &smartmig_core::config::node::NodeConfig) -> Self {
        NvmlOptions {
            library: n.nvml_library.clone().into_os_string(),
            root: n.nvidia_root.clone(),
        }
    }
}

impl Default for NvmlOptions {
    fn default() -> Self {
        NvmlOptions {
            library: OsString::from(LIBRARY),
            root: PathBuf::from("/"),
        }
    }
}

/// The NVML backend.
pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
    catalogue: Catalogue,
    root: PathBuf,
}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nvml")
    }
}

/// NVML's name for a return code.
pub fn code_name(code: sys::nvmlReturn_t) -> String {
    let name = match code {
        1 => "UNINITIALIZED",
        2 => "INVALID_ARGUMENT",
        3 => "NOT_SUPPORTED",
        4 => "NO_PERMISSION",
        5 => "ALREADY_INITIALIZED",
        6 => "NOT_FOUND",
        7 => "INSUFFICIENT_SIZE",
        8 => "INSUFFICIENT_POWER",
        9 => "DRIVER_NOT_LOADED",
        10 => "TIMEOUT",
        11 => "IRQ_ISSUE",
        12 => "LIBRARY_NOT_FOUND",
        13 => "FUNCTION_NOT_FOUND",
        14 => "CORRUPTED_INFOROM",
        15 => "GPU_IS_LOST",
        16 => "RESET_REQUIRED",
        17 => "OPERATING_SYSTEM",
        18 => "LIB_RM_VERSION_MISMATCH",
        19 => "IN_USE",
        20 => "MEMORY",
        21 => "NO_DATA",
        22 => "VGPU_ECC_NOT_SUPPORTED",
        23 => "INSUFFICIENT_RESOURCES",
        24 => "FREQ_NOT_SUPPORTED",
        25 => "ARGUMENT_VERSION_MISMATCH",
        26 => "DEPRECATED",
        27 => "NOT_READY",
        28 => "GPU_NOT_FOUND",
        29 => "INVALID_STATE",
        999 => "UNKNOWN",
        _ => return format!("NVML error {code}"),
    };
    format!("NVML_ERROR_{name}")
}

/// nvml-wrapper's errors as [`GpuError::Nvml`], naming the GPU and the call.
trait WrapperResult<T> {
    fn at(self, gpu: u32, call: &str) -> Result<T, GpuError>;
}

impl<T> WrapperResult<T> for Result<T, nvml_wrapper::error::NvmlError> {
    fn at(self, gpu: u32, call: &str) -> Result<T, GpuError> {
        self.map_err(|e| GpuError::Nvml {
            gpu,
            call: call.to_string(),
            code: wrapper_code(e),
        })
    }
}

/// An nvml-wrapper error as NVML's name for its code (`NVML_ERROR_GPU_IS_LOST`), or, for
/// the wrapper's own errors (a missing symbol, a bad string), their text.
fn wrapper_code(e: nvml_wrapper::error::NvmlError) -> String {
    use nvml_wrapper::error::NvmlError as E;
    match e {
        e @ (E::Utf8Error(_)
        | E::NulError(_)
        | E::LibloadingError(_)
        | E::FailedToLoadSymbol(_)
        | E::StringTooLong { .. }
        | E::IncorrectBits(_)
        | E::SetReleaseFailed
        | E::GetPciInfoFailed
        | E::PciInfoToCFailed) => e.to_string(),
        nvml => code_name(nvml.into()),
    }
}

/// Calls the raw NVML function `$f` of `$nvml`'s loaded library: `$call` is the `unsafe`
/// call, written with `$f` standing for the function. Evaluates to NVML's return code;
/// a driver without the function is an error (returned with `?`) naming the GPU and it.
macro_rules! raw_code {
    ($nvml:expr, $gpu:expr, $f:ident => $call:expr) => {{
        // Bound under the C name so the call reads as it does in NVML's documentation.
        #[allow(non_snake_case)]
        let $f = $nvml.sym($gpu, stringify!($f), &$nvml.nvml.lib().$f)?;
        $call
    }};
}

/// [`raw_code!`] with any code but success an error naming the GPU and the operation:
/// the function's name, or `op = ...` when the caller names it better.
macro_rules! raw {
    ($nvml:expr, $gpu:expr, $f:ident => $call:expr) => {
        Nvml::check($gpu, stringify!($f), raw_code!($nvml, $gpu, $f => $call))
    };
    ($nvml:expr, $gpu:expr, $f:ident => $call:expr, op = $op:expr) => {
        Nvml::check($gpu, $op, raw_code!($nvml, $gpu, $f => $call))
    };
}

/// The items a raw NVML list call writes into a buffer of [`MAX_ITEMS`] entries: `fill`
/// gets the buffer and its capacity, which the call sets to the count it wrote. A count
/// past the buffer is an error naming `gpu` and `call`, never a cut list.
fn listed<T: Copy>(
    gpu: u32,
    call: &str,
    empty: T,
    fill: impl FnOnce(*mut T, &mut u32) -> Result<(), GpuError>,
) -> Result<Vec<T>, GpuError> {
    let mut buf = [empty; MAX_ITEMS];
    let mut count = MAX_ITEMS as u32;
    fill(buf.as_mut_ptr(), &mut count)?;
    if count as usize > MAX_ITEMS {
        return Err(GpuError::Unexpected {
            gpu,
            what: format!("{call} answered {count} items, more than the {MAX_ITEMS} a GPU can hold"),
        });
    }
    Ok(buf[..count as usize].to_vec())
}

/// Whether a profile-info call's code means "the GPU (instance) does not offer this
/// profile", which NVML answers with NOT_SUPPORTED or INVALID_ARGUMENT.
fn not_offered(code: sys::nvmlReturn_t) -> bool {
    code == sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED
        || code == sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
}

/// NVML's C structs that calls fill in: all-zero bytes are a valid value of each.
///
/// # Safety
/// Only for plain C structs of integers, arrays of them and raw pointers.
unsafe trait Plain: Copy {
    /// An all-zero value for NVML to fill in.
    fn zeroed() -> Self {
        // SAFETY: the trait's contract.
        unsafe { std::mem::zeroed() }
    }
}

// SAFETY: bindgen structs of integers and nested such structs.
unsafe impl Plain for sys::nvmlGpuInstanceProfileInfo_t {}
// SAFETY: as above, with a raw device handle.
unsafe impl Plain for sys::nvmlGpuInstanceInfo_t {}
// SAFETY: as above.
unsafe impl Plain for sys::nvmlComputeInstanceProfileInfo_t {}
// SAFETY: as above, with raw device and GPU-instance handles.
unsafe impl Plain for sys::nvmlComputeInstanceInfo_t {}

/// A GPU instance found on the device.
struct FoundGi {
    handle: sys::nvmlGpuInstance_t,
    id: u32,
    instance: Instance,
}

impl Nvml {
    /// Loads `libnvidia-ml.so.1` and initialises NVML, with the driver's files under `/`.
    pub fn open() -> Result<Nvml, GpuError> {
        Nvml::open_with(&NvmlOptions::default())
    }

    /// Loads NVML from a given library path, with the driver's files under `/`.
    pub fn open_library(library: &OsStr) -> Result<Nvml, GpuError> {
        Nvml::open_with(&NvmlOptions {
            library: library.to_os_string(),
            ..NvmlOptions::default()
        })
    }

    /// Loads and initialises NVML as `options` say.
    pub fn open_with(options: &NvmlOptions) -> Result<Nvml, GpuError> {
        let library = options.library.as_os_str();
        let nvml = nvml_wrapper::Nvml::builder()
            .lib_path(library)
            .init()
            .map_err(|e| GpuError::NvmlUnavailable {
                library: library.to_string_lossy().into_owned(),
                reason: match e {
                    nvml_wrapper::error::NvmlError::LibloadingError(l) => l.to_string(),
                    other => wrapper_code(other),
                },
            })?;
        Ok(Nvml {
            nvml,
            catalogue: Catalogue::embedded(),
            root: options.root.clone(),
        })
    }

    /// A driver file under the root (`dev/nvidia0`).
    fn under_root(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn device(&self, gpu: u32) -> Result<Device<'_>, GpuError> {
        match self.nvml.device_by_index(gpu) {
            Err(nvml_wrapper::error::NvmlError::InvalidArg | nvml_wrapper::error::NvmlError::NotFound) => {
                Err(GpuError::NoSuchGpu(gpu))
            }
            other => other.at(gpu, "nvmlDeviceGetHandleByIndex_v2"),
        }
    }

    /// Turns a raw return code into a result naming the call.
    fn check(gpu: u32, call: &str, code: sys::nvmlReturn_t) -> Result<(), GpuError> {
        if code == sys::nvmlReturn_enum_NVML_SUCCESS {
            Ok(())
        } else {
            Err(GpuError::Nvml {
                gpu,
                call: call.to_string(),
                code: code_name(code),
            })
        }
    }

    /// A symbol of the loaded library, or an error naming it when the driver lacks it.
    fn sym<'a, T, E: std::fmt::Display>(
        &'a self,
        gpu: u32,
        name: &str,
        s: &'a Result<T, E>,
    ) -> Result<&'a T, GpuError> {
        s.as_ref().map_err(|e| GpuError::Nvml {
            gpu,
            call: name.to_string(),
            code: format!("symbol missing from {LIBRARY}: {e}"),
        })
    }

    /// GPU instance profiles the device knows: (NVML profile id, info).
    fn gi_profiles(
        &self,
        gpu: u32,
        dev: &Device<'_>,
    ) -> Result<Vec<sys::nvmlGpuInstanceProfileInfo_t>, GpuError> {
        let mut out = Vec::new();
        for p in 0..sys::NVML_GPU_INSTANCE_PROFILE_COUNT {
            let mut info: sys::nvmlGpuInstanceProfileInfo_t = Plain::zeroed();
            // SAFETY: the handle comes from this library; `info` is a struct NVML fills.
            let code = raw_code!(self, gpu, nvmlDeviceGetGpuInstanceProfileInfo => unsafe {
                nvmlDeviceGetGpuInstanceProfileInfo(dev.handle(), p, &mut info)
            });
            if code == sys::nvmlReturn_enum_NVML_SUCCESS {
                out.push(info);
            } else if !not_offered(code) {
                Self::check(gpu, "nvmlDeviceGetGpuInstanceProfileInfo", code)?;
            }
        }
        Ok(out)
    }

    fn placements(&self, gpu: u32, dev: &Device<'_>, profile_id: u32) -> Result<(Vec<u8>, u8), GpuError> {
        let empty = sys::nvmlGpuInstancePlacement_t { start: 0, size: 0 };
        let found = listed(
            gpu,
            "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
            empty,
            |buf, count| {
                // SAFETY: `buf` holds `count` entries; NVML writes at most that many.
                raw!(self, gpu, nvmlDeviceGetGpuInstancePossiblePlacements_v2 => unsafe {
                    nvmlDeviceGetGpuInstancePossiblePlacements_v2(dev.handle(), profile_id, buf, count)
                })
            },
        )?;
        let size = found.first().map_or(0, |p| p.size as u8);
        Ok((found.iter().map(|p| p.start as u8).collect(), size))
    }

    /// Every GPU instance of the device with its catalogue instance.
    fn gpu_instances(&self, gpu: u32, dev: &Device<'_>, model: &GpuModel) -> Result<Vec<FoundGi>, GpuError> {
        let mut out = Vec::new();
        for p in self.gi_profiles(gpu, dev)? {
            let handles = listed(
                gpu,
                "nvmlDeviceGetGpuInstances",
                std::ptr::null_mut(),
                |buf, count| {
                    // SAFETY: `buf` holds `count` handles.
                    raw!(self, gpu, nvmlDeviceGetGpuInstances => unsafe {
                        nvmlDeviceGetGpuInstances(dev.handle(), p.id, buf, count)
                    })
                },
            )?;
            for h in handles {
                let mut info: sys::nvmlGpuInstanceInfo_t = Plain::zeroed();
                // SAFETY: a handle NVML returned; `info` is a struct NVML fills.
                raw!(self, gpu, nvmlGpuInstanceGetInfo => unsafe { nvmlGpuInstanceGetInfo(h, &mut info) })?;
                let profile = model
                    .profiles
                    .iter()
                    .position(|cp| cp.nvml_id == info.profileId)
                    .ok_or_else(|| GpuError::Unexpected {
                        gpu,
                        what: format!(
                            "GPU instance {} has NVML profile id {}, which {} in the catalogue lacks",
                            info.id, info.profileId, model.key
                        ),
                    })?;
                out.push(FoundGi {
                    handle: h,
                    id: info.id,
                    instance: Instance {
                        start: info.placement.start as u8,
                        profile,
                    },
                });
            }
        }
        out.sort_by_key(|g| g.instance);
        Ok(out)
    }

    /// The shared-engine compute instance profiles a GPU instance supports.
    fn ci_profiles(
        &self,
        gpu: u32,
        gi: &FoundGi,
    ) -> Result<Vec<sys::nvmlComputeInstanceProfileInfo_t>, GpuError> {
        let mut out = Vec::new();
        for p in 0..sys::NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
            let mut info: sys::nvmlComputeInstanceProfileInfo_t = Plain::zeroed();
            // SAFETY: a handle NVML returned; `info` is a struct NVML fills.
            let code = raw_code!(self, gpu, nvmlGpuInstanceGetComputeInstanceProfileInfo => unsafe {
                nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi.handle,
                    p,
                    sys::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                    &mut info,
                )
            });
            // Profiles the GPU instance cannot hold answer NOT_SUPPORTED: not one of its.
            if code == sys::nvmlReturn_enum_NVML_SUCCESS {
                out.push(info);
            } else if !not_offered(code) {
                Self::check(gpu, "nvmlGpuInstanceGetComputeInstanceProfileInfo", code)?;
            }
        }
        Ok(out)
    }

    /// The compute instances of a GPU instance: (handle, id).
    fn compute_instances(
        &self,
        gpu: u32,
        gi: &FoundGi,
    ) -> Result<Vec<(sys::nvmlComputeInstance_t, u32)>, GpuError> {
        let mut out = Vec::new();
        for info in self.ci_profiles(gpu, gi)? {
            let handles = listed(
                gpu,
                "nvmlGpuInstanceGetComputeInstances",
                std::ptr::null_mut(),
                |buf, count| {
                    // SAFETY: `buf` holds `count` handles.
                    raw!(self, gpu, nvmlGpuInstanceGetComputeInstances => unsafe {
                        nvmlGpuInstanceGetComputeInstances(gi.handle, info.id, buf, count)
                    })
                },
            )?;
            for h in handles {
                let mut ci: sys::nvmlComputeInstanceInfo_t = Plain::zeroed();
                // SAFETY: a handle NVML returned; `ci` is a struct NVML fills.
                raw!(self, gpu, nvmlComputeInstanceGetInfo_v2 => unsafe {
                    nvmlComputeInstanceGetInfo_v2(h, &mut ci)
                })?;
                out.push((h, ci.id));
            }
        }
        Ok(out)
    }

    fn find_gi(
        &self,
        gpu: u32,
        dev: &Device<'_>,
        model: &GpuModel,
        inst: Instance,
    ) -> Result<FoundGi, GpuError> {
        self.gpu_instances(gpu, dev, model)?
            .into_iter()
            .find(|g| g.instance == inst)
            .ok_or_else(|| GpuError::Nvml {
                gpu,
                call: format!(
                    "find {}",
                    smartmig_core::mig::layout::display_instance(model, &inst)
                ),
                code: code_name(sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND),
            })
    }
}

/// The driver's capability minors: `gpu<minor>/gi<id>/access` and
/// `gpu<minor>/gi<id>/ci<id>/access` → minor. A missing or unreadable file is an error:
/// without it the node's gres.conf would lack the MIG device files.
fn mig_minors(path: &Path) -> Result<BTreeMap<String, u32>, GpuError> {
    let text = std::fs::read_to_string(path).map_err(|source| GpuError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, l)| {
            l.split_once(' ')
                .and_then(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
                .ok_or_else(|| GpuError::State {
                    path: path.to_path_buf(),
                    reason: format!("line {}: `{l}` is not `NAME MINOR`", n + 1),
                })
        })
        .collect()
}

impl GpuBackend for Nvml {
    fn gpus(&self) -> Result<Vec<GpuInfo>, GpuError> {
        let n = self.nvml.device_count().at(0, "nvmlDeviceGetCount_v2")?;
        (0..n)
            .map(|i| {
                let dev = self.device(i)?;
                let name = dev.name().at(i, "nvmlDeviceGetName")?;
                // NOT_SUPPORTED: a GPU without MIG; any other failure is an error, never
                // "MIG off" (which would hide the GPU's instances).
                let (mig_enabled, mig_pending) = match dev.mig_mode() {
                    Ok(m) => (
                        m.current == sys::NVML_DEVICE_MIG_ENABLE,
                        m.pending == sys::NVML_DEVICE_MIG_ENABLE,
                    ),
                    Err(nvml_wrapper::error::NvmlError::NotSupported) => (false, false),
                    Err(e) => return Err(e).at(i, "nvmlDeviceGetMigMode"),
                };
                Ok(GpuInfo {
                    index: i,
                    uuid: dev.uuid().at(i, "nvmlDeviceGetUUID")?,
                    model: crate::model_key(&self.catalogue, &name),
                    name,
                    mig_enabled,
                    mig_pending,
                })
            })
            .collect()
    }

    fn state(&self, gpu: u32, model: &GpuModel) -> Result<GpuState, GpuError> {
        let dev = self.device(gpu)?;
        let gis = self.gpu_instances(gpu, &dev, model)?;
        let minor = dev.minor_number().at(gpu, "nvmlDeviceGetMinorNumber")?;
        let caps = mig_minors(&self.under_root(MIG_MINORS))?;
        let busy_ids: Vec<u32> = dev
            .running_compute_processes()
            .at(gpu, "nvmlDeviceGetComputeRunningProcesses_v3")?
            .iter()
            .filter_map(|p| p.gpu_instance_id)
            .collect();
        let mut without_compute = Vec::new();
        let mut devices = Vec::new();
        for gi in &gis {
            let cis = self.compute_instances(gpu, gi)?;
            let Some(&(_, ci_id)) = cis.first() else {
                without_compute.push(gi.instance);
                continue;
            };
            // The files Slurm's AutoDetect lists for a MIG device: the parent GPU, then the
            // GPU-instance and compute-instance capability devices.
            let mut files = vec![self.under_root(&format!("dev/nvidia{minor}"))];
            for key in [
                format!("gpu{minor}/gi{}/access", gi.id),
                format!("gpu{minor}/gi{}/ci{ci_id}/access", gi.id),
            ] {
                let cap = caps.get(&key).ok_or_else(|| GpuError::State {
                    path: self.under_root(MIG_MINORS),
                    reason: format!(
                        "no `{key}` line for GPU {gpu}'s instance at {}",
                        gi.instance.start
                    ),
                })?;
                files.push(self.under_root(&format!("dev/nvidia-caps/nvidia-cap{cap}")));
            }
            devices.push(MigDevice {
                instance: gi.instance,
                files,
            });
        }
        Ok(GpuState {
            layout: Layout::new(gis.iter().map(|g| g.instance).collect()),
            without_compute,
            busy: gis
                .iter()
                .filter(|g| busy_ids.contains(&g.id))
                .map(|g| g.instance)
                .collect(),
            devices,
        })
    }

    fn probe(&self, gpu: u32, _model: &GpuModel) -> Result<Vec<ProbedProfile>, GpuError> {
        let dev = self.device(gpu)?;
        self.gi_profiles(gpu, &dev)?
            .into_iter()
            .map(|p| {
                let (starts, memory_slices) = self.placements(gpu, &dev, p.id)?;
                Ok(ProbedProfile {
                    nvml_id: p.id,
                    compute: p.sliceCount,
                    max_count: p.instanceCount,
                    memory_mb: p.memorySizeMB,
                    starts,
                    memory_slices,
                })
            })
            .collect()
    }

    fn apply(&mut self, gpu: u32, model: &GpuModel, step: Step) -> Result<(), GpuError> {
        let dev = self.device(gpu)?;
        let call = step.describe(model);
        match step {
            Step::DestroyCompute(i) => {
                let gi = self.find_gi(gpu, &dev, model, i)?;
                let cis = self.compute_instances(gpu, &gi)?;
                if cis.is_empty() {
                    return Err(GpuError::Nvml {
                        gpu,
                        call: format!("{call} (no compute instance)"),
                        code: code_name(sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND),
                    });
                }
                for (h, _) in cis {
                    // SAFETY: a handle NVML just returned.
                    raw!(self, gpu, nvmlComputeInstanceDestroy => unsafe {
                        nvmlComputeInstanceDestroy(h)
                    }, op = &call)?;
                }
            }
            Step::DestroyGpu(i) => {
                let gi = self.find_gi(gpu, &dev, model, i)?;
                // SAFETY: a handle NVML just returned.
                raw!(self, gpu, nvmlGpuInstanceDestroy => unsafe {
                    nvmlGpuInstanceDestroy(gi.handle)
                }, op = &call)?;
            }
            Step::CreateGpu(i) => {
                let p = model
                    .profiles
                    .get(i.profile)
                    .ok_or_else(|| GpuError::Unexpected {
                        gpu,
                        what: format!("no profile #{} in {}", i.profile, model.key),
                    })?;
                let placement = sys::nvmlGpuInstancePlacement_t {
                    start: u32::from(i.start),
                    size: u32::from(p.memory_slices),
                };
                let mut h: sys::nvmlGpuInstance_t = std::ptr::null_mut();
                // SAFETY: valid device handle, placement and out pointer.
                raw!(self, gpu, nvmlDeviceCreateGpuInstanceWithPlacement => unsafe {
                    nvmlDeviceCreateGpuInstanceWithPlacement(dev.handle(), p.nvml_id, &placement, &mut h)
                }, op = &call)?;
            }
            Step::CreateCompute(i) => {
                let gi = self.find_gi(gpu, &dev, model, i)?;
                let compute = model.profiles.get(i.profile).map_or(0, |p| u32::from(p.compute));
                // The one compute instance spanning the whole GPU instance.
                let id = self
                    .ci_profiles(gpu, &gi)?
                    .into_iter()
                    .find(|info| info.sliceCount == compute)
                    .map(|info| info.id)
                    .ok_or_else(|| GpuError::Nvml {
                        gpu,
                        call: call.clone(),
                        code: format!("no compute instance profile with {compute} slices"),
                    })?;
                let mut h: sys::nvmlComputeInstance_t = std::ptr::null_mut();
                // SAFETY: valid GPU instance handle and out pointer.
                raw!(self, gpu, nvmlGpuInstanceCreateComputeInstance => unsafe {
                    nvmlGpuInstanceCreateComputeInstance(gi.handle, id, &mut h)
                }, op = &call)?;
            }
        }
        Ok(())
    }

    fn power(&self, gpu: u32) -> Result<Option<PowerReading>, GpuError> {
        use nvml_wrapper::error::NvmlError;
        let dev = self.device(gpu)?;
        // milliwatts; a GPU without power readings answers NOT_SUPPORTED.
        let watts = match dev.power_usage() {
            Ok(mw) => f64::from(mw) / 1e3,
            Err(NvmlError::NotSupported) => return Ok(None),
            Err(e) => return Err(e).at(gpu, "nvmlDeviceGetPowerUsage"),
        };
        // millijoules since the driver loaded; Volta and newer only.
        let energy_joules = match dev.total_energy_consumption() {
            Ok(mj) => Some(mj as f64 / 1e3),
            Err(NvmlError::NotSupported) => None,
            Err(e) => return Err(e).at(gpu, "nvmlDeviceGetTotalEnergyConsumption"),
        };
        Ok(Some(PowerReading { watts, energy_joules }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_a_clear_error_naming_it() {
        let e = Nvml::open_library(OsStr::new("/nonexistent/libnvidia-ml.so.1"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("cannot use NVML (/nonexistent/libnvidia-ml.so.1)"),
            "{e}"
        );
        assert!(e.contains("No such file") || e.contains("cannot open"), "{e}");
    }

    #[test]
    fn nvml_codes_have_their_driver_names() {
        assert_eq!(code_name(23), "NVML_ERROR_INSUFFICIENT_RESOURCES");
        assert_eq!(code_name(19), "NVML_ERROR_IN_USE");
        assert_eq!(code_name(4242), "NVML error 4242");
    }
}
