//! NVIDIA's GPU-instance profiles per product, written by hand from NVIDIA's MIG user
//! guide ("Supported MIG Profiles") and `nvidia-smi mig -lgip`/`-lgipp` listings, and kept
//! apart from smartmig's catalogue on purpose: tests compare the two.
//!
//! Memory per profile is the size in the profile's name (`3g.20gb` → 20 × 1024 MB), not
//! the slightly smaller figure a driver lists.

use nvml_wrapper_sys::bindings as sys;
use serde::{Deserialize, Serialize};

/// One GPU-instance profile as the driver describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GiProfile {
    /// NVML's profile enum (`NVML_GPU_INSTANCE_PROFILE_3_SLICE`, ...).
    pub profile: u32,
    /// The profile id create calls take (`nvidia-smi mig -lgip`'s ID column).
    pub id: u32,
    /// Type name (`3g.20gb`).
    pub name: String,
    /// Compute slices.
    pub slices: u32,
    /// Memory slices (placement size).
    pub memory_slices: u32,
    /// Most instances on one GPU.
    pub instance_count: u32,
    /// Memory, MB.
    pub memory_mb: u64,
    /// Placement starts.
    pub starts: Vec<u32>,
}

/// A product: its NVML name and MIG geometry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Product {
    /// Name NVML reports.
    pub name: String,
    /// Compute slices.
    pub compute_slices: u32,
    /// Memory slices.
    pub memory_slices: u32,
    /// Its GPU-instance profiles (empty: no MIG).
    pub profiles: Vec<GiProfile>,
}

fn gb(name: &str) -> u64 {
    let digits: String = name
        .split('.')
        .nth(1)
        .unwrap_or_default()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse::<u64>().unwrap_or(0) * 1024
}

fn profile(
    profile: u32,
    id: u32,
    name: &str,
    slices: u32,
    memory_slices: u32,
    count: u32,
    starts: &[u32],
) -> GiProfile {
    GiProfile {
        profile,
        id,
        name: name.to_string(),
        slices,
        memory_slices,
        instance_count: count,
        memory_mb: gb(name),
        starts: starts.to_vec(),
    }
}

/// The 7-compute, 8-memory-slice table NVIDIA lists for A100, H100, H200, GH200 and B200
/// (the same profiles and placements on each; only the memory in the names differs):
/// `one` the 1g size, `two` the 1g double-memory and 2g size, `four` the 3g and 4g size,
/// `all` the 7g size, in GB.
fn seven_eight(name: &str, one: u32, two: u32, four: u32, all: u32) -> Product {
    let p = |s: &str| s.to_string();
    Product {
        name: p(name),
        compute_slices: 7,
        memory_slices: 8,
        profiles: vec![
            profile(
                sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE,
                19,
                &format!("1g.{one}gb"),
                1,
                1,
                7,
                &[0, 1, 2, 3, 4, 5, 6],
            ),
            profile(
                sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
                20,
                &format!("1g.{one}gb+me"),
                1,
                1,
                1,
                &[0, 1, 2, 3, 4, 5, 6],
            ),
            profile(
                sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2,
                15,
                &format!("1g.{two}gb"),
                1,
                2,
                4,
                &[0, 2, 4, 6],
            ),
            profile(
                sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE,
                14,
                &format!("2g.{two}gb"),
                2,
                2,
                3,
                &[0, 2, 4],
            ),
            profile(
                sys::NVML_GPU_INSTANCE_PROFILE_3_SLICE,
                9,
                &format!("3g.{four}gb"),
                3,
                4,
                2,
                &[0, 4],
            ),
            profile(
                sys::NVML_GPU_INSTANCE_PROFILE_4_SLICE,
                5,
                &format!("4g.{four}gb"),
                4,
                4,
                1,
                &[0],
            ),
            profile(
                sys::NVML_GPU_INSTANCE_PROFILE_7_SLICE,
                0,
                &format!("7g.{all}gb"),
                7,
                8,
                1,
                &[0],
            ),
        ],
    }
}

/// The A30-24GB: 4 compute and 4 memory slices; the whole GPU is the 4-slice profile.
fn a30() -> Product {
    Product {
        name: "NVIDIA A30".into(),
        compute_slices: 4,
        memory_slices: 4,
        profiles: vec![
            profile(
                sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE,
                14,
                "1g.6gb",
                1,
                1,
                4,
                &[0, 1, 2, 3],
            ),
            profile(
                sys::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
                21,
                "1g.6gb+me",
                1,
                1,
                1,
                &[0, 1, 2, 3],
            ),
            profile(
                sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE,
                5,
                "2g.12gb",
                2,
                2,
                2,
                &[0, 2],
            ),
            profile(
                sys::NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1,
                6,
                "2g.12gb+me",
                2,
                2,
                1,
                &[0, 2],
            ),
            profile(
                sys::NVML_GPU_INSTANCE_PROFILE_4_SLICE,
                0,
                "4g.24gb",
                4,
                4,
                1,
                &[0],
            ),
        ],
    }
}

/// Every product the library can stand in for, by a short key.
pub fn products() -> Vec<(&'static str, Product)> {
    vec![
        ("a100-40gb", seven_eight("NVIDIA A100-SXM4-40GB", 5, 10, 20, 40)),
        ("a100-80gb", seven_eight("NVIDIA A100-SXM4-80GB", 10, 20, 40, 80)),
        ("a30-24gb", a30()),
        ("h100-80gb", seven_eight("NVIDIA H100 80GB HBM3", 10, 20, 40, 80)),
        ("h100-pcie-80gb", seven_eight("NVIDIA H100 PCIe", 10, 20, 40, 80)),
        ("h100-nvl-94gb", seven_eight("NVIDIA H100 NVL", 12, 24, 47, 94)),
        ("h200-141gb", seven_eight("NVIDIA H200", 18, 35, 71, 141)),
        ("h200-nvl-141gb", seven_eight("NVIDIA H200 NVL", 18, 35, 71, 141)),
        ("gh200-96gb", seven_eight("NVIDIA GH200 480GB", 12, 24, 48, 96)),
        (
            "gh200-144gb",
            seven_eight("NVIDIA GH200 144G HBM3e", 18, 36, 72, 144),
        ),
        ("b200-180gb", seven_eight("NVIDIA B200", 23, 45, 90, 180)),
        (
            "l40s",
            Product {
                name: "NVIDIA L40S".into(),
                compute_slices: 0,
                memory_slices: 0,
                profiles: Vec::new(),
            },
        ),
    ]
}

/// The product with key `key`.
pub fn product(key: &str) -> Option<Product> {
    products().into_iter().find(|(k, _)| *k == key).map(|(_, p)| p)
}

/// Compute-instance profile enum → compute slices, for the profiles a GPU instance may
/// offer.
pub fn ci_slices(profile: u32) -> Option<u32> {
    match profile {
        sys::NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE => Some(1),
        sys::NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE => Some(2),
        sys::NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE => Some(3),
        sys::NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE => Some(4),
        sys::NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE => Some(7),
        _ => None,
    }
}

/// Whether a GPU instance of `gi_slices` compute slices offers compute instances of
/// `slices` (`nvidia-smi mig -lcip`: a 4g offers 1, 2 and 4, never 3).
pub fn ci_fits(gi_slices: u32, slices: u32) -> bool {
    slices <= gi_slices && !(gi_slices == 4 && slices == 3)
}
