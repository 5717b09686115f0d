//! Before Slurm 23.02.6 a pending job cannot be re-routed ([`super::RETYPE_SINCE`]): a
//! re-layout that takes the last GPU of a type away from the jobs the plugin routed to it
//! would leave them pending for good. Such a batch leaves out, per type, one node that has
//! it; the node changes once no routed job waits for the type (it ran, or left).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use smartmig_core::mig::Layout;
use smartmig_core::routing::RoutedFrom;

use super::plan::{ids, Change, Skipped, Wait};
use super::view::View;
use super::Central;
use crate::slurm::parse_gres;

impl Central {
    /// Where Slurm cannot re-route pending jobs, takes out of `by_node` (the batch) the
    /// changes of one node per type that the batch would leave on no GPU while routed jobs
    /// ask for it; they join `skipped`. Routed jobs: pending ones, and running ones on
    /// instances the batch destroys (requeued, they ask for their type again; a job
    /// requeued for an index move or a count change keeps its instance, so its type).
    pub(super) fn keep_routed_types(
        &self,
        view: &View,
        by_node: &mut BTreeMap<String, Vec<Change>>,
        skipped: &mut Vec<Skipped>,
    ) {
        if self.retypes_pending || by_node.is_empty() {
            return;
        }
        let now = view.types_with(&self.resolved, &HashMap::new());
        loop {
            // Jobs are looked at only when the batch takes a type away everywhere.
            let after = self.types_on(view, by_node);
            let gone: HashSet<&String> = now.difference(&after).collect();
            if gone.is_empty() {
                return;
            }
            let Some((ty, jobs)) = self.routed_jobs_for(view, by_node, &gone).pop_first() else {
                return;
            };
            // The node of the batch with that type and the fewest changes waits.
            let has_type = |n: &str| {
                view.node(n).is_some_and(|nv| {
                    nv.gpus.iter().any(|&g| {
                        let gpu = &view.gpus[g];
                        let profiles = &self.resolved.models[gpu.model].model.profiles;
                        gpu.layout
                            .instances()
                            .iter()
                            .any(|i| profiles[i.profile].name == ty)
                    })
                })
            };
            let Some(node) = by_node
                .iter()
                .filter(|(n, _)| has_type(n))
                .min_by_key(|&(n, c)| (c.len(), n))
                .map(|(n, _)| n.clone())
            else {
                return;
            };
            let jobs: Vec<u32> = jobs.into_iter().collect();
            log::info!(
                "{node}: its re-layout waits: it has the last {ty}, which routed job(s) {} wait for \
                 (this Slurm cannot re-route them; from 23.02.6 it can)",
                ids(&jobs)
            );
            for c in by_node.remove(&node).unwrap_or_default() {
                skipped.push(Skipped {
                    gpu: c.gpu,
                    target: c.target,
                    why: Wait::LastOfType {
                        gpu_type: ty.clone(),
                        jobs: jobs.clone(),
                    },
                });
            }
        }
    }

    /// The types of `gone` that routed jobs ask for, each with those jobs: the pending
    /// ones and the running ones on instances the changes of `by_node` destroy.
    fn routed_jobs_for(
        &self,
        view: &View,
        by_node: &BTreeMap<String, Vec<Change>>,
        gone: &HashSet<&String>,
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
        for j in jobs {
            let asked: Vec<String> = j
                .tres
                .iter()
                .flatten()
                .flat_map(|t| parse_gres(t, "job").unwrap_or_default())
                .map(|g| g.gpu_type)
                .filter(|t| gone.contains(t))
                .collect();
            // The admin comment is parsed only for jobs asking for a type that goes.
            if asked.is_empty()
                || j.admin_comment
                    .as_deref()
                    .and_then(|c| RoutedFrom::find_current(c, &j.tres))
                    .is_none()
            {
                continue;
            }
            for t in asked {
                out.entry(t).or_default().insert(j.id);
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
}
