//! What the simulator asks a repartition policy, and what the policy sees when it
//! decides: the interface `partition`'s policies implement (the engine depends on it, not
//! on them).

use rand_chacha::ChaCha8Rng;

use crate::cluster::Cluster;
use crate::features::FeatureTracker;
use crate::scenario::ResolvedScenario;

/// Minutes in a day.
pub const DAY_MIN: f64 = 1440.0;

/// What a policy sees when it decides.
pub struct DecisionView<'a> {
    /// Simulation time, minutes.
    pub now: f64,
    /// The cluster: configurations, busy slices, pending drains.
    pub cluster: &'a Cluster,
    /// Queue statistics, when the policy asked for them.
    pub features: Option<&'a FeatureTracker>,
    /// Busy compute slices per GPU model.
    pub busy_by_model: &'a [u32],
    /// Energy drawn so far, W·min.
    pub energy_wmin: f64,
    /// Lateness accrued so far, job-minutes (with features: as it accrues; otherwise
    /// only that of completed jobs).
    pub lateness_min: f64,
    /// GPUs to a node.
    pub gpus_per_node: u32,
    /// The scenario (its models' configurations).
    pub scenario: &'a ResolvedScenario,
}

impl DecisionView<'_> {
    /// Each GPU's configuration once pending changes are done (its target, else its own).
    pub fn targets(&self) -> Vec<u16> {
        self.cluster
            .gpus
            .iter()
            .map(|g| g.target.unwrap_or(g.config))
            .collect()
    }

    /// Busy instances that moving GPU `g` to configuration `c` would destroy.
    pub fn busy_destroyed(&self, g: u32, c: u16) -> u32 {
        let model = self.cluster.gpus[g as usize].model as usize;
        let target = &self.scenario.models[model].configurations[usize::from(c)].layout;
        self.cluster.busy_destroyed(g, target)
    }

    /// Appends the mean-field features of GPU model `model` (see [`crate::features`]);
    /// false when the policy did not ask for features.
    pub fn write_features(&self, model: usize, out: &mut Vec<f32>) -> bool {
        match self.features {
            Some(f) => {
                let counts = &self.cluster.config_counts[model];
                f.write(
                    self.now,
                    counts,
                    self.busy_by_model[model],
                    self.cluster.gpus.len(),
                    out,
                );
                true
            }
            None => false,
        }
    }
}

/// A repartition policy the simulator consults.
pub trait Repartitioner {
    /// Name in reports.
    fn name(&self) -> String;
    /// Configuration index of every GPU at time 0.
    fn initial_layout(&mut self, sc: &ResolvedScenario) -> Vec<u16>;
    /// The next time (minutes) after `now` the policy wants to decide, if any.
    fn next_wakeup(&self, _now: f64) -> Option<f64> {
        None
    }
    /// Decide also after this many arrivals and completions.
    fn every_events(&self) -> Option<u32> {
        None
    }
    /// The features the simulator should maintain for this policy (with accrued lateness).
    fn feature_layout(&self) -> Option<smartmig_policy::FeatureLayout> {
        None
    }
    /// Target configurations for GPUs that should change: `(gpu, configuration)`.
    fn decide(&mut self, view: &DecisionView<'_>, rng: &mut ChaCha8Rng) -> Vec<(u32, u16)>;
}
