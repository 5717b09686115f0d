//! The limits smartmigd puts on re-layouts (`[controller.central]` in smartmig.toml), as
//! the simulator applies them to every policy: a GPU's new configuration must be chosen in
//! `persist_cycles` consecutive decisions, batches are at least `min_relayout_interval_s`
//! apart cluster-wide, one batch changes at most `max_nodes_per_batch` nodes, and a new
//! batch waits until the previous one has switched.

use crate::scenario::RepartitionSpec;

/// Proposals waiting for persistence and the time of the last batch.
#[derive(Debug, Clone)]
pub struct Gate {
    persist: u32,
    min_interval_min: f64,
    max_nodes: usize,
    gpus_per_node: u32,
    /// Per GPU: the configuration proposed in the last decision and for how many
    /// consecutive decisions.
    proposals: Vec<Option<(u16, u32)>>,
    /// GPUs with a proposal.
    active: Vec<u32>,
    /// Per GPU: the decision that last proposed it.
    seen: Vec<u32>,
    round: u32,
    last_batch: f64,
}

impl Gate {
    /// A gate for `gpus` GPUs, `gpus_per_node` to a node, under `spec`'s limits.
    pub fn new(spec: &RepartitionSpec, gpus_per_node: u32, gpus: usize) -> Gate {
        Gate {
            persist: spec.persist_cycles.max(1),
            min_interval_min: spec.min_relayout_interval_s / 60.0,
            max_nodes: spec.max_nodes_per_batch.max(1) as usize,
            gpus_per_node: gpus_per_node.max(1),
            proposals: vec![None; gpus],
            active: Vec::new(),
            seen: vec![0; gpus],
            round: 0,
            last_batch: f64::NEG_INFINITY,
        }
    }

    /// The node GPU `g` sits on.
    pub fn node_of(&self, g: u32) -> u32 {
        g / self.gpus_per_node
    }

    /// GPUs per node.
    pub fn gpus_per_node(&self) -> u32 {
        self.gpus_per_node
    }

    /// Records one decision at `now`: `changes` are the policy's (GPU, configuration)
    /// proposals; `free(g)` is GPU g's configuration when it may be proposed a change
    /// (None while it is part of a batch that has not switched yet). Returns the batch to
    /// start now, in GPU order: empty unless `idle` (no batch in progress) and the
    /// minimum interval since the last batch has passed.
    pub fn offer(
        &mut self,
        now: f64,
        changes: &[(u32, u16)],
        free: impl Fn(u32) -> Option<u16>,
        idle: bool,
    ) -> Vec<(u32, u16)> {
        self.round = self.round.wrapping_add(1);
        let round = self.round;
        let mut active = Vec::with_capacity(changes.len());
        for &(g, c) in changes {
            let gi = g as usize;
            if self.seen[gi] == round || free(g).is_none_or(|cur| cur == c) {
                continue;
            }
            let streak = match self.proposals[gi] {
                Some((t, s)) if t == c => s + 1,
                _ => 1,
            };
            self.proposals[gi] = Some((c, streak));
            self.seen[gi] = round;
            active.push(g);
        }
        // A GPU not proposed again loses its streak.
        for &g in &self.active {
            if self.seen[g as usize] != round {
                self.proposals[g as usize] = None;
            }
        }
        active.sort_unstable();
        self.active = active;
        if !idle || now - self.last_batch < self.min_interval_min {
            return Vec::new();
        }
        let mut nodes: Vec<u32> = Vec::new();
        let mut batch = Vec::new();
        let mut kept = Vec::with_capacity(self.active.len());
        for &g in &self.active {
            let Some((c, streak)) = self.proposals[g as usize] else {
                continue;
            };
            let node = self.node_of(g);
            let room = nodes.len() < self.max_nodes || nodes.last() == Some(&node);
            if streak >= self.persist && room {
                if nodes.last() != Some(&node) {
                    nodes.push(node);
                }
                self.proposals[g as usize] = None;
                batch.push((g, c));
            } else {
                kept.push(g);
            }
        }
        self.active = kept;
        if !batch.is_empty() {
            self.last_batch = now;
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(persist: u32, interval_s: f64, max_nodes: u32, per_node: u32, gpus: usize) -> Gate {
        let spec = RepartitionSpec {
            persist_cycles: persist,
            min_relayout_interval_s: interval_s,
            max_nodes_per_batch: max_nodes,
            ..RepartitionSpec::default()
        };
        Gate::new(&spec, per_node, gpus)
    }

    #[test]
    fn a_move_is_acted_on_only_after_it_persists_for_the_set_number_of_decisions() {
        let mut g = gate(2, 0.0, 8, 8, 2);
        let free = |_: u32| Some(0u16);
        assert!(g.offer(0.0, &[(0, 3)], free, true).is_empty(), "first sight");
        assert_eq!(g.offer(1.0, &[(0, 3)], free, true), vec![(0, 3)]);
        // A different target restarts the streak, and so does a decision without it.
        assert!(g.offer(2.0, &[(1, 3)], free, true).is_empty());
        assert!(g.offer(3.0, &[(1, 4)], free, true).is_empty());
        assert!(g.offer(4.0, &[], free, true).is_empty());
        assert!(g.offer(5.0, &[(1, 4)], free, true).is_empty());
        assert_eq!(g.offer(6.0, &[(1, 4)], free, true), vec![(1, 4)]);
    }

    #[test]
    fn batches_keep_the_minimum_interval_and_wait_for_the_previous_one() {
        let mut g = gate(1, 900.0, 8, 8, 2);
        let free = |_: u32| Some(0u16);
        assert_eq!(g.offer(100.0, &[(0, 1)], free, true), vec![(0, 1)]);
        // 10 minutes later: too soon, though the proposal persists.
        assert!(g.offer(110.0, &[(1, 2)], free, true).is_empty());
        assert!(g.offer(114.9, &[(1, 2)], free, true).is_empty());
        // 15 minutes on, but a batch is still switching.
        assert!(g.offer(115.0, &[(1, 2)], free, false).is_empty());
        assert_eq!(g.offer(115.5, &[(1, 2)], free, true), vec![(1, 2)]);
    }

    #[test]
    fn a_batch_takes_at_most_the_allowed_nodes_and_skips_gpus_already_moving() {
        let mut g = gate(1, 0.0, 2, 2, 8);
        let free = |gpu: u32| (gpu != 1).then_some(0u16);
        let all: Vec<(u32, u16)> = (0..8).map(|i| (i, 5)).collect();
        // GPU 1 is still switching: not proposed. Nodes 0 and 1 (GPUs 0, 2, 3) go first.
        assert_eq!(g.offer(0.0, &all, free, true), vec![(0, 5), (2, 5), (3, 5)]);
        // The rest stay proposed and go in the next batch.
        assert_eq!(
            g.offer(1.0, &all[4..], free, true),
            vec![(4, 5), (5, 5), (6, 5), (7, 5)]
        );
        assert_eq!(g.node_of(7), 3);
    }
}
