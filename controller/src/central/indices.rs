//! Slurm's device indices across a re-layout. Slurm keeps a running job's device index
//! (`IDX`) when a node's GPUs change; a change that puts another device at that index
//! would let Slurm hand the job's device to the next job of its type. This finds the busy
//! devices a change would move: drain mode waits for them (`plan`), preempt mode requeues
//! their jobs first (`transaction`).

use std::collections::BTreeMap;
use std::fmt;

use smartmig_core::mig::device_order::kept_order;
use smartmig_core::mig::layout::display_instance;
use smartmig_core::mig::{Instance, Layout};

use super::padding::{mig_gres, type_counts};
use super::view::{
    instance_types, node_devices, slurm_index_order, CountMismatch, GpuView, GresOrder, NodeDevice, NodeView,
    View,
};
use super::Central;
use crate::channel::device_ref;
use crate::slurm::merge_mig_gres;

/// A busy device whose index a change would give to another device.
#[derive(Debug, Clone)]
pub struct Moved {
    /// Position of its GPU in `View::gpus`.
    pub gpu: usize,
    /// The instance.
    pub instance: Instance,
    /// Jobs Slurm says run on it.
    pub jobs: Vec<u32>,
    /// What the message says: `the job on 3g.20gb@4 of GPU 0 holds Slurm device index 0,
    /// which would name 3g.20gb@0 of GPU 0`.
    text: String,
}

