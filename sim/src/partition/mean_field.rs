//! The SMART-MIG repartitioner (docs/model.md §6): every N arrivals and completions, read the
//! mean field of each GPU model, run the policy once per model to get a K×K transition
//! matrix, and let every GPU sample its next configuration from its current row.

use rand_chacha::ChaCha8Rng;

use super::{DecisionView, Repartitioner};
use crate::scenario::ResolvedScenario;
use smartmig_policy::contract::DecisionInterval;
use smartmig_policy::{
    Draw, FeatureLayout, PolicyMetadata, PolicyNetwork, PolicyRuntime, SamplingConfig, Semantics,
    TransitionTable,
};

/// Decide after this many arrivals and completions (docs/model.md §6).
pub const DEFAULT_EVERY_EVENTS: u32 = 5;

/// The metadata a policy for GPU model `model` of a scenario must carry: the model, its
/// configurations and the simulator's feature layout; the rest records how it was trained.
pub fn scenario_metadata(
    sc: &ResolvedScenario,
    model: usize,
    every_events: u32,
    top_k: u32,
    seed: u64,
) -> PolicyMetadata {
    let cm = &sc.models[model];
    PolicyMetadata {
        decision: DecisionInterval {
            events: every_events,
            seconds: 0.0,
        },
        top_k,
        training_scenario: sc.scenario.name.clone(),
        training_seed: seed,
        padding: sc.scenario.repartition.index_rule.padded(),
        // Only preempt requeues; a drain policy's validation held every job anyway.
        requeue_max_run_s: sc
            .scenario
            .repartition
            .requeue_max_run_s
            .filter(|_| sc.scenario.repartition.semantics == Semantics::Preempt),
        ..PolicyMetadata::new(
            cm.model.key.clone(),
            cm.configurations.iter().map(|c| c.name.clone()).collect(),
            sc.scenario.repartition.semantics,
            sc.scenario.repartition.requeued,
        )
    }
}

