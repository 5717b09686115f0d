//! The exported NVML functions. Each takes the root's lock, meets the injected faults,
//! then reads or changes the state as NVIDIA's API reference describes; none unwinds into
//! its C caller (a panic answers `NVML_ERROR_UNKNOWN`).
//!
//! Handles are tagged integers, never dereferenced: a device is its index, a GPU instance
//! its GPU and id, a compute instance its GPU, GPU instance and id.

#![allow(non_snake_case)]
// These are C entry points: callers pass valid pointers or NULL, as NVML requires.
#![allow(clippy::missing_safety_doc, clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::{c_char, c_uint, c_ulonglong, CStr};
use std::sync::atomic::{AtomicU32, Ordering};

use nvml_wrapper_sys::bindings as sys;
use sys::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstanceProfileInfo_t, nvmlComputeInstance_t, nvmlDevice_t,
    nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t, nvmlGpuInstanceProfileInfo_t, nvmlGpuInstance_t,
    nvmlProcessInfo_t, nvmlReturn_t,
};

use crate::ops::{self, Code};
use crate::state::{Faults, Gpu, Node, TestNode, ROOT_ENV};
use crate::tables::{ci_fits, ci_slices, GiProfile};

/// NVML's error names and messages, by code.
const ERRORS: [(Code, &str, &CStr); 30] = [
    (0, "NVML_SUCCESS", c"Success"),
    (1, "NVML_ERROR_UNINITIALIZED", c"Uninitialized"),
    (2, "NVML_ERROR_INVALID_ARGUMENT", c"Invalid Argument"),
    (3, "NVML_ERROR_NOT_SUPPORTED", c"Not Supported"),
    (4, "NVML_ERROR_NO_PERMISSION", c"Insufficient Permissions"),
    (5, "NVML_ERROR_ALREADY_INITIALIZED", c"Already Initialized"),
    (6, "NVML_ERROR_NOT_FOUND", c"Not Found"),
    (7, "NVML_ERROR_INSUFFICIENT_SIZE", c"Insufficient Size"),
    (8, "NVML_ERROR_INSUFFICIENT_POWER", c"Insufficient External Power"),
    (9, "NVML_ERROR_DRIVER_NOT_LOADED", c"Driver Not Loaded"),
    (10, "NVML_ERROR_TIMEOUT", c"Timeout"),
    (11, "NVML_ERROR_IRQ_ISSUE", c"Interrupt Request Issue"),
    (
        12,
        "NVML_ERROR_LIBRARY_NOT_FOUND",
        c"NVML Shared Library Not Found",
    ),
    (13, "NVML_ERROR_FUNCTION_NOT_FOUND", c"Function Not Found"),
    (14, "NVML_ERROR_CORRUPTED_INFOROM", c"Corrupted infoROM"),
    (15, "NVML_ERROR_GPU_IS_LOST", c"GPU is lost"),
    (16, "NVML_ERROR_RESET_REQUIRED", c"GPU requires restart"),
    (
        17,
        "NVML_ERROR_OPERATING_SYSTEM",
        c"The operating system has blocked the request",
    ),
    (
        18,
        "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        c"RM has detected an NVML/RM version mismatch",
    ),
    (19, "NVML_ERROR_IN_USE", c"In use by another client"),
    (20, "NVML_ERROR_MEMORY", c"Insufficient Memory"),
    (21, "NVML_ERROR_NO_DATA", c"No data"),
    (22, "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED", c"ECC is not supported"),
    (23, "NVML_ERROR_INSUFFICIENT_RESOURCES", c"Insufficient resources"),
    (24, "NVML_ERROR_FREQ_NOT_SUPPORTED", c"Frequency not supported"),
    (
        25,
        "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
        c"Argument version mismatch",
    ),
    (26, "NVML_ERROR_DEPRECATED", c"Deprecated"),
    (27, "NVML_ERROR_NOT_READY", c"Not ready"),
    (28, "NVML_ERROR_GPU_NOT_FOUND", c"GPU not found"),
    (999, "NVML_ERROR_UNKNOWN", c"Unknown Error"),
];

