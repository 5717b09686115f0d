//! The NVML backend: `libnvidia-ml.so.1` loaded at run time through `nvml-wrapper`, with
//! raw calls for what its safe API lacks (GPU and compute instances with placements;
//! `possible_placements` in nvml-wrapper 0.13 returns an empty list).
//!
//! `gpus`, `state` and `probe` only read; only `apply` changes a GPU.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::PathBuf;

use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings as sys;
use smartmig_core::mig::{Catalogue, GpuModel, Instance, Layout, Step};

use crate::{GpuBackend, GpuError, GpuInfo, GpuState, MigDevice, PowerReading, ProbedProfile};

/// The library NVML is loaded from unless told otherwise.
pub const LIBRARY: &str = "libnvidia-ml.so.1";

/// Where the driver lists the capability device minors of MIG instances.
const MIG_MINORS: &str = "/proc/driver/nvidia-caps/mig-minors";

/// Most GPU instances, compute instances or placements one call returns.
const MAX_ITEMS: usize = 32;

/// The NVML backend.
pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
    catalogue: Catalogue,
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

fn wrapper_error(gpu: u32, call: &str, e: nvml_wrapper::error::NvmlError) -> GpuError {
    GpuError::Nvml {
        gpu,
        call: call.to_string(),
        code: e.to_string(),
    }
}

/// A GPU instance found on the device.
struct FoundGi {
    handle: sys::nvmlGpuInstance_t,
    id: u32,
    instance: Instance,
}

impl Nvml {
    /// Loads `libnvidia-ml.so.1` and initialises NVML.
    pub fn open() -> Result<Nvml, GpuError> {
        Nvml::open_library(OsStr::new(LIBRARY))
    }

    /// Loads NVML from a given library path.
    pub fn open_library(library: &OsStr) -> Result<Nvml, GpuError> {
        let nvml = nvml_wrapper::Nvml::builder()
            .lib_path(library)
            .init()
            .map_err(|e| GpuError::NvmlUnavailable {
                library: library.to_string_lossy().into_owned(),
                reason: match e {
                    nvml_wrapper::error::NvmlError::LibloadingError(l) => l.to_string(),
                    other => other.to_string(),
                },
            })?;
        Ok(Nvml {
            nvml,
            catalogue: Catalogue::embedded(),
        })
    }

