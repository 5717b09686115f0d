//! Padding records: GPUs of a type no job asks for, written beside a node's MIG instances so
//! that every MIG type holds a block of fixed size in the node's `Gres`. Slurm requeues a
//! node's running jobs when the node's total GPU count changes at a re-layout, and numbers
//! the devices type by type in `Gres` order; with each type's block fixed, a change keeps
//! the total and moves no other type's indices, so it can go ahead on a busy node
//! (docs/admin-guide.md, "Padding"). A block's size is the most instances of the type the
//! node's GPUs can hold in the layouts the controller chooses among.

use std::collections::BTreeMap;

use super::{Configuration, GpuModel};

/// The prefix of a padding type's name: `pad-3g.20gb` pads `3g.20gb`.
pub const PAD_PREFIX: &str = "pad-";

/// The character-device major of padding device files: 120, in a range Linux keeps for
/// local and experimental use (the kernel's devices.txt), so no driver's device has it.
/// Slurm's device cgroup (`ConstrainDevices=yes`) denies a job every GRES device it was
/// not given, by device number: a padding file that shared a real device's number (such
/// as /dev/null's 1:3) would take that device from every job on the node.
pub const PAD_DEVICE_MAJOR: u32 = 120;

/// The major number of device number `rdev` (Linux's encoding, as glibc's `major`).
pub fn device_major(rdev: u64) -> u32 {
    (((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff)) as u32
}

/// The padding type of MIG type `ty`.
pub fn pad_type(ty: &str) -> String {
    format!("{PAD_PREFIX}{ty}")
}

/// Whether `ty` names a padding type.
pub fn is_pad_type(ty: &str) -> bool {
    ty.starts_with(PAD_PREFIX)
}

/// Each MIG type's block on a node (its most instances), given each of the node's GPUs as
/// its model and the layouts the controller may give it: per GPU, the most instances of
/// the type in any available layout; summed over the GPUs.
pub fn blocks<'a>(
    gpus: impl IntoIterator<Item = (&'a GpuModel, &'a [Configuration])>,
) -> BTreeMap<String, u32> {
    let mut out: BTreeMap<String, u32> = BTreeMap::new();
    for (model, configurations) in gpus {
        let mut most: BTreeMap<&str, u32> = BTreeMap::new();
        for c in configurations.iter().filter(|c| c.is_available()) {
            let mut here: BTreeMap<&str, u32> = BTreeMap::new();
            for i in c.layout.instances() {
                if let Some(p) = model.profiles.get(i.profile) {
                    *here.entry(p.name.as_str()).or_default() += 1;
                }
            }
            for (t, n) in here {
                let m = most.entry(t).or_default();
                *m = (*m).max(n);
            }
        }
        for (t, n) in most {
            *out.entry(t.to_string()).or_default() += n;
        }
    }
    out
}

/// A type whose instances do not fit its block: the node cannot be padded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{count} instances of {gpu_type} exceed its padding block of {block}")]
pub struct OverBlock {
    /// The MIG type.
    pub gpu_type: String,
    /// Its instances.
    pub count: u32,
    /// Its block.
    pub block: u32,
}

/// The padding each block needs around `counts` (instances per MIG type): padding type →
/// count, for the types whose block the instances do not fill.
pub fn padding(
    counts: &BTreeMap<String, u32>,
    blocks: &BTreeMap<String, u32>,
) -> Result<BTreeMap<String, u32>, OverBlock> {
    for (t, &n) in counts {
        let block = blocks.get(t).copied().unwrap_or(0);
        if n > block {
            return Err(OverBlock {
                gpu_type: t.clone(),
                count: n,
                block,
            });
        }
    }
    Ok(blocks
        .iter()
        .filter_map(|(t, &b)| {
            let n = counts.get(t).copied().unwrap_or(0);
            (b > n).then(|| (pad_type(t), b - n))
        })
        .collect())
}

