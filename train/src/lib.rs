//! `smartmig train`: PPO for the mean-field controller against the simulator, with
//! parallel rollouts, checkpoints, a learning curve, and an ONNX policy at the end.
//!
//! Model selection: every `validate_every` iterations (and before the first), the policy
//! runs on `validation_days` days of their own seeds (`VALIDATION_SEED_BASE..`, never
//! trained or evaluated on); the ONNX file holds the weights with the best validation ET,
//! which may be the untrained start (it keeps the starting layout almost always).
//!
//! Determinism: weights are initialised from `--seed`; rollouts depend only on the policy weights and the day's seed, and are
//! collected in seed order; the update's minibatch order comes from a ChaCha8 stream
//! seeded by `--seed` and the iteration. candle's CPU matrix products may split work by
//! thread, so results are reproducible for a given seed *and* `RAYON_NUM_THREADS`.

pub mod imitation;
pub mod lookahead;
pub mod ppo;
pub mod rollout;

use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

pub use ppo::{Learner, PpoConfig, UpdateStats};
pub use rollout::{run_episode, Episode, RolloutSpec};
use smartmig_eval::{TRAIN_SEED_BASE, VALIDATION_SEED_BASE};
use smartmig_policy::{onnx_writer, PolicyMetadata, PolicyNetwork};
use smartmig_sim::scenario::ResolvedScenario;

/// A training failure.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The tensor library failed.
    #[error("tensor error: {0}")]
    Tensor(#[from] candle_core::Error),
    /// A rollout's workload could not be built.
    #[error(transparent)]
    Workload(#[from] smartmig_sim::workload::TraceError),
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
    /// `--resume` would continue a checkpoint under other settings or another scenario.
    #[error("--resume: {0}")]
    Resume(String),
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
    /// Validate every this many iterations.
    #[serde(default = "default_validate_every")]
    pub validate_every: u32,
    /// Days per validation.
    #[serde(default = "default_validation_days")]
    pub validation_days: u32,
}

fn default_validate_every() -> u32 {
    5
}

fn default_validation_days() -> u32 {
    16
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
            validate_every: default_validate_every(),
            validation_days: default_validation_days(),
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
    /// Mean ET on the validation days, when validated after this iteration.
    #[serde(default)]
    pub validation_et: Option<f64>,
    /// Mean ET of the validation days with the starting layout kept.
    #[serde(default)]
    pub validation_start_et: Option<f64>,
}

/// The weights kept for the ONNX file.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Best {
    /// Iterations trained when they were validated (0: the untrained start).
    pub after_iterations: u32,
    /// Their mean validation ET.
    pub validation_et: f64,
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
    /// Best validated weights so far.
    #[serde(default)]
    pub best: Option<Best>,
    /// The scenario trained on (after `--set`), so `--resume` can refuse another one;
    /// absent in checkpoints written before it was recorded.
    #[serde(default)]
    pub scenario: Option<serde_json::Value>,
}

/// The dotted paths at which two JSON values differ (at most `limit` of them).
fn differences(a: &serde_json::Value, b: &serde_json::Value, limit: usize) -> Vec<String> {
    fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>, limit: usize) {
        use serde_json::Value::Object;
        if out.len() >= limit || a == b {
            return;
        }
        if let (Object(x), Object(y)) = (a, b) {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            let null = serde_json::Value::Null;
            for key in keys {
                let sub = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                walk(
                    &sub,
                    x.get(key).unwrap_or(&null),
                    y.get(key).unwrap_or(&null),
                    out,
                    limit,
                );
            }
        } else {
            out.push(format!(
                "{} ({a} in the checkpoint, {b} now)",
                if path.is_empty() { "(all)" } else { path }
            ));
        }
    }
    let mut out = Vec::new();
    walk("", a, b, &mut out, limit);
    out
}

