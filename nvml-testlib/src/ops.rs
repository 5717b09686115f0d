//! The driver's MIG rules on the state: what each create and destroy does, and the NVML
//! code it fails with (NVML API reference, "Multi Instance GPU Management").

use nvml_wrapper_sys::bindings as sys;

use crate::state::{ComputeInstance, Gpu, GpuInstance, CI_IDS, GI_IDS};
use crate::tables::{ci_fits, ci_slices, GiProfile};

/// An NVML return code.
pub type Code = sys::nvmlReturn_t;

/// Memory slices of a placement as a bit mask.
fn mask(start: u32, size: u32) -> u32 {
    ((1u32 << size) - 1) << start
}

/// The driver's major version (`550.54.15` → 550).
fn major(driver_version: &str) -> u32 {
    driver_version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

/// Why a GPU instance of `p` at `start` cannot be created now, if it cannot.
pub fn refuse_gi(driver_version: &str, gpu: &Gpu, p: &GiProfile, start: u32) -> Option<Code> {
    if !gpu.mig_current {
        return Some(sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED);
    }
    if !p.starts.contains(&start) {
        return Some(sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
    }
    let profile_of = |gi: &GpuInstance| gpu.profiles.iter().find(|q| q.id == gi.profile_id);
    let used: u32 = gpu
        .gpu_instances
        .iter()
        .map(|gi| mask(gi.start, gi.size))
        .fold(0, |a, b| a | b);
    let same = gpu
        .gpu_instances
        .iter()
        .filter(|gi| gi.profile_id == p.id)
        .count() as u32;
    let slices: u32 = gpu
        .gpu_instances
        .iter()
        .filter_map(|gi| profile_of(gi).map(|q| q.slices))
        .sum();
    // Before R510 a 4-slice and a 3-slice GPU instance may not share a GPU.
    let pre_r510_pair = major(driver_version) < 510
        && [3, 4].contains(&p.slices)
        && gpu
            .gpu_instances
            .iter()
            .filter_map(profile_of)
            .any(|q| q.slices + p.slices == 7 && q.slices != p.slices);
    // One JPEG decoder and OFA per GPU: one +me instance at a time.
    let media = p.name.contains("+me")
        && gpu
            .gpu_instances
            .iter()
            .filter_map(profile_of)
            .any(|q| q.name.contains("+me"));
    if used & mask(start, p.memory_slices) != 0
        || media
        || same >= p.instance_count
        || slices + p.slices > gpu.compute_slices
        || pre_r510_pair
    {
        return Some(sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES);
    }
    None
}

/// Creates a GPU instance of `p` at `start`; its id.
pub fn create_gi(driver_version: &str, gpu: &mut Gpu, p: &GiProfile, start: u32) -> Result<u32, Code> {
    if let Some(code) = refuse_gi(driver_version, gpu, p, start) {
        return Err(code);
    }
    // The driver hands out the lowest free id; the whole-GPU profile takes 0.
    let id = (0..GI_IDS)
        .find(|id| {
            !gpu.gpu_instances.iter().any(|gi| gi.id == *id) && (*id > 0 || p.slices == gpu.compute_slices)
        })
        .ok_or(sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES)?;
    gpu.gpu_instances.push(GpuInstance {
        id,
        profile_id: p.id,
        start,
        size: p.memory_slices,
        compute_instances: Vec::new(),
    });
    Ok(id)
}

/// Destroys GPU instance `gi`: refused while it has compute instances or processes.
pub fn destroy_gi(gpu: &mut Gpu, gi: u32) -> Result<(), Code> {
    let pos = gpu
        .gpu_instances
        .iter()
        .position(|g| g.id == gi)
        .ok_or(sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
    if !gpu.gpu_instances[pos].compute_instances.is_empty()
        || gpu.processes.iter().any(|p| p.gpu_instance == gi)
    {
        return Err(sys::nvmlReturn_enum_NVML_ERROR_IN_USE);
    }
    gpu.gpu_instances.remove(pos);
    Ok(())
}

/// The compute-instance profile enum of `slices` slices (the one spanning a GPU
/// instance of that many).
pub fn full_ci_profile(slices: u32) -> u32 {
    (0..sys::NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        .find(|p| ci_slices(*p) == Some(slices))
        .unwrap_or(sys::NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
}

/// The compute slices of GPU instance `gi`.
pub fn gi_slices(gpu: &Gpu, gi: &GpuInstance) -> u32 {
    gpu.profiles
        .iter()
        .find(|p| p.id == gi.profile_id)
        .map_or(0, |p| p.slices)
}

/// Creates a compute instance of CI profile `profile` in GPU instance `gi`; its id.
pub fn create_ci(gpu: &mut Gpu, gi: u32, profile: u32) -> Result<u32, Code> {
    let pos = gpu
        .gpu_instances
        .iter()
        .position(|g| g.id == gi)
        .ok_or(sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
    let total = gi_slices(gpu, &gpu.gpu_instances[pos]);
    let slices = ci_slices(profile)
        .filter(|s| ci_fits(total, *s))
        .ok_or(sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)?;
    let g = &mut gpu.gpu_instances[pos];
    let used: u32 = g.compute_instances.iter().map(|c| c.slices).sum();
    if used + slices > total {
        return Err(sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES);
    }
    let id = (0..CI_IDS)
        .find(|id| !g.compute_instances.iter().any(|c| c.id == *id))
        .ok_or(sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES)?;
    g.compute_instances.push(ComputeInstance {
        id,
        profile_id: profile,
        slices,
    });
    Ok(id)
}

/// Destroys compute instance `ci` of GPU instance `gi`: refused while a process uses it.
pub fn destroy_ci(gpu: &mut Gpu, gi: u32, ci: u32) -> Result<(), Code> {
    if gpu
        .processes
        .iter()
        .any(|p| p.gpu_instance == gi && p.compute_instance == ci)
    {
        return Err(sys::nvmlReturn_enum_NVML_ERROR_IN_USE);
    }
    let g = gpu
        .gpu_instances
        .iter_mut()
        .find(|g| g.id == gi)
        .ok_or(sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
    let pos = g
        .compute_instances
        .iter()
        .position(|c| c.id == ci)
        .ok_or(sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
    g.compute_instances.remove(pos);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{GpuSetup, TestNode};

    fn gpu(product: &str, instances: &[(&str, u32)]) -> (tempfile::TempDir, Gpu) {
        let dir = tempfile::tempdir().unwrap();
        let node = TestNode::create(
            dir.path(),
            &[GpuSetup {
                product: product.into(),
                instances: instances.iter().map(|(n, s)| (n.to_string(), *s)).collect(),
            }],
        )
        .unwrap();
        let g = node.load().unwrap().gpus.remove(0);
        (dir, g)
    }

    fn prof<'a>(g: &'a Gpu, name: &str) -> &'a GiProfile {
        g.profiles.iter().find(|p| p.name == name).unwrap()
    }

    #[test]
    fn overlap_count_and_placement_are_refused_as_the_driver_does() {
        let (_d, mut g) = gpu("a100-40gb", &[("4g.20gb", 0)]);
        let two = prof(&g, "2g.10gb").clone();
        assert_eq!(
            create_gi("550.54.15", &mut g, &two, 2),
            Err(sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES)
        );
        assert_eq!(
            create_gi("550.54.15", &mut g, &two, 6),
            Err(sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)
        );
        let three = prof(&g, "3g.20gb").clone();
        assert_eq!(
            create_gi("470.1", &mut g, &three, 4),
            Err(sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES)
        );
        assert!(create_gi("550.54.15", &mut g, &three, 4).is_ok());
        let me = prof(&g, "1g.5gb+me").clone();
        assert_eq!(
            create_gi("550.54.15", &mut g, &me, 4),
            Err(sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES)
        );
    }

    #[test]
    fn a_gpu_instance_with_a_compute_instance_or_process_is_in_use() {
        let (_d, mut g) = gpu("a30-24gb", &[("2g.12gb", 0), ("1g.6gb", 2)]);
        let two = g.gpu_instances[0].id;
        assert_eq!(
            destroy_gi(&mut g, two),
            Err(sys::nvmlReturn_enum_NVML_ERROR_IN_USE)
        );
        g.processes.push(crate::state::Process {
            pid: 1,
            gpu_instance: two,
            compute_instance: 0,
        });
        assert_eq!(
            destroy_ci(&mut g, two, 0),
            Err(sys::nvmlReturn_enum_NVML_ERROR_IN_USE)
        );
        g.processes.clear();
        destroy_ci(&mut g, two, 0).unwrap();
        destroy_gi(&mut g, two).unwrap();
        // A 4-slice A30 is the whole GPU: GPU instance id 0.
        let (_d, g) = gpu("a30-24gb", &[("4g.24gb", 0)]);
        assert_eq!(g.gpu_instances[0].id, 0);
        assert_eq!(g.gpu_instances[0].compute_instances[0].slices, 4);
    }

    #[test]
    fn a_4g_instance_offers_no_3_slice_compute_instance() {
        let (_d, mut g) = gpu("a100-40gb", &[("4g.20gb", 0)]);
        let id = g.gpu_instances[0].id;
        destroy_ci(&mut g, id, 0).unwrap();
        assert_eq!(
            create_ci(&mut g, id, sys::NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE),
            Err(sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)
        );
        create_ci(&mut g, id, sys::NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE).unwrap();
        create_ci(&mut g, id, sys::NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE).unwrap();
        assert_eq!(
            create_ci(&mut g, id, sys::NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE),
            Err(sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES)
        );
    }
}