/// A padded node's MIG `Gres` entries: per type by name, its instances then its padding
/// (`gpu:3g.20gb:2,gpu:pad-3g.20gb:6,...`; zero counts left out). The order never changes,
/// so each type's block keeps its device indices.
pub fn padded_gres(
    counts: &BTreeMap<String, u32>,
    blocks: &BTreeMap<String, u32>,
) -> Result<String, OverBlock> {
    let pads = padding(counts, blocks)?;
    let mut out = Vec::new();
    for t in blocks.keys() {
        if let Some(&n) = counts.get(t).filter(|n| **n > 0) {
            out.push(format!("gpu:{t}:{n}"));
        }
        let pad = pad_type(t);
        if let Some(&n) = pads.get(&pad) {
            out.push(format!("gpu:{pad}:{n}"));
        }
    }
    Ok(out.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::{resolve_configurations, Catalogue, Driver};

    fn a100() -> (GpuModel, Vec<Configuration>) {
        let cat = Catalogue::embedded();
        let m = cat.model("a100-40gb").unwrap().clone();
        let c = resolve_configurations(&cat, &m, Driver::R510).unwrap();
        (m, c)
    }

    #[test]
    fn the_major_number_reads_linux_device_numbers() {
        assert_eq!(device_major(0x103), 1, "/dev/null, 1:3");
        assert_eq!(device_major((120 << 8) | 7), 120);
        // Majors past 4095 sit in the high bits; minors past 255 above the major.
        assert_eq!(
            device_major((5000u64 & !0xfff) << 32 | (5000 & 0xfff) << 8 | 0x300000),
            5000
        );
    }

    #[test]
    fn a_block_is_the_most_instances_of_its_type_any_layout_holds_summed_over_the_gpus() {
        let (m, c) = a100();
        let b = blocks([(&m, c.as_slice()), (&m, c.as_slice())]);
        // Per A100 over c1..c12: one 7g (c1), one 4g, two 3g (c5), three 2g (c9), six
        // 1g.5gb (c12), one 1g.10gb.
        let want: BTreeMap<String, u32> = [
            ("1g.10gb", 2),
            ("1g.5gb", 12),
            ("2g.10gb", 6),
            ("3g.20gb", 4),
            ("4g.20gb", 2),
            ("7g.40gb", 2),
        ]
        .into_iter()
        .map(|(t, n)| (t.to_string(), n))
        .collect();
        assert_eq!(b, want);
        // Only c1 and c2 to choose from: blocks of 7g, 4g and 3g alone.
        let few: Vec<Configuration> = c
            .iter()
            .filter(|c| c.name == "c1" || c.name == "c2")
            .cloned()
            .collect();
        assert_eq!(blocks([(&m, few.as_slice())]).len(), 3);
    }

    #[test]
    fn padded_gres_keeps_every_block_whole_in_name_order_and_refuses_an_overfull_type() {
        let blocks: BTreeMap<String, u32> = [("3g.20gb", 4), ("4g.20gb", 2), ("7g.40gb", 2)]
            .into_iter()
            .map(|(t, n)| (t.to_string(), n))
            .collect();
        let counts = |v: &[(&str, u32)]| -> BTreeMap<String, u32> {
            v.iter().map(|(t, n)| (t.to_string(), *n)).collect()
        };
        // Two GPUs in c2.
        assert_eq!(
            padded_gres(&counts(&[("3g.20gb", 2), ("4g.20gb", 2)]), &blocks).unwrap(),
            "gpu:3g.20gb:2,gpu:pad-3g.20gb:2,gpu:4g.20gb:2,gpu:pad-7g.40gb:2"
        );
        // One moves to c1: the total stays 8, each type where it was.
        let after = padded_gres(
            &counts(&[("3g.20gb", 1), ("4g.20gb", 1), ("7g.40gb", 1)]),
            &blocks,
        )
        .unwrap();
        assert_eq!(
            after,
            "gpu:3g.20gb:1,gpu:pad-3g.20gb:3,gpu:4g.20gb:1,gpu:pad-4g.20gb:1,gpu:7g.40gb:1,gpu:pad-7g.40gb:1"
        );
        let e = padded_gres(&counts(&[("3g.20gb", 5)]), &blocks).unwrap_err();
        assert_eq!(
            e.to_string(),
            "5 instances of 3g.20gb exceed its padding block of 4"
        );
        assert!(
            padded_gres(&counts(&[("1g.5gb", 1)]), &blocks).is_err(),
            "a type without a block"
        );
        assert!(is_pad_type("pad-3g.20gb") && !is_pad_type("3g.20gb"));
    }
}