/// The code of an NVML error name (`NVML_ERROR_IN_USE`).
pub fn code_of(name: &str) -> Option<Code> {
    ERRORS.iter().find(|(_, n, _)| *n == name).map(|(c, _, _)| *c)
}

const SUCCESS: Code = sys::nvmlReturn_enum_NVML_SUCCESS;
const INVALID: Code = sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
const NOT_SUPPORTED: Code = sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
const UNKNOWN: Code = sys::nvmlReturn_enum_NVML_ERROR_UNKNOWN;
const INSUFFICIENT_SIZE: Code = sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;

/// nvmlInit calls not yet matched by nvmlShutdown.
static INITS: AtomicU32 = AtomicU32::new(0);

const TAG_DEVICE: u64 = 1 << 40;
const TAG_GI: u64 = 2 << 40;
const TAG_CI: u64 = 3 << 40;
const TAG_MASK: u64 = 0xff << 40;

fn device_handle(gpu: u32) -> nvmlDevice_t {
    (TAG_DEVICE | u64::from(gpu)) as usize as nvmlDevice_t
}

fn gi_handle(gpu: u32, gi: u32) -> nvmlGpuInstance_t {
    (TAG_GI | u64::from(gpu) << 16 | u64::from(gi)) as usize as nvmlGpuInstance_t
}

fn ci_handle(gpu: u32, gi: u32, ci: u32) -> nvmlComputeInstance_t {
    (TAG_CI | u64::from(gpu) << 16 | u64::from(gi) << 8 | u64::from(ci)) as usize as nvmlComputeInstance_t
}

fn untag(h: usize, tag: u64) -> Option<u64> {
    let v = h as u64;
    (v & TAG_MASK == tag).then_some(v & !TAG_MASK)
}

fn device_of(h: nvmlDevice_t) -> Option<u32> {
    untag(h as usize, TAG_DEVICE).map(|v| v as u32)
}

fn gi_of(h: nvmlGpuInstance_t) -> Option<(u32, u32)> {
    untag(h as usize, TAG_GI).map(|v| ((v >> 16) as u32, (v & 0xff) as u32))
}

fn ci_of(h: nvmlComputeInstance_t) -> Option<(u32, u32, u32)> {
    untag(h as usize, TAG_CI).map(|v| ((v >> 16) as u32, ((v >> 8) & 0xff) as u32, (v & 0xff) as u32))
}

/// The node the environment names, or why there is no "driver".
fn node() -> Result<TestNode, Code> {
    let root = std::env::var_os(ROOT_ENV).ok_or(sys::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED)?;
    let node = TestNode::open(std::path::Path::new(&root));
    if !node.root().join(crate::state::STATE_FILE).is_file() {
        return Err(sys::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED);
    }
    Ok(node)
}

/// The injected error for `call` on `gpu`, if one is due (its bookkeeping saved).
fn injected(node: &TestNode, call: &str, gpu: Option<u32>) -> Result<(), Code> {
    let mut faults: Faults = node.faults().map_err(|_| UNKNOWN)?;
    let Some(pos) = faults
        .errors
        .iter()
        .position(|f| f.call == call && (f.gpu.is_none() || f.gpu == gpu))
    else {
        return Ok(());
    };
    let f = &mut faults.errors[pos];
    if f.skip > 0 {
        f.skip -= 1;
        node.set_faults(&faults).map_err(|_| UNKNOWN)?;
        return Ok(());
    }
    let code = code_of(&f.error).unwrap_or(UNKNOWN);
    if !f.always {
        faults.errors.remove(pos);
        node.set_faults(&faults).map_err(|_| UNKNOWN)?;
    }
    Err(code)
}

