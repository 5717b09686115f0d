//! The snapshot the plugin routes with: free and soon-free instances per type, queue
//! pressure, published durably after every cycle. While a batch is in flight it lists the
//! types the GPUs will have once it is over: a job routed then to a type the batch removes
//! would wait for it in vain (before Slurm 23.02.6 for good, as it cannot be re-routed).

use std::collections::{BTreeMap, HashMap, HashSet};

use smartmig_core::mig::Layout;
use smartmig_core::routing::{Snapshot, TypeState, SNAPSHOT_VERSION};

use super::view::View;
use super::{unix_now, Central, CycleReport};

/// Horizon of the snapshot's `soon_free`, seconds.
pub const SOON_FREE_S: f64 = 300.0;

impl Central {
    /// The snapshot of `view` at `now`.
    pub fn snapshot(&self, view: &View, now: f64) -> Snapshot {
        let mut types: BTreeMap<String, TypeState> = BTreeMap::new();
        let mut instances = 0u32;
        let ends: BTreeMap<u32, f64> = view
            .running
            .iter()
            .map(|j| {
                (
                    j.id,
                    j.time_limit_min
                        .map_or(f64::INFINITY, |t| j.start as f64 + f64::from(t) * 60.0),
                )
            })
            .collect();
        let drained: HashSet<&str> = view
            .nodes
            .iter()
            .filter(|n| n.slurm.drain || n.slurm.down)
            .map(|n| n.name.as_str())
            .collect();
        for g in &view.gpus {
            let model = &self.resolved.models[g.model].model;
            for i in g.layout.instances() {
                instances += 1;
                let e = types.entry(model.profiles[i.profile].name.clone()).or_default();
                if drained.contains(g.node.as_str()) {
                    continue;
                }
                match g.busy.iter().position(|b| b == i) {
                    None => e.free += 1,
                    Some(p) => {
                        let soon = g.jobs[p]
                            .iter()
                            .all(|j| ends.get(j).is_some_and(|end| end - now <= SOON_FREE_S));
                        if soon && !g.jobs[p].is_empty() {
                            e.soon_free += 1;
                        }
                    }
                }
            }
        }
        if let Some(after) = self.types_after_batch(view) {
            types.retain(|t, _| after.contains(t));
            for t in after {
                types.entry(t).or_default();
            }
        }
        Snapshot {
            version: SNAPSHOT_VERSION,
            generated_at: now,
            soon_free_within_s: SOON_FREE_S,
            queue_pressure: view.pending.len() as f64 / f64::from(instances.max(1)),
            types,
        }
    }

    /// The types the GPUs of `view` will have once the batch in flight is over (None:
    /// no batch).
    fn types_after_batch(&self, view: &View) -> Option<HashSet<String>> {
        let batch = self.ledger.batch.as_ref()?;
        let at = view.gpu_index();
        let mut layouts: HashMap<usize, Layout> = HashMap::new();
        for (node, txn) in &batch.nodes {
            for t in &txn.targets {
                let Some(&p) = at.get(&(node.as_str(), t.index)) else {
                    continue;
                };
                let model = &self.resolved.models[view.gpus[p].model].model;
                // The ledger's own layouts; one that no longer parses leaves the GPU as seen.
                if let Ok(l) = Layout::parse(model, &t.to) {
                    layouts.insert(p, l);
                }
            }
        }
        let layouts = layouts.iter().map(|(&p, l)| (p, l)).collect();
        Some(view.types_with(&self.resolved, &layouts))
    }

    pub(super) fn publish(&mut self, view: &View, report: &mut CycleReport) {
        let snap = self.snapshot(view, unix_now());
        let path = self.resolved.config.controller.snapshot_path.clone();
        let result = serde_json::to_vec(&snap)
            .map_err(std::io::Error::other)
            .and_then(|json| {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                smartmig_core::durable::write(&path, &json).map_err(std::io::Error::other)
            });
        if let Err(e) = result {
            self.fail(
                report,
                format!("cannot publish the snapshot {}: {e}", path.display()),
            );
        }
    }
}
