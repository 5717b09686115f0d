//! `smartmig train`: PPO for the mean-field controller against the simulator, with
//! parallel rollouts, checkpoints, a learning curve, and an ONNX policy at the end.
//!
//! Determinism: rollouts depend only on the policy weights and the day's seed, and are
//! collected in seed order; the update's minibatch order comes from a ChaCha8 stream
//! seeded by `--seed` and the iteration. candle's CPU matrix products may split work by
//! thread, so results are reproducible for a given seed *and* `RAYON_NUM_THREADS`.

pub mod ppo;
pub mod rollout;

use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::eval::{EVAL_SEED_BASE, TRAIN_SEED_BASE};
use crate::policy::{onnx_writer, PolicyMetadata};
use crate::scenario::ResolvedScenario;
pub use ppo::{Learner, PpoConfig, UpdateStats};
pub use rollout::{run_episode, Episode, RolloutSpec};

/// A training failure.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The tensor library failed.
    #[error("tensor error: {0}")]
    Tensor(#[from] candle_core::Error),
    /// A rollout's workload could not be built.
    #[error(transparent)]
    Workload(#[from] crate::workload::TraceError),
    /// Reading or writing a checkpoint or output.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Writing the ONNX file failed.
    #[error(transparent)]
    Onnx(#[from] onnx_writer::WriteError),
    /// The scenario cannot be trained on.
    #[error("{0}")]
    Scenario(String),
    /// A bug or broken invariant.
    #[error("internal: {0}")]
    Internal(String),
}

/// What to train.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainConfig {
    /// PPO iterations.
    pub iterations: u32,
    /// Simulated days per iteration.
    pub episodes: u32,
    /// Base seed (training days and minibatch order derive from it).
    pub seed: u64,
    /// Decide every this many arrivals and completions.
    pub every_events: u32,
    /// Top-k of each row.
    pub top_k: usize,
    /// Learner settings.
    pub ppo: PpoConfig,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            iterations: 100,
            episodes: 8,
            seed: 0,
            every_events: 5,
            top_k: 3,
            ppo: PpoConfig::default(),
        }
    }
}

/// One point of the learning curve.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Iteration.
    pub iteration: u32,
    /// Mean ET against static CEDF over the iteration's days.
    pub et: f64,
    /// Mean episode return.
    pub ret: f64,
    /// Mean repartitions per day.
    pub repartitions: f64,
    /// Learner statistics.
    pub stats: UpdateStats,
}

/// Saved progress, for `--resume`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Progress {
    /// Settings the run started with.
    pub config: TrainConfig,
    /// Iterations done.
    pub done: u32,
    /// Learning curve so far.
    pub curve: Vec<CurvePoint>,
    /// Wall-clock seconds spent.
    pub seconds: f64,
}