/// Runs `f` for `call` under the lock after the injected faults; a panic is UNKNOWN.
fn guarded(call: &str, gpu: Option<u32>, f: impl FnOnce(&TestNode) -> Result<(), Code>) -> nvmlReturn_t {
    let run = || -> Result<(), Code> {
        if INITS.load(Ordering::SeqCst) == 0 {
            return Err(sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED);
        }
        let node = node()?;
        let _lock = node.lock().map_err(|_| UNKNOWN)?;
        injected(&node, call, gpu)?;
        f(&node)
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => UNKNOWN,
    }
}

/// A read-only call on the state.
fn read(call: &str, gpu: Option<u32>, f: impl FnOnce(&Node) -> Result<(), Code>) -> nvmlReturn_t {
    guarded(call, gpu, |node| f(&node.load().map_err(|_| UNKNOWN)?))
}

/// A call that changes the state: saved, then the abort fault counts it.
fn change(
    call: &str,
    gpu: Option<u32>,
    f: impl FnOnce(&TestNode, &mut Node) -> Result<(), Code>,
) -> nvmlReturn_t {
    guarded(call, gpu, |node| {
        let mut state = node.load().map_err(|_| UNKNOWN)?;
        f(node, &mut state)?;
        node.save(&state).map_err(|_| UNKNOWN)?;
        let mut faults = node.faults().map_err(|_| UNKNOWN)?;
        if let Some(n) = faults.abort_after_changes {
            faults.abort_after_changes = n.checked_sub(1).filter(|n| *n > 0);
            node.set_faults(&faults).map_err(|_| UNKNOWN)?;
            if n <= 1 {
                eprintln!("smartmig-nvml-testlib: injected abort after {call}");
                std::process::abort();
            }
        }
        Ok(())
    })
}

fn gpu_of(state: &Node, gpu: u32) -> Result<&Gpu, Code> {
    state.gpus.get(gpu as usize).ok_or(INVALID)
}

fn gpu_mut(state: &mut Node, gpu: u32) -> Result<&mut Gpu, Code> {
    state.gpus.get_mut(gpu as usize).ok_or(INVALID)
}