/// Why a policy gave no decision: its network or ONNX Runtime failed, or its logits
/// make no transition table.
#[derive(Debug, thiserror::Error)]
pub enum PolicyFailure {
    /// The in-process network.
    #[error(transparent)]
    Network(#[from] smartmig_policy::NetworkError),
    /// ONNX Runtime.
    #[error(transparent)]
    Runtime(#[from] smartmig_policy::RuntimeError),
    /// The logits.
    #[error(transparent)]
    Table(#[from] smartmig_policy::SamplingError),
}

/// Something that maps a feature vector to K×K transition logits.
pub trait TransitionModel {
    /// Logits `[K, K]` row-major for one feature vector.
    fn logits(&mut self, features: &[f32]) -> Result<Vec<f32>, PolicyFailure>;
}

impl TransitionModel for PolicyNetwork {
    fn logits(&mut self, features: &[f32]) -> Result<Vec<f32>, PolicyFailure> {
        Ok(self.forward(features, 1)?)
    }
}

impl TransitionModel for PolicyRuntime {
    fn logits(&mut self, features: &[f32]) -> Result<Vec<f32>, PolicyFailure> {
        Ok(self.infer(features)?)
    }
}

/// One decision as a learner needs it.
#[derive(Debug, Clone)]
pub struct DecisionRecord {
    /// Simulation time, minutes.
    pub now: f64,
    /// The feature vector the policy saw.
    pub features: Vec<f32>,
    /// `counts[c * K + c']`: GPUs that went from c to c' (staying included).
    pub counts: Vec<u32>,
    /// `mask[c * K + c']`: c' was among the top-k of row c.
    pub mask: Vec<bool>,
    /// Energy drawn before the decision, W·min.
    pub energy_wmin: f64,
    /// Lateness accrued before the decision, job-minutes.
    pub lateness_min: f64,
}

/// The mean-field repartitioner over one or more GPU models.
pub struct MeanField<M: TransitionModel> {
    name: String,
    /// One model per GPU model of the scenario, in its order.
    models: Vec<M>,
    initial: Vec<String>,
    every: u32,
    /// Also decide every this many minutes (0: only on events).
    interval_min: f64,
    sampling: SamplingConfig,
    draw: Draw,
    available: Vec<Vec<bool>>,
    layout: FeatureLayout,
    buf: Vec<f32>,
    /// Decisions, recorded when set (training).
    pub record: Option<Vec<DecisionRecord>>,
    /// A policy failure was logged (once per run: each one keeps the layouts).
    failure_logged: bool,
}

impl<M: TransitionModel> MeanField<M> {
    /// A repartitioner starting from `initial` (configuration names cycled over GPUs),
    /// whose models read features in `layout`.
    pub fn new(
        sc: &ResolvedScenario,
        models: Vec<M>,
        layout: FeatureLayout,
        initial: Vec<String>,
        every: u32,
        sampling: SamplingConfig,
    ) -> MeanField<M> {
        let available = sc
            .models
            .iter()
            .map(|m| m.configurations.iter().map(|c| c.is_available()).collect())
            .collect();
        MeanField {
            name: "smart-mig".into(),
            models,
            initial,
            every: every.max(1),
            interval_min: 0.0,
            sampling,
            draw: Draw::Sample,
            available,
            layout,
            buf: Vec::new(),
            record: None,
            failure_logged: false,
        }
    }

    /// Draws next configurations as the policy file says.
    pub fn with_draw(mut self, draw: Draw) -> Self {
        self.draw = draw;
        self
    }

    /// Decides also every `seconds` of simulated time (0: only every N events).
    pub fn with_interval(mut self, seconds: f64) -> Self {
        self.interval_min = (seconds / 60.0).max(0.0);
        self
    }
}

impl<M: TransitionModel> Repartitioner for MeanField<M> {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn initial_layout(&mut self, sc: &ResolvedScenario) -> Vec<u16> {
        sc.layout_configs(&self.initial)
    }
    fn every_events(&self) -> Option<u32> {
        Some(self.every)
    }
    fn next_wakeup(&self, now: f64) -> Option<f64> {
        (self.interval_min > 0.0).then_some(now + self.interval_min)
    }
    fn feature_layout(&self) -> Option<FeatureLayout> {
        Some(self.layout.clone())
    }
    fn decide(&mut self, view: &DecisionView<'_>, rng: &mut ChaCha8Rng) -> Vec<(u32, u16)> {
        let mut changes = Vec::new();
        for m in 0..self.models.len() {
            self.buf.clear();
            if !view.write_features(m, &mut self.buf) {
                return changes;
            }
            let table = self.models[m]
                .logits(&self.buf)
                .and_then(|l| Ok(TransitionTable::new(&l, &self.available[m], self.sampling)?));
            let table = match table {
                Ok(t) => t,
                Err(e) => {
                    // The GPUs keep their layout: a failing policy must not move hardware.
                    if !self.failure_logged {
                        log::error!("mean-field policy failed, keeping layouts: {e}");
                    }
                    self.failure_logged = true;
                    continue;
                }
            };
            let k = table.k();
            let mut counts = self.record.as_ref().map(|_| vec![0u32; k * k]);
            let gpus: Vec<usize> = (0..view.cluster.gpus.len())
                .filter(|&g| usize::from(view.cluster.gpus[g].model) == m)
                .collect();
            let current: Vec<u16> = gpus
                .iter()
                .map(|&g| {
                    let gpu = &view.cluster.gpus[g];
                    gpu.target.unwrap_or(gpu.config)
                })
                .collect();
            let drawn = match self.draw {
                Draw::Sample => current
                    .iter()
                    .map(|&c| table.sample(usize::from(c), rng).unwrap_or(c))
                    .collect(),
                Draw::Apportion => {
                    // The least busy GPUs move first: they switch soonest and lose least.
                    let mut order: Vec<usize> = (0..gpus.len()).collect();
                    order.sort_by_key(|&i| (view.cluster.gpus[gpus[i]].busy, i));
                    table
                        .apportion(&current, &order)
                        .unwrap_or_else(|_| current.clone())
                }
            };
            for ((&g, &current), next) in gpus.iter().zip(&current).zip(drawn) {
                if let Some(c) = counts.as_mut() {
                    c[usize::from(current) * k + usize::from(next)] += 1;
                }
                if next != current {
                    changes.push((g as u32, next));
                }
            }
            if let (Some(rec), Some(counts)) = (self.record.as_mut(), counts) {
                let mut mask = vec![false; k * k];
                for c in 0..k {
                    if let Ok(row) = table.row(c) {
                        for &(n, _) in &row.candidates {
                            mask[c * k + usize::from(n)] = true;
                        }
                    }
                }
                rec.push(DecisionRecord {
                    now: view.now,
                    features: self.buf.clone(),
                    counts,
                    mask,
                    energy_wmin: view.energy_wmin,
                    lateness_min: view.lateness_min,
                });
            }
        }
        changes
    }
}