impl fmt::Display for Moved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The node's device indices cannot be placed (Slurm's counts differ from the agent's).
#[derive(Debug, Clone, thiserror::Error)]
#[error("the node's device indices cannot be placed ({0})")]
pub struct Unplaced(#[from] CountMismatch);

impl Central {
    /// The busy devices of node `nv` whose Slurm index would name another device once each
    /// GPU in `after` (position in `View::gpus`, layout) has its layout, the node padded to
    /// `blocks` (empty: not padded). Busy instances
    /// absent from their GPU's new layout are destroyed and do not count (drain mode never
    /// plans that; preempt mode requeues their jobs).
    pub(super) fn moved(
        &self,
        view: &View,
        nv: &NodeView,
        after: &[(usize, &Layout)],
        blocks: &BTreeMap<String, u32>,
    ) -> Result<Vec<Moved>, Unplaced> {
        let gpus: Vec<&GpuView> = nv.gpus.iter().map(|&g| &view.gpus[g]).collect();
        if gpus.iter().all(|g| g.busy.is_empty()) {
            return Ok(Vec::new());
        }
        let model = |g: &GpuView| &self.resolved.models[g.model];
        let (layout_after, types_after) = self.layouts_after(view, nv, after);
        let types_now: Vec<Vec<String>> = gpus
            .iter()
            .map(|g| instance_types(&model(g).model, &g.layout))
            .collect();
        let now = slurm_index_order(
            &nv.slurm.gres,
            &pairs(gpus.iter().map(|g| &g.layout).collect(), &types_now),
            nv.gres_order.within()?,
        )?;
        let gres = self.gres_for(nv, &types_after, blocks);
        let within = self.order_after(view, nv, &layout_after, blocks)?;
        let then = slurm_index_order(&gres, &pairs(layout_after.clone(), &types_after), &within)?;
        let mut moved = Vec::new();
        for (p, g) in gpus.iter().enumerate() {
            for (inst, jobs) in g.busy.iter().zip(&g.jobs) {
                if !layout_after[p].instances().contains(inst) {
                    continue;
                }
                let i = now.iter().position(|d| *d == Some((p, *inst)));
                if i.is_some_and(|i| then.get(i) == Some(&Some((p, *inst)))) {
                    continue;
                }
                let m = &model(g).model;
                let name =
                    |(q, d): NodeDevice| format!("{} of GPU {}", display_instance(m, &d), gpus[q].index);
                let named = i.and_then(|i| then.get(i).copied().flatten());
                moved.push(Moved {
                    gpu: nv.gpus[p],
                    instance: *inst,
                    jobs: jobs.clone(),
                    text: format!(
                        "the job on {} holds Slurm device index {}, which would name {}",
                        name((p, *inst)),
                        i.map_or("?".into(), |i| i.to_string()),
                        named.map_or("another device".into(), name)
                    ),
                });
            }
        }
        Ok(moved)
    }

    /// The order within each type of node `nv`'s devices once its GPUs have the layouts
    /// `after` (one per GPU of the node), as the re-layout writes gres.conf: with padding
    /// (`blocks` not empty), each busy device keeps its position within its type where the
    /// type's new count allows, the others fill the positions left in GPU and placement
    /// order ([`kept_order`]); without, empty (GPU and placement order). The idle ones may
    /// move because the node is drained in Slurm from this view until the re-layout ends
    /// (the order goes with the plan once the drained node's busy devices are read).
    /// A reported order that does not list the node's devices (a GPU laid out by hand since
    /// the file was written) places no index: on an idle node the devices start from GPU
    /// and placement order, with a busy one it is an error.
    pub(super) fn order_after(
        &self,
        view: &View,
        nv: &NodeView,
        after: &[&Layout],
        blocks: &BTreeMap<String, u32>,
    ) -> Result<Vec<NodeDevice>, CountMismatch> {
        if blocks.is_empty() {
            return Ok(Vec::new());
        }
        let type_of = |&(p, i): &NodeDevice| -> &str {
            let model = &self.resolved.models[view.gpus[nv.gpus[p]].model].model;
            model.profiles.get(i.profile).map_or("", |p| p.name.as_str())
        };
        let devices = |layouts: &[&Layout]| -> Vec<NodeDevice> {
            let mut out = node_devices(layouts.iter().copied());
            out.sort_by(|a, b| {
                type_of(a)
                    .cmp(type_of(b))
                    .then((a.0, a.1.start).cmp(&(b.0, b.1.start)))
            });
            out
        };
        let busy = |&(p, i): &NodeDevice| view.gpus[nv.gpus[p]].busy.contains(&i);
        let layouts: Vec<&Layout> = nv.gpus.iter().map(|&g| &view.gpus[g].layout).collect();
        let current = devices(&layouts);
        let now = match &nv.gres_order {
            GresOrder::Listed(reported) => reported.clone(),
            GresOrder::Placement => current,
            GresOrder::Unknown if !current.iter().any(busy) => current,
            GresOrder::Unknown => return Err(CountMismatch::Order),
        };
        Ok(kept_order(&now, &devices(after), type_of, busy))
    }

    /// [`Central::order_after`] as a re-layout asks the node's agent to write it
    /// (`Desired::order`).
    pub(super) fn order_refs(
        &self,
        view: &View,
        nv: &NodeView,
        after: &[(usize, &Layout)],
        blocks: &BTreeMap<String, u32>,
    ) -> Result<Vec<String>, CountMismatch> {
        let (layouts, _) = self.layouts_after(view, nv, after);
        Ok(self
            .order_after(view, nv, &layouts, blocks)?
            .iter()
            .map(|&(p, i)| {
                let g = &view.gpus[nv.gpus[p]];
                device_ref(
                    g.index,
                    &display_instance(&self.resolved.models[g.model].model, &i),
                )
            })
            .collect())
    }

    /// The node `Gres` a re-layout of node `nv` to instances of `types` (one list per GPU
    /// of the node) writes: the managed types' counts (padded to `blocks`, when there are
    /// blocks and the counts fit them) in place of the node's entries ([`merge_mig_gres`],
    /// as the re-layout writes the node's line).
    pub(super) fn gres_for(
        &self,
        nv: &NodeView,
        types: &[Vec<String>],
        blocks: &BTreeMap<String, u32>,
    ) -> String {
        let counts = type_counts(types);
        let mig = mig_gres(&counts, blocks).unwrap_or_else(|e| {
            log::warn!("{}: not padded: {e}", nv.name);
            mig_gres(&counts, &BTreeMap::new()).unwrap_or_default()
        });
        merge_mig_gres(&nv.slurm.gres, &mig, &self.mig_types)
    }

    /// The layouts of node `nv`'s GPUs once each GPU in `after` (position in `View::gpus`,
    /// layout) has its layout, with their instances' types.
    pub(super) fn layouts_after<'a>(
        &'a self,
        view: &'a View,
        nv: &NodeView,
        after: &[(usize, &'a Layout)],
    ) -> (Vec<&'a Layout>, Vec<Vec<String>>) {
        let layouts: Vec<&Layout> = nv
            .gpus
            .iter()
            .map(|&g| {
                after
                    .iter()
                    .find(|a| a.0 == g)
                    .map_or(&view.gpus[g].layout, |a| a.1)
            })
            .collect();
        let types = nv
            .gpus
            .iter()
            .zip(&layouts)
            .map(|(&g, l)| instance_types(&self.resolved.models[view.gpus[g].model].model, l))
            .collect();
        (layouts, types)
    }
}

/// Each layout with its instances' types, as [`slurm_index_order`] takes them.
fn pairs<'a>(layouts: Vec<&'a Layout>, types: &'a [Vec<String>]) -> Vec<(&'a Layout, &'a [String])> {
    layouts
        .into_iter()
        .zip(types)
        .map(|(l, t)| (l, t.as_slice()))
        .collect()
}