/// Writes `s` NUL-terminated into `buf` of `len` bytes.
fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> Result<(), Code> {
    if buf.is_null() {
        return Err(INVALID);
    }
    if s.len() + 1 > len as usize {
        return Err(INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` holds `len` bytes, which the check above shows is enough.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        *buf.add(s.len()) = 0;
    }
    Ok(())
}

/// Writes `v` through `out`.
fn put<T>(out: *mut T, v: T) -> Result<(), Code> {
    if out.is_null() {
        return Err(INVALID);
    }
    // SAFETY: a non-NULL pointer the caller passed for NVML to fill.
    unsafe { out.write(v) };
    Ok(())
}

fn mig_profile(g: &Gpu, id: c_uint) -> Result<&GiProfile, Code> {
    if g.profiles.is_empty() {
        return Err(NOT_SUPPORTED);
    }
    g.profiles.iter().find(|p| p.id == id).ok_or(INVALID)
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    match node() {
        Ok(n) => {
            let _lock = n.lock();
            if let Err(code) = injected(&n, "nvmlInit_v2", None) {
                return code;
            }
            INITS.fetch_add(1, Ordering::SeqCst);
            SUCCESS
        }
        Err(code) => code,
    }
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    nvmlInit_v2()
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    match INITS.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)) {
        Ok(_) => SUCCESS,
        Err(_) => sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED,
    }
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    ERRORS
        .iter()
        .find(|(c, _, _)| *c == result)
        .map_or(c"Unknown Error".as_ptr(), |(_, _, m)| m.as_ptr())
}

#[no_mangle]
pub extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    read("nvmlSystemGetDriverVersion", None, |s| {
        put_str(version, length, &s.driver_version)
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    read("nvmlDeviceGetCount_v2", None, |s| {
        put(count, s.gpus.len() as c_uint)
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    read("nvmlDeviceGetHandleByIndex_v2", Some(index), |s| {
        gpu_of(s, index)?;
        put(device, device_handle(index))
    })
}

/// A read of one device's state.
fn device_read(
    call: &str,
    device: nvmlDevice_t,
    f: impl FnOnce(&Gpu, u32, &Node) -> Result<(), Code>,
) -> nvmlReturn_t {
    let Some(i) = device_of(device) else {
        return INVALID;
    };
    read(call, Some(i), |s| f(gpu_of(s, i)?, i, s))
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetName(device: nvmlDevice_t, name: *mut c_char, length: c_uint) -> nvmlReturn_t {
    device_read("nvmlDeviceGetName", device, |g, _, _| {
        put_str(name, length, &g.name)
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetUUID(device: nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> nvmlReturn_t {
    device_read("nvmlDeviceGetUUID", device, |g, _, _| {
        put_str(uuid, length, &g.uuid)
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetIndex(device: nvmlDevice_t, index: *mut c_uint) -> nvmlReturn_t {
    device_read("nvmlDeviceGetIndex", device, |_, i, _| put(index, i))
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetMinorNumber(device: nvmlDevice_t, minor: *mut c_uint) -> nvmlReturn_t {
    device_read("nvmlDeviceGetMinorNumber", device, |g, _, _| put(minor, g.minor))
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    device_read("nvmlDeviceGetMigMode", device, |g, _, _| {
        if g.profiles.is_empty() {
            return Err(NOT_SUPPORTED);
        }
        put(current, c_uint::from(g.mig_current))?;
        put(pending, c_uint::from(g.mig_pending))
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetGpuInstanceProfileInfo(
    device: nvmlDevice_t,
    profile: c_uint,
    info: *mut nvmlGpuInstanceProfileInfo_t,
) -> nvmlReturn_t {
    device_read("nvmlDeviceGetGpuInstanceProfileInfo", device, |g, _, _| {
        if profile >= sys::NVML_GPU_INSTANCE_PROFILE_COUNT {
            return Err(INVALID);
        }
        let p = g
            .profiles
            .iter()
            .find(|p| p.profile == profile)
            .ok_or(NOT_SUPPORTED)?;
        put(
            info,
            nvmlGpuInstanceProfileInfo_t {
                id: p.id,
                isP2pSupported: 0,
                sliceCount: p.slices,
                instanceCount: p.instance_count,
                multiprocessorCount: p.slices * 14,
                copyEngineCount: p.slices,
                decoderCount: p.slices.min(5),
                encoderCount: 0,
                jpegCount: u32::from(p.name.contains("+me") || p.slices == g.compute_slices),
                ofaCount: u32::from(p.name.contains("+me") || p.slices == g.compute_slices),
                memorySizeMB: p.memory_mb,
            },
        )
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    device: nvmlDevice_t,
    profile_id: c_uint,
    placements: *mut nvmlGpuInstancePlacement_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    device_read(
        "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
        device,
        |g, _, _| {
            let p = mig_profile(g, profile_id)?;
            if count.is_null() {
                return Err(INVALID);
            }
            let n = p.starts.len() as c_uint;
            if placements.is_null() {
                return put(count, n);
            }
            // SAFETY: `count` is non-NULL: it holds the capacity of `placements`.
            let capacity = unsafe { *count };
            put(count, n)?;
            if capacity < n {
                return Err(INSUFFICIENT_SIZE);
            }
            for (k, &start) in p.starts.iter().enumerate() {
                // SAFETY: `placements` holds at least `n` entries.
                unsafe {
                    placements.add(k).write(nvmlGpuInstancePlacement_t {
                        start,
                        size: p.memory_slices,
                    })
                };
            }
            Ok(())
        },
    )
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetGpuInstanceRemainingCapacity(
    device: nvmlDevice_t,
    profile_id: c_uint,
    count: *mut c_uint,
) -> nvmlReturn_t {
    device_read("nvmlDeviceGetGpuInstanceRemainingCapacity", device, |g, _, s| {
        let p = mig_profile(g, profile_id)?;
        // Greedy on a copy: how many more the driver would create.
        let mut copy = g.clone();
        let mut n = 0;
        while let Some(&start) = p
            .starts
            .iter()
            .find(|&&st| ops::refuse_gi(&s.driver_version, &copy, p, st).is_none())
        {
            ops::create_gi(&s.driver_version, &mut copy, p, start)?;
            n += 1;
        }
        put(count, n)
    })
}

/// A change of one device's state.
fn device_change(
    call: &str,
    device: nvmlDevice_t,
    f: impl FnOnce(&TestNode, &mut Node, u32) -> Result<(), Code>,
) -> nvmlReturn_t {
    let Some(i) = device_of(device) else {
        return INVALID;
    };
    change(call, Some(i), |node, s| {
        gpu_of(s, i)?;
        f(node, s, i)
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceCreateGpuInstanceWithPlacement(
    device: nvmlDevice_t,
    profile_id: c_uint,
    placement: *const nvmlGpuInstancePlacement_t,
    gpu_instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    device_change("nvmlDeviceCreateGpuInstanceWithPlacement", device, |_, s, i| {
        if placement.is_null() || gpu_instance.is_null() {
            return Err(INVALID);
        }
        // SAFETY: a non-NULL placement from the caller.
        let pl = unsafe { *placement };
        let version = s.driver_version.clone();
        let g = gpu_mut(s, i)?;
        let p = mig_profile(g, profile_id)?.clone();
        if pl.size != p.memory_slices {
            return Err(INVALID);
        }
        let id = ops::create_gi(&version, g, &p, pl.start)?;
        put(gpu_instance, gi_handle(i, id))
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceCreateGpuInstance(
    device: nvmlDevice_t,
    profile_id: c_uint,
    gpu_instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    device_change("nvmlDeviceCreateGpuInstance", device, |_, s, i| {
        let version = s.driver_version.clone();
        let g = gpu_mut(s, i)?;
        let p = mig_profile(g, profile_id)?.clone();
        let start = p
            .starts
            .iter()
            .copied()
            .find(|&st| ops::refuse_gi(&version, g, &p, st).is_none())
            .ok_or(sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES)?;
        let id = ops::create_gi(&version, g, &p, start)?;
        put(gpu_instance, gi_handle(i, id))
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetGpuInstances(
    device: nvmlDevice_t,
    profile_id: c_uint,
    gpu_instances: *mut nvmlGpuInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    device_read("nvmlDeviceGetGpuInstances", device, |g, i, _| {
        mig_profile(g, profile_id)?;
        if gpu_instances.is_null() || count.is_null() {
            return Err(INVALID);
        }
        if !g.mig_current {
            return Err(NOT_SUPPORTED);
        }
        let mut ids: Vec<u32> = g
            .gpu_instances
            .iter()
            .filter(|gi| gi.profile_id == profile_id)
            .map(|gi| gi.id)
            .collect();
        ids.sort_unstable();
        for (k, id) in ids.iter().enumerate() {
            // SAFETY: NVML requires a buffer for the profile's instance count, which `ids`
            // never exceeds.
            unsafe { gpu_instances.add(k).write(gi_handle(i, *id)) };
        }
        put(count, ids.len() as c_uint)
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetGpuInstanceById(
    device: nvmlDevice_t,
    id: c_uint,
    gpu_instance: *mut nvmlGpuInstance_t,
) -> nvmlReturn_t {
    device_read("nvmlDeviceGetGpuInstanceById", device, |g, i, _| {
        if !g.mig_current {
            return Err(NOT_SUPPORTED);
        }
        if !g.gpu_instances.iter().any(|gi| gi.id == id) {
            return Err(sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND);
        }
        put(gpu_instance, gi_handle(i, id))
    })
}

/// A read of one GPU instance.
fn gi_read(
    call: &str,
    h: nvmlGpuInstance_t,
    f: impl FnOnce(&Gpu, &crate::state::GpuInstance, u32) -> Result<(), Code>,
) -> nvmlReturn_t {
    let Some((i, id)) = gi_of(h) else {
        return INVALID;
    };
    read(call, Some(i), |s| {
        let g = gpu_of(s, i)?;
        let gi = g.gpu_instances.iter().find(|gi| gi.id == id).ok_or(INVALID)?;
        f(g, gi, i)
    })
}

#[no_mangle]
pub extern "C" fn nvmlGpuInstanceGetInfo(
    gpu_instance: nvmlGpuInstance_t,
    info: *mut nvmlGpuInstanceInfo_t,
) -> nvmlReturn_t {
    gi_read("nvmlGpuInstanceGetInfo", gpu_instance, |_, gi, i| {
        put(
            info,
            nvmlGpuInstanceInfo_t {
                device: device_handle(i),
                id: gi.id,
                profileId: gi.profile_id,
                placement: nvmlGpuInstancePlacement_t {
                    start: gi.start,
                    size: gi.size,
                },
            },
        )
    })
}

#[no_mangle]
pub extern "C" fn nvmlGpuInstanceDestroy(gpu_instance: nvmlGpuInstance_t) -> nvmlReturn_t {
    let Some((i, id)) = gi_of(gpu_instance) else {
        return INVALID;
    };
    change("nvmlGpuInstanceDestroy", Some(i), |_, s| {
        ops::destroy_gi(gpu_mut(s, i)?, id)
    })
}

#[no_mangle]
pub extern "C" fn nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gpu_instance: nvmlGpuInstance_t,
    profile: c_uint,
    eng_profile: c_uint,
    info: *mut nvmlComputeInstanceProfileInfo_t,
) -> nvmlReturn_t {
    gi_read(
        "nvmlGpuInstanceGetComputeInstanceProfileInfo",
        gpu_instance,
        |g, gi, _| {
            if profile >= sys::NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
                return Err(INVALID);
            }
            if eng_profile != sys::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED {
                return Err(NOT_SUPPORTED);
            }
            let total = ops::gi_slices(g, gi);
            let slices = ci_slices(profile)
                .filter(|s| ci_fits(total, *s))
                .ok_or(NOT_SUPPORTED)?;
            put(
                info,
                nvmlComputeInstanceProfileInfo_t {
                    id: profile,
                    sliceCount: slices,
                    instanceCount: total / slices,
                    multiprocessorCount: slices * 14,
                    sharedCopyEngineCount: total,
                    sharedDecoderCount: 0,
                    sharedEncoderCount: 0,
                    sharedJpegCount: 0,
                    sharedOfaCount: 0,
                },
            )
        },
    )
}

#[no_mangle]
pub extern "C" fn nvmlGpuInstanceCreateComputeInstance(
    gpu_instance: nvmlGpuInstance_t,
    profile_id: c_uint,
    compute_instance: *mut nvmlComputeInstance_t,
) -> nvmlReturn_t {
    let Some((i, gi)) = gi_of(gpu_instance) else {
        return INVALID;
    };
    change("nvmlGpuInstanceCreateComputeInstance", Some(i), |node, s| {
        if compute_instance.is_null() {
            return Err(INVALID);
        }
        let g = gpu_mut(s, i)?;
        let id = ops::create_ci(g, gi, profile_id)?;
        node.make_cap_devices(g.minor, gi, id).map_err(|_| UNKNOWN)?;
        put(compute_instance, ci_handle(i, gi, id))
    })
}

#[no_mangle]
pub extern "C" fn nvmlGpuInstanceGetComputeInstances(
    gpu_instance: nvmlGpuInstance_t,
    profile_id: c_uint,
    compute_instances: *mut nvmlComputeInstance_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    gi_read("nvmlGpuInstanceGetComputeInstances", gpu_instance, |g, gi, i| {
        if compute_instances.is_null() || count.is_null() {
            return Err(INVALID);
        }
        let total = ops::gi_slices(g, gi);
        if !ci_slices(profile_id).is_some_and(|s| ci_fits(total, s)) {
            return Err(NOT_SUPPORTED);
        }
        let ids: Vec<u32> = gi
            .compute_instances
            .iter()
            .filter(|c| c.profile_id == profile_id)
            .map(|c| c.id)
            .collect();
        for (k, id) in ids.iter().enumerate() {
            // SAFETY: NVML requires a buffer for the profile's instance count, which `ids`
            // never exceeds.
            unsafe { compute_instances.add(k).write(ci_handle(i, gi.id, *id)) };
        }
        put(count, ids.len() as c_uint)
    })
}

#[no_mangle]
pub extern "C" fn nvmlComputeInstanceGetInfo_v2(
    compute_instance: nvmlComputeInstance_t,
    info: *mut nvmlComputeInstanceInfo_t,
) -> nvmlReturn_t {
    let Some((i, gi, ci)) = ci_of(compute_instance) else {
        return INVALID;
    };
    read("nvmlComputeInstanceGetInfo_v2", Some(i), |s| {
        let g = gpu_of(s, i)?;
        let c = g
            .gpu_instances
            .iter()
            .find(|x| x.id == gi)
            .and_then(|x| x.compute_instances.iter().find(|c| c.id == ci))
            .ok_or(INVALID)?;
        put(
            info,
            nvmlComputeInstanceInfo_t {
                device: device_handle(i),
                gpuInstance: gi_handle(i, gi),
                id: c.id,
                profileId: c.profile_id,
                placement: sys::nvmlComputeInstancePlacement_t {
                    start: 0,
                    size: c.slices,
                },
            },
        )
    })
}

#[no_mangle]
pub extern "C" fn nvmlComputeInstanceDestroy(compute_instance: nvmlComputeInstance_t) -> nvmlReturn_t {
    let Some((i, gi, ci)) = ci_of(compute_instance) else {
        return INVALID;
    };
    change("nvmlComputeInstanceDestroy", Some(i), |_, s| {
        ops::destroy_ci(gpu_mut(s, i)?, gi, ci)
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    info_count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    device_read("nvmlDeviceGetComputeRunningProcesses_v3", device, |g, _, _| {
        if info_count.is_null() {
            return Err(INVALID);
        }
        // SAFETY: non-NULL: the capacity of `infos`.
        let capacity = unsafe { *info_count };
        let n = g.processes.len() as c_uint;
        put(info_count, n)?;
        if n == 0 {
            return Ok(());
        }
        if infos.is_null() || capacity < n {
            return Err(INSUFFICIENT_SIZE);
        }
        for (k, p) in g.processes.iter().enumerate() {
            // SAFETY: `infos` holds `capacity` ≥ `n` entries.
            unsafe {
                infos.add(k).write(nvmlProcessInfo_t {
                    pid: p.pid,
                    usedGpuMemory: 1 << 30,
                    gpuInstanceId: p.gpu_instance,
                    computeInstanceId: p.compute_instance,
                })
            };
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetPowerUsage(device: nvmlDevice_t, power: *mut c_uint) -> nvmlReturn_t {
    device_read("nvmlDeviceGetPowerUsage", device, |g, _, _| {
        put(power, g.power_mw.ok_or(NOT_SUPPORTED)?)
    })
}

#[no_mangle]
pub extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> nvmlReturn_t {
    device_read("nvmlDeviceGetTotalEnergyConsumption", device, |g, _, _| {
        put(energy, g.energy_mj.ok_or(NOT_SUPPORTED)?)
    })
}
