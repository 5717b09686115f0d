//! Repartition policies: which configuration each GPU should be in, and when to ask.

use rand_chacha::ChaCha8Rng;

pub use crate::decision::{DecisionView, Repartitioner, DAY_MIN};
use crate::scenario::{PeriodicSpec, ResolvedScenario};

/// A fixed layout: configuration names cycled over the GPUs.
pub struct Static {
    name: String,
    layout: Vec<String>,
}

impl Static {
    /// Every GPU whole (c1): no partitioning.
    pub fn none() -> Static {
        Static {
            name: "none".into(),
            layout: vec![crate::scenario::WHOLE_GPU.into()],
        }
    }

    /// A named static layout.
    pub fn new(name: impl Into<String>, layout: Vec<String>) -> Static {
        Static {
            name: name.into(),
            layout,
        }
    }
}

impl Repartitioner for Static {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn initial_layout(&mut self, sc: &ResolvedScenario) -> Vec<u16> {
        sc.layout_configs(&self.layout)
    }
    fn decide(&mut self, _: &DecisionView<'_>, _: &mut ChaCha8Rng) -> Vec<(u32, u16)> {
        Vec::new()
    }
}

/// Layouts by time of day, repeating daily. Like smartmigd's periodic policy it states
/// the schedule's layout at every decision (every `repartition.decision_interval_s`), so
/// the re-layout limits (persistence, minimum interval) apply to it as to any policy.
pub struct Periodic {
    name: String,
    /// (minute of day, configuration per GPU), sorted by minute.
    entries: Vec<(f64, Vec<u16>)>,
    /// Minutes between decisions.
    every_min: f64,
}

impl Periodic {
    /// From a schedule; times were checked when the scenario was resolved.
    pub fn new(sc: &ResolvedScenario, spec: &[PeriodicSpec]) -> Periodic {
        Periodic::named("periodic", sc, spec)
    }

    /// A named schedule (`periodic-best`).
    pub fn named(name: &str, sc: &ResolvedScenario, spec: &[PeriodicSpec]) -> Periodic {
        let entries = spec
            .iter()
            .map(|p| {
                let minute = smartmig_core::config::parse_time_of_day(&p.at).unwrap_or(0);
                (f64::from(minute), sc.layout_configs(&p.layout))
            })
            .collect();
        Periodic {
            name: name.to_string(),
            entries,
            every_min: sc.scenario.repartition.decision_interval_s / 60.0,
        }
    }

    fn entry_at(&self, t: f64) -> &[u16] {
        let tod = t.rem_euclid(DAY_MIN);
        let i = self
            .entries
            .iter()
            .rposition(|(m, _)| *m <= tod)
            .unwrap_or(self.entries.len() - 1);
        &self.entries[i].1
    }
}

impl Repartitioner for Periodic {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn initial_layout(&mut self, _: &ResolvedScenario) -> Vec<u16> {
        self.entry_at(0.0).to_vec()
    }
    fn next_wakeup(&self, now: f64) -> Option<f64> {
        let day = (now / DAY_MIN).floor() * DAY_MIN;
        let boundary = (0..2)
            .flat_map(|d| {
                self.entries
                    .iter()
                    .map(move |(m, _)| day + f64::from(d) * DAY_MIN + m)
            })
            .find(|&t| t > now);
        // Decide on every cycle, and exactly at each boundary.
        let cycle = (self.every_min > 0.0).then_some(now + self.every_min);
        match (boundary, cycle) {
            (Some(b), Some(c)) => Some(b.min(c)),
            (b, c) => b.or(c),
        }
    }
    fn decide(&mut self, view: &DecisionView<'_>, _: &mut ChaCha8Rng) -> Vec<(u32, u16)> {
        let want = self.entry_at(view.now);
        let current = view.targets();
        let per_node = view.gpus_per_node as usize;
        let model_of = |g: usize| usize::from(view.cluster.gpus[g].model);
        let next = assign_idle_first(&current, want, per_node, model_of, |g, t| {
            view.busy_destroyed(g as u32, t)
        });
        next.into_iter()
            .enumerate()
            .filter(|&(g, c)| c != current[g])
            .map(|(g, c)| (g as u32, c))
            .collect()
    }
}

/// Targets that give each node of `per_node` GPUs the configurations `want` holds for its
/// GPUs, as a mix per GPU model ([`smartmig_core::mig::assign_mix`]: the GPUs whose move
/// stops the fewest jobs move). `model_of(g)` is GPU g's model (configurations are the
/// model's own); `cost(g, t)` is what moving GPU g to configuration t stops.
pub fn assign_idle_first(
    current: &[u16],
    want: &[u16],
    per_node: usize,
    model_of: impl Fn(usize) -> usize,
    cost: impl Fn(usize, u16) -> u32,
) -> Vec<u16> {
    let per_node = per_node.max(1);
    let mut next = current.to_vec();
    for first in (0..current.len()).step_by(per_node) {
        let node: Vec<usize> = (first..(first + per_node).min(current.len())).collect();
        let mut models: Vec<usize> = node.iter().map(|&g| model_of(g)).collect();
        models.sort_unstable();
        models.dedup();
        for m in models {
            let gpus: Vec<usize> = node.iter().copied().filter(|&g| model_of(g) == m).collect();
            let now: Vec<u16> = gpus.iter().map(|&g| current[g]).collect();
            let mix: Vec<u16> = gpus.iter().map(|&g| want[g % want.len()]).collect();
            let moved = smartmig_core::mig::assign_mix(&now, &mix, |i, c| cost(gpus[i], c));
            for (&g, c) in gpus.iter().zip(moved) {
                next[g] = c;
            }
        }
    }
    next
}
pub mod ladder;
pub mod mean_field;

#[cfg(test)]
mod tests {
    use super::assign_idle_first;

    #[test]
    fn each_node_reaches_the_mix_on_its_own() {
        // Two nodes of two: each should hold c1 + c2 (0, 1); node 0 already does.
        let one = |_: usize| 0;
        assert_eq!(
            assign_idle_first(&[0, 1, 1, 1], &[1, 0], 2, one, |_, _| 0),
            vec![0, 1, 1, 0]
        );
        // On node 1 GPU 2 would stop a job: GPU 3 moves.
        let busy2 = |g: usize, _: u16| u32::from(g == 2);
        assert_eq!(
            assign_idle_first(&[0, 1, 1, 1], &[1, 0], 2, one, busy2),
            vec![0, 1, 1, 0]
        );
        let busy3 = |g: usize, _: u16| u32::from(g == 3);
        assert_eq!(
            assign_idle_first(&[0, 1, 1, 1], &[1, 0], 2, one, busy3),
            vec![0, 1, 0, 1]
        );
    }

    #[test]
    fn a_node_of_two_models_reaches_each_models_mix_apart() {
        // GPUs 0, 1 of model 0 and 2, 3 of model 1 on one node; each model's configuration
        // numbers are its own: model 1's GPUs never take model 0's entries.
        let model_of = |g: usize| usize::from(g >= 2);
        let next = assign_idle_first(&[4, 3, 0, 0], &[3, 4, 1, 0], 4, model_of, |_, _| 0);
        assert_eq!(next, vec![4, 3, 0, 1]);
    }
}