/// Where training keeps its files: `<out>.ckpt/` beside the ONNX output.
pub fn checkpoint_dir(out: &Path) -> PathBuf {
    let mut p = out.as_os_str().to_owned();
    p.push(".ckpt");
    PathBuf::from(p)
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The seeds of iteration `it`'s days: disjoint across iterations, below the evaluation seeds.
pub fn iteration_seeds(cfg: &TrainConfig, it: u32) -> Vec<u64> {
    (0..cfg.episodes)
        .map(|e| {
            let day = u64::from(it) * u64::from(cfg.episodes) + u64::from(e);
            TRAIN_SEED_BASE
                .saturating_add(cfg.seed.saturating_mul(100_000))
                .saturating_add(day)
        })
        .collect()
}

/// Trains a policy for a single-GPU-model scenario and writes it to `out`.
///
/// `on_iteration` sees each new curve point (progress display). With `resume`, weights
/// and the curve are read from the checkpoint directory and training continues.
pub fn train(
    sc: &ResolvedScenario,
    cfg: TrainConfig,
    out: &Path,
    resume: bool,
    metadata: PolicyMetadata,
    mut on_iteration: impl FnMut(&CurvePoint),
) -> Result<Progress, TrainError> {
    if sc.models.len() != 1 {
        return Err(TrainError::Scenario(format!(
            "training needs a scenario with one GPU model, this one has {}",
            sc.models.len()
        )));
    }
    let last_seed = iteration_seeds(&cfg, cfg.iterations.saturating_sub(1))
        .last()
        .copied()
        .unwrap_or(0);
    if last_seed >= EVAL_SEED_BASE {
        return Err(TrainError::Scenario(format!(
            "training days up to seed {last_seed} would reach the evaluation seeds ({EVAL_SEED_BASE}..): \
             use a smaller --seed, --iterations or --episodes"
        )));
    }
    let k = sc.models[0].configurations.len();
    let dim = crate::sim::features::feature_dim(k);
    let ckpt = checkpoint_dir(out);
    std::fs::create_dir_all(&ckpt).map_err(io_err(&ckpt))?;
    let weights = ckpt.join("weights.safetensors");
    let progress_file = ckpt.join("progress.json");
    let mut learner = Learner::new(dim, k, cfg.ppo.clone())?;
    let mut progress = Progress {
        config: cfg.clone(),
        done: 0,
        curve: Vec::new(),
        seconds: 0.0,
    };
    if resume {
        learner.load(&weights)?;
        let text = std::fs::read_to_string(&progress_file).map_err(io_err(&progress_file))?;
        progress = serde_json::from_str(&text)
            .map_err(|e| TrainError::Scenario(format!("{}: {e}", progress_file.display())))?;
        progress.config.iterations = cfg.iterations;
    }
    let initial = sc
        .scenario
        .baselines
        .static_best
        .clone()
        .unwrap_or_else(|| sc.scenario.baselines.reference_layout.clone());
    let spec = RolloutSpec {
        every_events: cfg.every_events,
        top_k: cfg.top_k,
        initial,
    };
    let started = std::time::Instant::now();
    let already = progress.seconds;
    for it in progress.done..cfg.iterations {
        let net = learner.policy()?;
        let episodes: Vec<Episode> = iteration_seeds(&cfg, it)
            .par_iter()
            .map(|&seed| run_episode(sc, &net, &spec, seed))
            .collect::<Result<_, _>>()?;
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed.wrapping_mul(1_000_003).wrapping_add(u64::from(it)));
        let stats = learner.update(&episodes, &mut rng)?;
        let n = episodes.len().max(1) as f64;
        let point = CurvePoint {
            iteration: it,
            et: episodes.iter().map(|e| e.et).sum::<f64>() / n,
            ret: episodes
                .iter()
                .map(|e| e.rewards.iter().map(|&r| f64::from(r)).sum::<f64>())
                .sum::<f64>()
                / n,
            repartitions: episodes.iter().map(|e| e.repartitions as f64).sum::<f64>() / n,
            stats,
        };
        on_iteration(&point);
        progress.curve.push(point);
        progress.done = it + 1;
        progress.seconds = already + started.elapsed().as_secs_f64();
        if progress.done % 5 == 0 || progress.done == cfg.iterations {
            learner.save(&weights)?;
            let text =
                serde_json::to_string_pretty(&progress).map_err(|e| TrainError::Internal(e.to_string()))?;
            std::fs::write(&progress_file, text).map_err(io_err(&progress_file))?;
        }
    }
    onnx_writer::write(out, &learner.policy()?, &metadata)?;
    Ok(progress)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_days_never_reach_the_evaluation_seeds() {
        let cfg = TrainConfig {
            iterations: 50,
            episodes: 8,
            seed: 3,
            ..TrainConfig::default()
        };
        let first = iteration_seeds(&cfg, 0);
        let last = iteration_seeds(&cfg, 49);
        assert!(first.iter().chain(&last).all(|&s| s < EVAL_SEED_BASE));
        assert!(
            first.iter().all(|s| !last.contains(s)),
            "iterations train on new days"
        );
        let sc = crate::scenario::Scenario::reference(&[]).unwrap();
        let big = TrainConfig { seed: 10, ..cfg };
        let meta = crate::partition::mean_field::scenario_metadata(&sc, 0, 5, 3, 10);
        let out = std::env::temp_dir().join(format!("smartmig-seed-{}.onnx", std::process::id()));
        let err = train(&sc, big, &out, false, meta, |_| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("evaluation seeds"), "{err}");
        assert!(
            !out.exists() && !checkpoint_dir(&out).exists(),
            "refused before writing anything"
        );
    }
}