    fn device(&self, gpu: u32) -> Result<Device<'_>, GpuError> {
        self.nvml.device_by_index(gpu).map_err(|e| match e {
            nvml_wrapper::error::NvmlError::InvalidArg | nvml_wrapper::error::NvmlError::NotFound => {
                GpuError::NoSuchGpu(gpu)
            }
            other => wrapper_error(gpu, "nvmlDeviceGetHandleByIndex", other),
        })
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
        let lib = self.nvml.lib();
        let f = self.sym(
            gpu,
            "nvmlDeviceGetGpuInstanceProfileInfo",
            &lib.nvmlDeviceGetGpuInstanceProfileInfo,
        )?;
        let mut out = Vec::new();
        for p in 0..sys::NVML_GPU_INSTANCE_PROFILE_COUNT {
            // SAFETY: zeroed plain C struct filled by NVML; the handle comes from this library.
            let mut info: sys::nvmlGpuInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
            let code = unsafe { f(dev.handle(), p, &mut info) };
            if code == sys::nvmlReturn_enum_NVML_SUCCESS {
                out.push(info);
            } else if code != sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED
                && code != sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
            {
                Self::check(gpu, "nvmlDeviceGetGpuInstanceProfileInfo", code)?;
            }
        }
        Ok(out)
    }

    fn placements(&self, gpu: u32, dev: &Device<'_>, profile_id: u32) -> Result<(Vec<u8>, u8), GpuError> {
        let lib = self.nvml.lib();
        let f = self.sym(
            gpu,
            "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
            &lib.nvmlDeviceGetGpuInstancePossiblePlacements_v2,
        )?;
        let mut buf = [sys::nvmlGpuInstancePlacement_t { start: 0, size: 0 }; MAX_ITEMS];
        let mut count = MAX_ITEMS as u32;
        // SAFETY: `buf` holds `count` entries; NVML writes at most that many.
        let code = unsafe { f(dev.handle(), profile_id, buf.as_mut_ptr(), &mut count) };
        Self::check(gpu, "nvmlDeviceGetGpuInstancePossiblePlacements_v2", code)?;
        let found = &buf[..(count as usize).min(MAX_ITEMS)];
        let size = found.first().map_or(0, |p| p.size as u8);
        Ok((found.iter().map(|p| p.start as u8).collect(), size))
    }

    /// Every GPU instance of the device with its catalogue instance.
    fn gpu_instances(&self, gpu: u32, dev: &Device<'_>, model: &GpuModel) -> Result<Vec<FoundGi>, GpuError> {
        let lib = self.nvml.lib();
        let list = self.sym(gpu, "nvmlDeviceGetGpuInstances", &lib.nvmlDeviceGetGpuInstances)?;
        let info_f = self.sym(gpu, "nvmlGpuInstanceGetInfo", &lib.nvmlGpuInstanceGetInfo)?;
        let mut out = Vec::new();
        for p in self.gi_profiles(gpu, dev)? {
            let mut buf: [sys::nvmlGpuInstance_t; MAX_ITEMS] = [std::ptr::null_mut(); MAX_ITEMS];
            let mut count = MAX_ITEMS as u32;
            // SAFETY: `buf` holds `count` handles.
            let code = unsafe { list(dev.handle(), p.id, buf.as_mut_ptr(), &mut count) };
            Self::check(gpu, "nvmlDeviceGetGpuInstances", code)?;
            for &h in &buf[..(count as usize).min(MAX_ITEMS)] {
                // SAFETY: plain C struct filled by NVML for a handle it returned.
                let mut info: sys::nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
                Self::check(gpu, "nvmlGpuInstanceGetInfo", unsafe { info_f(h, &mut info) })?;
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

    /// The compute instances of a GPU instance: (handle, id).
    fn compute_instances(
        &self,
        gpu: u32,
        gi: &FoundGi,
    ) -> Result<Vec<(sys::nvmlComputeInstance_t, u32)>, GpuError> {
        let lib = self.nvml.lib();
        let pinfo = self.sym(
            gpu,
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
            &lib.nvmlGpuInstanceGetComputeInstanceProfileInfo,
        )?;
        let list = self.sym(
            gpu,
            "nvmlGpuInstanceGetComputeInstances",
            &lib.nvmlGpuInstanceGetComputeInstances,
        )?;
        let cinfo = self.sym(
            gpu,
            "nvmlComputeInstanceGetInfo_v2",
            &lib.nvmlComputeInstanceGetInfo_v2,
        )?;
        let mut out = Vec::new();
        for p in 0..sys::NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
            // SAFETY: plain C structs and buffers sized as passed.
            let mut info: sys::nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
            let code = unsafe {
                pinfo(
                    gi.handle,
                    p,
                    sys::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                    &mut info,
                )
            };
            if code != sys::nvmlReturn_enum_NVML_SUCCESS {
                continue;
            }
            let mut buf: [sys::nvmlComputeInstance_t; MAX_ITEMS] = [std::ptr::null_mut(); MAX_ITEMS];
            let mut count = MAX_ITEMS as u32;
            let code = unsafe { list(gi.handle, info.id, buf.as_mut_ptr(), &mut count) };
            Self::check(gpu, "nvmlGpuInstanceGetComputeInstances", code)?;
            for &h in &buf[..(count as usize).min(MAX_ITEMS)] {
                let mut ci: sys::nvmlComputeInstanceInfo_t = unsafe { std::mem::zeroed() };
                Self::check(gpu, "nvmlComputeInstanceGetInfo_v2", unsafe { cinfo(h, &mut ci) })?;
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

/// `gpu<minor>/gi<id>/access` and `gpu<minor>/gi<id>/ci<id>/access` → capability minor.
fn mig_minors() -> BTreeMap<String, u32> {
    std::fs::read_to_string(MIG_MINORS)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

impl GpuBackend for Nvml {
    fn gpus(&self) -> Result<Vec<GpuInfo>, GpuError> {
        let n = self
            .nvml
            .device_count()
            .map_err(|e| wrapper_error(0, "nvmlDeviceGetCount", e))?;
        (0..n)
            .map(|i| {
                let dev = self.device(i)?;
                let name = dev.name().map_err(|e| wrapper_error(i, "nvmlDeviceGetName", e))?;
                Ok(GpuInfo {
                    index: i,
                    uuid: dev.uuid().map_err(|e| wrapper_error(i, "nvmlDeviceGetUUID", e))?,
                    model: crate::model_key(&self.catalogue, &name),
                    name,
                    mig_enabled: dev
                        .mig_mode()
                        .map(|m| m.current == sys::NVML_DEVICE_MIG_ENABLE)
                        .unwrap_or(false),
                })
            })
            .collect()
    }

    fn state(&self, gpu: u32, model: &GpuModel) -> Result<GpuState, GpuError> {
        let dev = self.device(gpu)?;
        let gis = self.gpu_instances(gpu, &dev, model)?;
        let minor = dev
            .minor_number()
            .map_err(|e| wrapper_error(gpu, "nvmlDeviceGetMinorNumber", e))?;
        let caps = mig_minors();
        let busy_ids: Vec<u32> = dev
            .running_compute_processes()
            .map_err(|e| wrapper_error(gpu, "nvmlDeviceGetComputeRunningProcesses", e))?
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
            let mut files = vec![PathBuf::from(format!("/dev/nvidia{minor}"))];
            for key in [
                format!("gpu{minor}/gi{}/access", gi.id),
                format!("gpu{minor}/gi{}/ci{ci_id}/access", gi.id),
            ] {
                if let Some(cap) = caps.get(&key) {
                    files.push(PathBuf::from(format!("/dev/nvidia-caps/nvidia-cap{cap}")));
                }
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
        let lib = self.nvml.lib();
        let call = step.describe(model);
        let fail = |code: sys::nvmlReturn_t| Self::check(gpu, &call, code);
        match step {
            Step::DestroyCompute(i) => {
                let gi = self.find_gi(gpu, &dev, model, i)?;
                let f = self.sym(gpu, "nvmlComputeInstanceDestroy", &lib.nvmlComputeInstanceDestroy)?;
                for (h, _) in self.compute_instances(gpu, &gi)? {
                    // SAFETY: a handle NVML just returned.
                    fail(unsafe { f(h) })?;
                }
            }
            Step::DestroyGpu(i) => {
                let gi = self.find_gi(gpu, &dev, model, i)?;
                let f = self.sym(gpu, "nvmlGpuInstanceDestroy", &lib.nvmlGpuInstanceDestroy)?;
                // SAFETY: a handle NVML just returned.
                fail(unsafe { f(gi.handle) })?;
            }
            Step::CreateGpu(i) => {
                let p = model
                    .profiles
                    .get(i.profile)
                    .ok_or_else(|| GpuError::Unexpected {
                        gpu,
                        what: format!("no profile #{} in {}", i.profile, model.key),
                    })?;
                let f = self.sym(
                    gpu,
                    "nvmlDeviceCreateGpuInstanceWithPlacement",
                    &lib.nvmlDeviceCreateGpuInstanceWithPlacement,
                )?;
                let placement = sys::nvmlGpuInstancePlacement_t {
                    start: u32::from(i.start),
                    size: u32::from(p.memory_slices),
                };
                let mut h: sys::nvmlGpuInstance_t = std::ptr::null_mut();
                // SAFETY: valid device handle, placement and out pointer.
                fail(unsafe { f(dev.handle(), p.nvml_id, &placement, &mut h) })?;
            }
            Step::CreateCompute(i) => {
                let gi = self.find_gi(gpu, &dev, model, i)?;
                let compute = model.profiles.get(i.profile).map_or(0, |p| u32::from(p.compute));
                let pinfo = self.sym(
                    gpu,
                    "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                    &lib.nvmlGpuInstanceGetComputeInstanceProfileInfo,
                )?;
                let create = self.sym(
                    gpu,
                    "nvmlGpuInstanceCreateComputeInstance",
                    &lib.nvmlGpuInstanceCreateComputeInstance,
                )?;
                // The one compute instance spanning the whole GPU instance.
                let mut full = None;
                for p in 0..sys::NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
                    // SAFETY: plain C struct filled by NVML.
                    let mut info: sys::nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
                    let code = unsafe {
                        pinfo(
                            gi.handle,
                            p,
                            sys::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                            &mut info,
                        )
                    };
                    if code == sys::nvmlReturn_enum_NVML_SUCCESS && info.sliceCount == compute {
                        full = Some(info.id);
                        break;
                    }
                }
                let id = full.ok_or_else(|| GpuError::Nvml {
                    gpu,
                    call: call.clone(),
                    code: format!("no compute instance profile with {compute} slices"),
                })?;
                let mut h: sys::nvmlComputeInstance_t = std::ptr::null_mut();
                // SAFETY: valid GPU instance handle and out pointer.
                fail(unsafe { create(gi.handle, id, &mut h) })?;
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
            Err(e) => return Err(wrapper_error(gpu, "nvmlDeviceGetPowerUsage", e)),
        };
        // millijoules since the driver loaded; Volta and newer only.
        let energy_joules = match dev.total_energy_consumption() {
            Ok(mj) => Some(mj as f64 / 1e3),
            Err(NvmlError::NotSupported) => None,
            Err(e) => return Err(wrapper_error(gpu, "nvmlDeviceGetTotalEnergyConsumption", e)),
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
