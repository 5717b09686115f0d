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
        view.cluster
            .gpus
            .iter()
            .enumerate()
            .filter(|(i, g)| g.target.unwrap_or(g.config) != want[*i])
            .map(|(i, _)| (i as u32, want[i]))
            .collect()
    }
}
pub mod ladder;
pub mod mean_field;
