//! A feedback controller over a ladder of node layouts, lightest (fewest GPU instances)
//! first: the block of the day picks a base rung, the queue moves it up (more, smaller
//! instances) when jobs wait and down (whole GPUs) when none do. It is the teacher the
//! learned mean-field policy imitates (`smartmig_train::imitation`).

use rand_chacha::ChaCha8Rng;

use super::{DecisionView, Repartitioner, DAY_MIN};
use crate::scenario::ResolvedScenario;
use smartmig_policy::FeatureLayout;

/// The controller's parameters.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LadderParams {
    /// Node layouts (configuration index per GPU of one node), lightest first.
    pub rungs: Vec<Vec<u16>>,
    /// Base rung of each equal block of the day.
    pub base: Vec<usize>,
    /// Waiting jobs per GPU above which the controller climbs `step` rungs.
    #[serde(deserialize_with = "null_is_never_above")]
    pub up: f64,
    /// Waiting jobs per GPU below which it descends `step` rungs.
    #[serde(deserialize_with = "null_is_never_below")]
    pub down: f64,
    /// Rungs to climb or descend.
    pub step: usize,
}

/// JSON writes an infinite threshold as null: it reads back as one never crossed.
fn null_is_never_above<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(<Option<f64> as serde::Deserialize>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// As [`null_is_never_above`], for the threshold below which the controller descends.
fn null_is_never_below<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(<Option<f64> as serde::Deserialize>::deserialize(d)?.unwrap_or(f64::NEG_INFINITY))
}

impl LadderParams {
    /// The rung the controller wants at minute `now` with `waiting` jobs per GPU.
    pub fn rung(&self, now: f64, waiting: f64) -> usize {
        let blocks = self.base.len().max(1);
        let block = ((now.rem_euclid(DAY_MIN) / DAY_MIN * blocks as f64) as usize).min(blocks - 1);
        let base = self.base.get(block).copied().unwrap_or(0);
        let top = self.rungs.len().saturating_sub(1);
        if waiting > self.up {
            (base + self.step).min(top)
        } else if waiting < self.down {
            base.saturating_sub(self.step)
        } else {
            base.min(top)
        }
    }
}

/// The controller as a repartition policy.
pub struct Ladder {
    params: LadderParams,
    layout: FeatureLayout,
    every: u32,
    buf: Vec<f32>,
    /// The feature vectors of its decisions, recorded when set (imitation).
    pub record: Option<Vec<Vec<f32>>>,
}

impl Ladder {
    /// A controller deciding every `every` arrivals and completions.
    pub fn new(params: LadderParams, k: usize, every: u32) -> Ladder {
        Ladder {
            params,
            layout: crate::features::layout(k),
            every: every.max(1),
            buf: Vec::new(),
            record: None,
        }
    }
}

/// Target configuration per GPU that reaches `pattern` (cycled over each node of
/// `per_node` GPUs) while keeping every GPU whose configuration the node still needs.
pub fn assign(current: &[u16], pattern: &[u16], per_node: usize) -> Vec<u16> {
    let mut out = current.to_vec();
    for (node, gpus) in current.chunks(per_node.max(1)).enumerate() {
        let mut want: Vec<u16> = (0..gpus.len()).map(|i| pattern[i % pattern.len()]).collect();
        let mut free = Vec::new();
        for (i, &c) in gpus.iter().enumerate() {
            match want.iter().position(|&w| w == c) {
                Some(p) => {
                    want.swap_remove(p);
                }
                None => free.push(i),
            }
        }
        want.sort_unstable();
        for (i, c) in free.into_iter().zip(want) {
            out[node * per_node + i] = c;
        }
    }
    out
}

/// The changes that take every node from the GPUs' targets to `pattern` with the fewest
/// moves ([`assign`]).
pub fn propose(view: &DecisionView<'_>, pattern: &[u16]) -> Vec<(u32, u16)> {
    let current = view.targets();
    assign(&current, pattern, pattern.len())
        .into_iter()
        .enumerate()
        .filter(|&(g, c)| c != current[g])
        .map(|(g, c)| (g as u32, c))
        .collect()
}

impl LadderParams {
    /// Every GPU's configuration at the start of the day: the rung of minute 0 with
    /// nothing waiting, on each node.
    pub fn initial_layout(&self, gpus: usize) -> Vec<u16> {
        let pattern = &self.rungs[self.rung(0.0, 0.0)];
        (0..gpus).map(|g| pattern[g % pattern.len()]).collect()
    }
}

impl Repartitioner for Ladder {
    fn name(&self) -> String {
        "ladder".into()
    }
    fn initial_layout(&mut self, sc: &ResolvedScenario) -> Vec<u16> {
        self.params.initial_layout(sc.gpus.len())
    }
    fn every_events(&self) -> Option<u32> {
        Some(self.every)
    }
    fn feature_layout(&self) -> Option<FeatureLayout> {
        Some(self.layout.clone())
    }
    fn decide(&mut self, view: &DecisionView<'_>, _: &mut ChaCha8Rng) -> Vec<(u32, u16)> {
        self.buf.clear();
        if !view.write_features(0, &mut self.buf) {
            return Vec::new();
        }
        if let Some(r) = self.record.as_mut() {
            r.push(self.buf.clone());
        }
        let waiting = f64::from(self.buf[self.layout.queue_summary_offset()]);
        propose(view, &self.params.rungs[self.params.rung(view.now, waiting)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignment_keeps_every_gpu_the_node_still_needs() {
        // Node of 4: c2 c2 c6 c6 -> pattern c2 c6 c6 c6: one c2 moves, nothing else.
        assert_eq!(assign(&[1, 1, 5, 5], &[1, 5, 5, 5], 4), vec![1, 5, 5, 5]);
        // Two nodes, each reaches the pattern on its own.
        assert_eq!(assign(&[0, 0, 1, 1], &[0, 1], 2), vec![0, 1, 1, 0]);
    }

    #[test]
    fn thresholds_that_are_never_crossed_survive_a_json_report() {
        let p = LadderParams {
            rungs: vec![vec![0], vec![1]],
            base: vec![1, 0],
            up: f64::INFINITY,
            down: f64::NEG_INFINITY,
            step: 1,
        };
        let text = serde_json::to_string(&p).unwrap();
        assert!(text.contains("\"up\":null"), "{text}");
        let back: LadderParams = serde_json::from_str(&text).unwrap();
        assert_eq!(back, p);
        let finite = LadderParams {
            up: 0.75,
            down: 0.05,
            ..p
        };
        let back: LadderParams = serde_json::from_str(&serde_json::to_string(&finite).unwrap()).unwrap();
        assert_eq!(back, finite);
    }

    #[test]
    fn the_queue_moves_the_rung_around_the_blocks_base() {
        let p = LadderParams {
            rungs: vec![vec![0], vec![1], vec![5]],
            base: vec![0, 1],
            up: 1.0,
            down: 0.2,
            step: 1,
        };
        assert_eq!(p.rung(100.0, 0.5), 0);
        assert_eq!(p.rung(100.0, 2.0), 1);
        assert_eq!(p.rung(800.0, 2.0), 2);
        assert_eq!(p.rung(800.0, 0.0), 0);
        assert_eq!(p.rung(800.0 + DAY_MIN, 0.5), 1, "daily");
    }
}