/// Refuses to continue a checkpoint under other settings or another scenario: its weights
/// and curve would then describe neither run. Only `iterations` may change.
fn check_resume(
    ckpt: &Path,
    saved: &Progress,
    cfg: &TrainConfig,
    scenario: &serde_json::Value,
) -> Result<(), TrainError> {
    let json = |c: &TrainConfig| {
        let mut v = serde_json::to_value(c).map_err(|e| TrainError::Internal(e.to_string()))?;
        if let Some(o) = v.as_object_mut() {
            o.remove("iterations");
        }
        Ok::<_, TrainError>(v)
    };
    let settings = differences(&json(&saved.config)?, &json(cfg)?, 4);
    let refuse = |what: &str, diffs: Vec<String>| {
        TrainError::Resume(format!(
            "{}: the checkpoint was trained with other {what}: {}; resume with the same ones \
             (only --iterations may change), or train afresh into another --out",
            ckpt.display(),
            diffs.join(", ")
        ))
    };
    if !settings.is_empty() {
        return Err(refuse("settings", settings));
    }
    match &saved.scenario {
        Some(saved) => {
            let diffs = differences(saved, scenario, 4);
            if !diffs.is_empty() {
                return Err(refuse("scenario values", diffs));
            }
        }
        None => log::warn!(
            "{}: the checkpoint does not record its scenario (written by an older release); \
             resuming on the one given now",
            ckpt.display()
        ),
    }
    Ok(())
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
    if last_seed >= VALIDATION_SEED_BASE {
        return Err(TrainError::Scenario(format!(
            "training days up to seed {last_seed} would reach the validation and evaluation seeds \
             ({VALIDATION_SEED_BASE}..): use a smaller --seed, --iterations or --episodes"
        )));
    }
    let k = sc.models[0].configurations.len();
    let dim = smartmig_sim::features::feature_dim(k);
    let ckpt = checkpoint_dir(out);
    std::fs::create_dir_all(&ckpt).map_err(io_err(&ckpt))?;
    let weights = ckpt.join("weights.safetensors");
    let best_weights = ckpt.join("best.safetensors");
    let progress_file = ckpt.join("progress.json");
    let scenario = serde_json::to_value(&sc.scenario).map_err(|e| TrainError::Internal(e.to_string()))?;
    let mut learner = Learner::new(dim, k, cfg.ppo.clone(), cfg.seed)?;
    let mut progress = Progress {
        config: cfg.clone(),
        done: 0,
        curve: Vec::new(),
        seconds: 0.0,
        best: None,
        scenario: Some(scenario.clone()),
    };
    if resume {
        let text = std::fs::read_to_string(&progress_file).map_err(io_err(&progress_file))?;
        let saved: Progress = serde_json::from_str(&text)
            .map_err(|e| TrainError::Resume(format!("{}: {e}", progress_file.display())))?;
        check_resume(&ckpt, &saved, &cfg, &scenario)?;
        learner.load(&weights)?;
        progress = Progress {
            config: cfg.clone(),
            scenario: Some(scenario.clone()),
            ..saved
        };
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
    let validation_seeds: Vec<u64> = (0..u64::from(cfg.validation_days))
        .map(|d| VALIDATION_SEED_BASE + d)
        .collect();
    // Mean (policy ET, kept-start ET) over the validation days.
    let validate = |net: &PolicyNetwork| -> Result<(f64, f64), TrainError> {
        let ets: Vec<(f64, f64)> = validation_seeds
            .par_iter()
            .map(|&seed| run_episode(sc, net, &spec, seed).map(|e| (e.et, e.start_et)))
            .collect::<Result<_, _>>()?;
        let n = ets.len().max(1) as f64;
        Ok((
            ets.iter().map(|e| e.0).sum::<f64>() / n,
            ets.iter().map(|e| e.1).sum::<f64>() / n,
        ))
    };
    let save = |learner: &Learner, progress: &Progress| -> Result<(), TrainError> {
        learner.save(&weights)?;
        let text = serde_json::to_string_pretty(progress).map_err(|e| TrainError::Internal(e.to_string()))?;
        std::fs::write(&progress_file, text).map_err(io_err(&progress_file))
    };
    if progress.best.is_none() && !validation_seeds.is_empty() {
        progress.best = Some(Best {
            after_iterations: progress.done,
            validation_et: validate(&learner.policy()?)?.0,
        });
        learner.save(&best_weights)?;
    }
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
        progress.done = it + 1;
        let validation_et = if cfg.validate_every > 0
            && !validation_seeds.is_empty()
            && (progress.done % cfg.validate_every == 0 || progress.done == cfg.iterations)
        {
            let (et, start_et) = validate(&learner.policy()?)?;
            if progress.best.is_none_or(|b| et < b.validation_et) {
                progress.best = Some(Best {
                    after_iterations: progress.done,
                    validation_et: et,
                });
                learner.save(&best_weights)?;
            }
            Some((et, start_et))
        } else {
            None
        };
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
            validation_et: validation_et.map(|v| v.0),
            validation_start_et: validation_et.map(|v| v.1),
        };
        on_iteration(&point);
        progress.curve.push(point);
        progress.seconds = already + started.elapsed().as_secs_f64();
        if progress.done % 5 == 0 || progress.done == cfg.iterations {
            save(&learner, &progress)?;
        }
    }
    save(&learner, &progress)?;
    // The file ships the best validated weights, not merely the last ones.
    let mut chosen = Learner::new(dim, k, cfg.ppo.clone(), cfg.seed)?;
    if progress.best.is_some() {
        chosen.load(&best_weights)?;
    } else {
        chosen = learner;
    }
    onnx_writer::write(out, &chosen.policy()?, &metadata)?;
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
        assert!(first.iter().chain(&last).all(|&s| s < VALIDATION_SEED_BASE));
        assert!(
            first.iter().all(|s| !last.contains(s)),
            "iterations train on new days"
        );
        let sc = smartmig_sim::scenario::Scenario::reference(&[]).unwrap();
        let big = TrainConfig { seed: 10, ..cfg };
        let meta = smartmig_sim::partition::mean_field::scenario_metadata(&sc, 0, 5, 3, 10);
        let out = std::env::temp_dir().join(format!("smartmig-seed-{}.onnx", std::process::id()));
        let err = train(&sc, big, &out, false, meta, |_| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("validation and evaluation seeds"), "{err}");
        assert!(
            !out.exists() && !checkpoint_dir(&out).exists(),
            "refused before writing anything"
        );
    }

    #[test]
    fn the_written_policy_is_the_best_validated_one() {
        let sc = smartmig_sim::scenario::Scenario::reference(&["workload.days=0.1".into()]).unwrap();
        let cfg = TrainConfig {
            iterations: 3,
            episodes: 2,
            validate_every: 1,
            validation_days: 2,
            // A weak stay bias and a large step, so that validation ETs differ.
            ppo: PpoConfig {
                stay_bias: 2.0,
                lr: 1e-2,
                ..PpoConfig::default()
            },
            ..TrainConfig::default()
        };
        let meta = smartmig_sim::partition::mean_field::scenario_metadata(&sc, 0, 5, 3, 0);
        let expected = meta.clone();
        let dir = std::env::temp_dir().join(format!("smartmig-best-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("p.onnx");
        let p = train(&sc, cfg, &out, false, meta, |_| {}).unwrap();
        let validated: Vec<f64> = p.curve.iter().filter_map(|c| c.validation_et).collect();
        assert_eq!(validated.len(), 3, "validated after every iteration");
        let best = p.best.expect("a best entry");
        assert!(validated.iter().all(|&v| best.validation_et <= v));
        if best.after_iterations > 0 {
            let at = p.curve[best.after_iterations as usize - 1].validation_et;
            assert_eq!(at, Some(best.validation_et));
        }
        // The file holds the kept weights: its forward pass matches the saved best ones.
        let k = sc.models[0].configurations.len();
        let dim = smartmig_sim::features::feature_dim(k);
        let mut kept = Learner::new(dim, k, PpoConfig::default(), 0).unwrap();
        kept.load(&checkpoint_dir(&out).join("best.safetensors")).unwrap();
        let mut last = Learner::new(dim, k, PpoConfig::default(), 0).unwrap();
        last.load(&checkpoint_dir(&out).join("weights.safetensors"))
            .unwrap();
        let x = vec![0.3f32; dim];
        let mut rt = smartmig_policy::runtime::PolicyRuntime::load(&out, &expected).unwrap();
        let from_file = rt.infer(&x).unwrap();
        let want = kept.policy().unwrap().forward(&x, 1).unwrap();
        assert!(from_file.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-4));
        if best.after_iterations < 3 {
            assert_ne!(
                last.policy().unwrap().forward(&x, 1).unwrap(),
                want,
                "the last weights differ"
            );
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn resume_continues_only_the_checkpoints_own_settings_and_scenario() {
        let day = "workload.days=0.02".to_string();
        let sc = smartmig_sim::scenario::Scenario::reference(std::slice::from_ref(&day)).unwrap();
        let cfg = TrainConfig {
            iterations: 1,
            episodes: 1,
            validation_days: 0,
            ..TrainConfig::default()
        };
        let meta = smartmig_sim::partition::mean_field::scenario_metadata(&sc, 0, 5, 3, 0);
        let dir = std::env::temp_dir().join(format!("smartmig-resume-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("p.onnx");
        train(&sc, cfg.clone(), &out, false, meta.clone(), |_| {}).unwrap();
        let progress_file = checkpoint_dir(&out).join("progress.json");
        let before = std::fs::read_to_string(&progress_file).unwrap();

        let reseeded = TrainConfig {
            seed: 2,
            iterations: 2,
            ..cfg.clone()
        };
        let err = train(&sc, reseeded, &out, true, meta.clone(), |_| {})
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--resume: ") && err.contains("seed (0 in the checkpoint, 2 now)"),
            "{err}"
        );
        let padded = smartmig_sim::scenario::Scenario::reference(&[
            day,
            "repartition.index_rule=\"padded-assigned\"".into(),
        ])
        .unwrap();
        let more = TrainConfig { iterations: 2, ..cfg };
        let err = train(&padded, more.clone(), &out, true, meta.clone(), |_| {})
            .unwrap_err()
            .to_string();
        assert!(err.contains("scenario values: repartition.index_rule"), "{err}");
        assert_eq!(
            std::fs::read_to_string(&progress_file).unwrap(),
            before,
            "a refused resume changes nothing"
        );

        let p = train(&sc, more, &out, true, meta, |_| {}).unwrap();
        assert_eq!((p.done, p.curve.len(), p.config.iterations), (2, 2, 2));
        std::fs::remove_dir_all(&dir).ok();
    }

    /// The contract's K is each model's number of configurations (12, or 4 on the A30):
    /// a policy trains, writes and loads through ONNX Runtime on every catalogue model.
    #[test]
    fn a_policy_trains_writes_and_loads_on_every_model_with_its_own_k() {
        let dir = std::env::temp_dir().join(format!("smartmig-k-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for m in smartmig_core::mig::Catalogue::embedded().models {
            let sc = smartmig_sim::scenario::Scenario::reference(&[
                format!("cluster.gpus=[{{model = \"{}\", count = 2}}]", m.key),
                "workload.days=0.02".into(),
                format!(
                    "baselines.reference_layout=[\"{}\"]",
                    smartmig_sim::scenario::WHOLE_GPU
                ),
                format!(
                    "baselines.static_best=[\"{}\"]",
                    smartmig_sim::scenario::WHOLE_GPU
                ),
                "baselines.periodic=[]".into(),
                format!(
                    "baselines.periodic_best=[{{at = \"00:00\", layout = [\"{}\"]}}]",
                    smartmig_sim::scenario::WHOLE_GPU
                ),
            ])
            .unwrap();
            let k = sc.models[0].configurations.len();
            assert_eq!(k, if m.compute_slices == 4 { 4 } else { 12 }, "{}", m.key);
            let cfg = TrainConfig {
                iterations: 1,
                episodes: 1,
                validate_every: 1,
                validation_days: 1,
                ..TrainConfig::default()
            };
            let meta = smartmig_sim::partition::mean_field::scenario_metadata(&sc, 0, 5, 3, 0);
            let out = dir.join(format!("{}.onnx", m.key));
            train(&sc, cfg, &out, false, meta.clone(), |_| {}).unwrap();
            let mut rt = smartmig_policy::runtime::PolicyRuntime::load(&out, &meta).unwrap();
            assert_eq!(
                (rt.metadata().gpu_model.as_str(), rt.metadata().k()),
                (m.key.as_str(), k)
            );
            let logits = rt
                .infer(&vec![0.1; smartmig_sim::features::feature_dim(k)])
                .unwrap();
            assert_eq!(logits.len(), k * k, "{}", m.key);
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
