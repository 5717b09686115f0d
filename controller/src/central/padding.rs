//! Padding records, central side (`[controller.central] padding`): each node's blocks
//! (`smartmig_core::mig::padding`), the MIG `Gres` entries a re-layout writes for a node
//! (padded when its instances fit the blocks), and the node's total GPU count, which is
//! what Slurm requeues running jobs over when it changes.

use std::collections::BTreeMap;

use smartmig_core::mig::padding::{self, OverBlock};
use smartmig_core::mig::Layout;

use super::view::{NodeView, View};
use super::Central;
use crate::slurm::parse_gres;

impl Central {
    /// Whether node `nv`, with running jobs, would change its total GPU count once each GPU
    /// in `after` (position in `View::gpus`, layout) has its layout, padded to `blocks`:
    /// what Slurm requeues (or kills) running jobs over at the node's registration. False
    /// on a node without running GPU jobs (on any of its GPUs, whole ones and padding
    /// included); true when either count does not read.
    pub(super) fn count_changes(
        &self,
        view: &View,
        nv: &NodeView,
        after: &[(usize, &Layout)],
        blocks: &BTreeMap<String, u32>,
    ) -> bool {
        if nv.running.is_empty() && nv.gpus.iter().all(|&g| view.gpus[g].busy.is_empty()) {
            return false;
        }
        let (_, types) = self.layouts_after(view, nv, after);
        let (then, now) = (
            gpu_total(&self.gres_for(nv, &types, blocks)),
            gpu_total(&nv.slurm.gres),
        );
        !matches!((then, now), (Some(a), Some(b)) if a == b)
    }

    /// Why node `nv`'s instances, once each GPU in `after` has its layout, do not fit
    /// `blocks` (None when they do, or without blocks).
    pub(super) fn over_block(
        &self,
        view: &View,
        nv: &NodeView,
        after: &[(usize, &Layout)],
        blocks: &BTreeMap<String, u32>,
    ) -> Option<OverBlock> {
        if blocks.is_empty() {
            return None;
        }
        let (_, types) = self.layouts_after(view, nv, after);
        padding::padding(&type_counts(&types), blocks).err()
    }

    /// Each MIG type's padding block on node `nv`, from its GPUs' models and the layouts
    /// the controller chooses among; empty without `padding`.
    pub(super) fn blocks(&self, view: &View, nv: &NodeView) -> BTreeMap<String, u32> {
        if !self.resolved.config.controller.central.padding {
            return BTreeMap::new();
        }
        padding::blocks(nv.gpus.iter().map(|&g| {
            let rm = &self.resolved.models[view.gpus[g].model];
            (&rm.model, rm.configurations.as_slice())
        }))
    }
}

/// Instances per MIG type of `types` (one list per GPU).
pub fn type_counts(types: &[Vec<String>]) -> BTreeMap<String, u32> {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for t in types.iter().flatten() {
        *counts.entry(t.clone()).or_default() += 1;
    }
    counts
}

/// The MIG `Gres` entries for `counts` (instances per MIG type): padded to `blocks` when
/// there are blocks, else one `gpu:TYPE:N` per type, by name.
pub fn mig_gres(counts: &BTreeMap<String, u32>, blocks: &BTreeMap<String, u32>) -> Result<String, OverBlock> {
    if blocks.is_empty() {
        let entries: Vec<String> = counts
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(t, n)| format!("gpu:{t}:{n}"))
            .collect();
        return Ok(entries.join(","));
    }
    padding::padded_gres(counts, blocks)
}

/// The GPUs a `Gres` value counts over all its `gpu` entries (what Slurm compares at a
/// node's registration); None when it does not read.
pub fn gpu_total(gres: &str) -> Option<u64> {
    let entries = parse_gres(gres, "Gres").ok()?;
    Some(entries.iter().map(|e| u64::from(e.count)).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mig_entries_are_padded_only_with_blocks_and_the_total_counts_every_gpu_entry() {
        let counts: BTreeMap<String, u32> = [("3g.20gb".to_string(), 2)].into();
        assert_eq!(mig_gres(&counts, &BTreeMap::new()).unwrap(), "gpu:3g.20gb:2");
        let blocks: BTreeMap<String, u32> = [("3g.20gb".to_string(), 4), ("7g.40gb".to_string(), 2)].into();
        let padded = mig_gres(&counts, &blocks).unwrap();
        assert_eq!(padded, "gpu:3g.20gb:2,gpu:pad-3g.20gb:2,gpu:pad-7g.40gb:2");
        assert_eq!(gpu_total(&format!("gpu:a100:1,{padded},license:3")), Some(7));
        assert_eq!(gpu_total("gpu:a:b:c"), None);
    }
}
