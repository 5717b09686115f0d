//! Before Slurm 23.02.6 a pending job cannot be re-routed ([`super::RETYPE_SINCE`]): a
//! re-layout that takes the last GPU of a type away from the jobs the plugin routed to it
//! would leave them pending for good. Such a batch leaves out, per type, one node that has
//! it; the node changes once no routed job waits for the type (it ran, or left).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use smartmig_core::mig::Layout;
use smartmig_core::routing::RoutedFrom;

use super::plan::{Change, Skipped, Wait};
use super::view::View;
use super::Central;
use crate::slurm::{parse_gres, SlurmJob};

impl Central {
    /// Where Slurm cannot re-route pending jobs, takes out of `by_node` (the batch) the
    /// changes of one node per managed type that routed jobs ask for and the batch would
    /// leave on no GPU; they join `skipped`. Routed jobs: pending ones, and running ones
    /// on instances the batch destroys (requeued, they ask for their type again).
    pub(super) fn keep_routed_types(
        &self,
        view: &View,
        by_node: &mut BTreeMap<String, Vec<Change>>,
        skipped: &mut Vec<Skipped>,
    ) {
        if self.retypes_pending || by_node.is_empty() {
            return;
        }
        let wanted = self.routed_types(view, by_node);
        if wanted.is_empty() {
            return;
        }
        let now = self.types_on(view, &BTreeMap::new());
        loop {
            let after = self.types_on(view, by_node);
            let Some((ty, jobs)) = wanted
                .iter()
                .find(|(ty, _)| now.contains(*ty) && !after.contains(*ty))
            else {
                return;
            };
            // The node of the batch with that type and the fewest changes waits.
            let Some(node) = by_node
                .iter()
                .filter(|(n, _)| {
                    view.gpus
                        .iter()
                        .any(|g| &g.node == *n && self.has_type(g.model, &g.layout, ty))
                })
                .min_by_key(|&(n, c)| (c.len(), n))
                .map(|(n, _)| n.clone())
            else {
                return;
            };
            log::info!(
                "{node}: its re-layout waits: it has the last {ty}, which routed job(s) {} wait for \
                 (this Slurm cannot re-route them; from 23.02.6 it can)",
                ids(jobs)
            );
            for c in by_node.remove(&node).unwrap_or_default() {
                skipped.push(Skipped {
                    gpu: c.gpu,
                    target: c.target,
                    why: Wait::LastOfType {
                        gpu_type: ty.clone(),
                        jobs: jobs.iter().copied().collect(),
                    },
                });
            }
        }
    }

    /// The managed types routed jobs ask for, each with those jobs: the pending ones and
    /// the running ones the changes of `by_node` would requeue.
    fn routed_types(
        &self,
        view: &View,
        by_node: &BTreeMap<String, Vec<Change>>,
    ) -> BTreeMap<String, BTreeSet<u32>> {
        let requeued: HashSet<u32> = by_node
            .values()
            .flatten()
            .flat_map(|c| {
                let gpu = &view.gpus[c.gpu];
                c.plan
                    .touched(&gpu.busy)
                    .filter_map(|i| gpu.busy.iter().position(|b| b == i))
                    .flat_map(|k| gpu.jobs[k].iter().copied())
                    .collect::<Vec<_>>()
            })
            .collect();
        let jobs = view
            .pending
            .iter()
            .chain(view.running.iter().filter(|j| requeued.contains(&j.id)));
        let mut out: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        for j in jobs.filter(|j| routed(j)) {
            for t in j.tres.iter().flatten() {
                for g in parse_gres(t, "job").unwrap_or_default() {
                    if self.mig_types.contains(&g.gpu_type) {
                        out.entry(g.gpu_type).or_default().insert(j.id);
                    }
                }
            }
        }
        out
    }

    /// The types the managed GPUs have with the changes of `by_node` made.
    fn types_on(&self, view: &View, by_node: &BTreeMap<String, Vec<Change>>) -> HashSet<String> {
        let layouts: HashMap<usize, &Layout> = by_node
            .values()
            .flatten()
            .map(|c| {
                let rm = &self.resolved.models[view.gpus[c.gpu].model];
                (c.gpu, &rm.configurations[c.target].layout)
            })
            .collect();
        view.types_with(&self.resolved, &layouts)
    }

    /// Whether `layout` of a GPU of model `model` has an instance of type `ty`.
    fn has_type(&self, model: usize, layout: &Layout, ty: &str) -> bool {
        let profiles = &self.resolved.models[model].model.profiles;
        layout.instances().iter().any(|i| profiles[i.profile].name == ty)
    }
}

/// Whether the plugin routed `j` (its mark in the admin comment).
fn routed(j: &SlurmJob) -> bool {
    j.admin_comment.as_deref().and_then(RoutedFrom::find).is_some()
}

/// `10, 12` for job ids.
pub(super) fn ids<'a>(jobs: impl IntoIterator<Item = &'a u32>) -> String {
    jobs.into_iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
