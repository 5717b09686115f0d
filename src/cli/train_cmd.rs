//! `smartmig train`.

use std::path::PathBuf;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::sim_cmd::ScenarioArgs;
use super::{CliError, CliResult};
use crate::partition::mean_field::scenario_metadata;
use crate::sim::plot;
use crate::train::{checkpoint_dir, train, CurvePoint, PpoConfig, TrainConfig};

/// `train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// Where to write the policy (ONNX); checkpoints go to `<out>.ckpt/`.
    #[arg(long)]
    out: PathBuf,
    /// PPO iterations.
    #[arg(long, default_value_t = 100)]
    iterations: u32,
    /// Simulated days per iteration.
    #[arg(long, default_value_t = 8)]
    episodes: u32,
    /// Training seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Continue from the checkpoint in `<out>.ckpt/`.
    #[arg(long)]
    resume: bool,
    /// Adam learning rate.
    #[arg(long, default_value_t = PpoConfig::default().lr)]
    lr: f64,
    /// Decide every this many arrivals and completions.
    #[arg(long, default_value_t = 5)]
    every_events: u32,
    /// Initial logit bonus of staying (higher: fewer exploratory repartitions at first).
    #[arg(long, default_value_t = PpoConfig::default().stay_bias)]
    stay_bias: f32,
    /// Entropy bonus weight.
    #[arg(long, default_value_t = PpoConfig::default().entropy)]
    entropy: f64,
    /// Discount per decision.
    #[arg(long, default_value_t = PpoConfig::default().gamma)]
    gamma: f64,
    /// GAE λ (1: Monte Carlo returns).
    #[arg(long, default_value_t = PpoConfig::default().lambda)]
    lambda: f64,
    /// Validate (and keep the best weights) every this many iterations.
    #[arg(long, default_value_t = TrainConfig::default().validate_every)]
    validate_every: u32,
    /// Days per validation (seeds of their own).
    #[arg(long, default_value_t = TrainConfig::default().validation_days)]
    validation_days: u32,
    /// Adam's ε (see PpoConfig::adam_eps).
    #[arg(long, default_value_t = PpoConfig::default().adam_eps)]
    adam_eps: f64,
}

/// The validation part of a progress line.
fn validation(p: &CurvePoint) -> String {
    match (p.validation_et, p.validation_start_et) {
        (Some(v), Some(s)) => format!(
            " | validation ET {v:.4} ({:+.1}% vs start layout)",
            100.0 * (s - v) / s.max(1e-9)
        ),
        _ => String::new(),
    }
}

/// Runs `train`.
pub fn run(a: TrainArgs) -> CliResult {
    let sc = a.scenario.load()?;
    let cfg = TrainConfig {
        iterations: a.iterations,
        episodes: a.episodes,
        seed: a.seed,
        every_events: a.every_events,
        top_k: 3,
        validate_every: a.validate_every,
        validation_days: a.validation_days,
        ppo: PpoConfig {
            lr: a.lr,
            stay_bias: a.stay_bias,
            entropy: a.entropy,
            adam_eps: a.adam_eps,
            gamma: a.gamma,
            lambda: a.lambda,
            ..PpoConfig::default()
        },
    };
    let mut metadata = scenario_metadata(&sc, 0, cfg.every_events, cfg.top_k as u32, cfg.seed);
    if let Some(path) = &a.scenario.scenario {
        metadata.training_scenario = path.display().to_string();
    }
    let pb = ProgressBar::new(u64::from(a.iterations));
    pb.set_style(
        ProgressStyle::with_template("train [{bar:30}] {pos}/{len} {elapsed} eta {eta} | {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let progress = train(&sc, cfg, &a.out, a.resume, metadata, |p| {
        pb.set_position(u64::from(p.iteration + 1));
        pb.set_message(format!(
            "ET {:.3} (gain {:+.1}% vs static CEDF, {:+.1}% vs start layout) reparts {:.0}{}",
            p.et,
            100.0 * (1.0 - p.et),
            100.0 * p.ret / (p.et + p.ret).max(1e-9),
            p.repartitions,
            validation(p)
        ));
        if !pb.is_hidden() {
            return;
        }
        // Not a terminal: one log line per iteration instead of a bar.
        eprintln!(
            "iteration {} ET {:.4} (start layout kept: {:.4}) reparts {:.1}{}",
            p.iteration,
            p.et,
            p.et + p.ret,
            p.repartitions,
            validation(p)
        );
    })
    .map_err(CliError::failure)?;
    pb.finish_and_clear();
    let training: Vec<(u32, f64)> = progress.curve.iter().map(|p| (p.iteration + 1, p.et)).collect();
    // The same days with the start layout kept: the policy learns what lies below it.
    let kept: Vec<(u32, f64)> = progress
        .curve
        .iter()
        .map(|p| (p.iteration + 1, p.et + p.ret))
        .collect();
    let validation: Vec<(u32, f64)> = progress
        .curve
        .iter()
        .filter_map(|p| p.validation_et.map(|v| (p.iteration + 1, v)))
        .collect();
    let mut refs = vec![("static-cedf".to_string(), 1.0)];
    if let Some(b) = progress.best {
        refs.push(("kept: best validation".to_string(), b.validation_et));
    }
    let plot_path = checkpoint_dir(&a.out).join("learning-curve.svg");
    plot::learning_curve(
        &plot_path,
        &[
            ("training days".to_string(), training),
            ("training days, start layout kept".to_string(), kept),
            ("validation days".to_string(), validation),
        ],
        &refs,
        "smart-mig training",
    )
    .map_err(CliError::failure)?;
    let kept = progress.best.map_or("the last weights".to_string(), |b| {
        format!(
            "the weights after {} iterations (validation ET {:.4})",
            b.after_iterations, b.validation_et
        )
    });
    println!(
        "wrote {} ({kept}) after {} iterations in {:.0} s; learning curve {}",
        a.out.display(),
        progress.done,
        progress.seconds,
        plot_path.display()
    );
    Ok(())
}
