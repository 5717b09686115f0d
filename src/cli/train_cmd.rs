//! `smartmig train`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::sim_cmd::{file_tuned, ScenarioArgs};
use super::{CliError, CliResult};
use smartmig_eval::periodic::{DEFAULT_BLOCKS, DEFAULT_PASSES};
use smartmig_eval::plot;
use smartmig_policy::Draw;
use smartmig_sim::partition::mean_field::scenario_metadata;
use smartmig_sim::scenario::{PeriodicSpec, ResolvedScenario};
use smartmig_sim::workload::JobSet;
use smartmig_train::imitation::{train_imitation, ImitationConfig, DEFAULT_DAY_BLOCKS};
use smartmig_train::lookahead::LookaheadConfig;
use smartmig_train::{checkpoint_dir, train, CurvePoint, PpoConfig, TrainConfig};

/// How `train` learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    /// Imitate a controller tuned on the training days (time-of-day base rung, moved by
    /// the queue), then relabel what the network itself sees (DAgger).
    Imitation,
    /// Proximal policy optimisation from the simulator's rewards.
    Ppo,
}

/// `train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// Where to write the policy (ONNX); checkpoints and figures go to `<out>.ckpt/`.
    #[arg(long)]
    out: PathBuf,
    /// How to learn.
    #[arg(long, value_enum, default_value = "imitation")]
    method: Method,
    /// Imitation: training days (the teacher's search and the network's data).
    #[arg(long, default_value_t = ImitationConfig::default().train_days)]
    train_days: u32,
    /// Imitation: most rounds of the teacher's search.
    #[arg(long, default_value_t = ImitationConfig::default().teacher_rounds)]
    teacher_rounds: u32,
    /// Imitation: rounds of fitting the network and relabelling what it saw.
    #[arg(long, default_value_t = ImitationConfig::default().student_rounds)]
    student_rounds: u32,
    /// Imitation: most mean energy above the energy lower bound the teacher may use, as a
    /// fraction (0.27: 27%); unset: ET alone.
    #[arg(long)]
    energy_cap: Option<f64>,
    /// Imitation: refine the teacher on each training day by itself over this many blocks
    /// of the day (a teacher that knows the day's arrivals; the network still sees only
    /// the queue and the time); 0: one teacher for every day.
    #[arg(long, default_value_t = DEFAULT_DAY_BLOCKS)]
    day_blocks: usize,
    /// Imitation: learn from a lookahead over the tuned teacher instead (it tries each of
    /// the teacher's rungs for the next hour on this many futures sampled from the
    /// arrival model, every 15 minutes; slower, and causal: it never sees the day's
    /// future arrivals); 0: the teacher and its refinements on each day.
    #[arg(long, default_value_t = 0)]
    lookahead_samples: usize,
    /// Imitation with `--lookahead-samples`: weight of energy (E/E_ref) added to ET in the
    /// lookahead's score (0: ET alone).
    #[arg(long, default_value_t = 0.0)]
    lookahead_energy: f64,
    /// Imitation with `--lookahead-samples`: a node layout the lookahead tries besides the
    /// teacher's rungs, one configuration per GPU of a node (`c1,c1,c2,c2,c2,c2,c6,c6`);
    /// repeat for more.
    #[arg(long = "lookahead-layout", value_name = "LAYOUT")]
    lookahead_layouts: Vec<String>,
    /// Imitation with `--lookahead-samples`: how much a decision's weight in the fit
    /// follows its stake, what a wrong choice there costs in the lookahead's score (0:
    /// every decision alike; 1: in proportion to the stake).
    #[arg(long, default_value_t = 0.0, value_parser = super::parse_fraction)]
    stake_weight: f64,
    /// Imitation with `--lookahead-samples`: fit each decision to every action the
    /// lookahead scored, in proportion to exp(-margin / (T × mean stake)), where margin is
    /// how much worse than its choice the action scored (0: its choice alone).
    #[arg(long, value_name = "T", default_value_t = 0.0, value_parser = parse_non_negative)]
    soft_targets: f64,
    /// Imitation: supervised epochs per round.
    #[arg(long, default_value_t = ImitationConfig::default().epochs)]
    epochs: usize,
    /// PPO iterations.
    #[arg(long, default_value_t = PPO_ITERATIONS)]
    iterations: u32,
    /// PPO: simulated days per iteration.
    #[arg(long, default_value_t = PPO_EPISODES)]
    episodes: u32,
    /// Training seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// PPO: continue from the checkpoint in `<out>.ckpt/`, with its settings and scenario
    /// (refused otherwise); only `--iterations` may change.
    #[arg(long)]
    resume: bool,
    /// Imitation: draw the figures in `<out>.ckpt/` again from its `imitation.json` (a
    /// finished training, e.g. one made by an older release), without training; the
    /// flags that shape a training are refused with it.
    #[arg(long, conflicts_with_all = [
        "scenario", "sets", "days", "semantics", "smartmig_toml", "method", "train_days",
        "teacher_rounds", "student_rounds", "energy_cap", "day_blocks", "lookahead_samples",
        "lookahead_energy", "lookahead_layouts", "stake_weight", "soft_targets", "epochs", "iterations", "episodes",
        "seed", "resume", "lr", "every_events", "stay_bias", "entropy", "gamma", "lambda",
        "validate_every", "validation_days", "adam_eps",
    ])]
    replot: bool,
    /// Adam learning rate (default: 3e-3 for imitation, 1e-4 for PPO).
    #[arg(long)]
    lr: Option<f64>,
    /// Decide every this many arrivals and completions.
    #[arg(long, default_value_t = 5)]
    every_events: u32,
    /// PPO: initial logit bonus of staying (higher: fewer exploratory repartitions at first).
    #[arg(long, default_value_t = PpoConfig::default().stay_bias)]
    stay_bias: f32,
    /// PPO: entropy bonus weight.
    #[arg(long, default_value_t = PpoConfig::default().entropy)]
    entropy: f64,
    /// PPO: discount per decision.
    #[arg(long, default_value_t = PpoConfig::default().gamma)]
    gamma: f64,
    /// PPO: GAE λ (1: Monte Carlo returns).
    #[arg(long, default_value_t = PpoConfig::default().lambda)]
    lambda: f64,
    /// PPO: validate (and keep the best weights) every this many iterations.
    #[arg(long, default_value_t = TrainConfig::default().validate_every)]
    validate_every: u32,
    /// Days per validation (seeds of their own).
    #[arg(long, default_value_t = TrainConfig::default().validation_days)]
    validation_days: u32,
    /// PPO: Adam's ε (see PpoConfig::adam_eps).
    #[arg(long, default_value_t = PpoConfig::default().adam_eps)]
    adam_eps: f64,
}

/// PPO iterations unless `--iterations` says otherwise.
const PPO_ITERATIONS: u32 = 100;
/// PPO's simulated days per iteration unless `--episodes` says otherwise.
const PPO_EPISODES: u32 = 8;

/// The flags given away from their defaults that the chosen method does not read: a
/// training takes an hour, and one run without the flag its maker meant is worse than
/// an error at once.
fn flags_the_method_ignores(a: &TrainArgs) -> Vec<&'static str> {
    let i = ImitationConfig::default();
    let p = PpoConfig::default();
    let flags = match a.method {
        Method::Ppo => vec![
            ("--train-days", a.train_days != i.train_days),
            ("--teacher-rounds", a.teacher_rounds != i.teacher_rounds),
            ("--student-rounds", a.student_rounds != i.student_rounds),
            ("--energy-cap", a.energy_cap.is_some()),
            ("--day-blocks", a.day_blocks != DEFAULT_DAY_BLOCKS),
            ("--lookahead-samples", a.lookahead_samples != 0),
            ("--lookahead-energy", a.lookahead_energy != 0.0),
            ("--lookahead-layout", !a.lookahead_layouts.is_empty()),
            ("--stake-weight", a.stake_weight != 0.0),
            ("--soft-targets", a.soft_targets != 0.0),
            ("--epochs", a.epochs != i.epochs),
        ],
        Method::Imitation => vec![
            ("--iterations", a.iterations != PPO_ITERATIONS),
            ("--episodes", a.episodes != PPO_EPISODES),
            ("--resume", a.resume),
            ("--stay-bias", a.stay_bias != p.stay_bias),
            ("--entropy", a.entropy != p.entropy),
            ("--gamma", a.gamma != p.gamma),
            ("--lambda", a.lambda != p.lambda),
            (
                "--validate-every",
                a.validate_every != TrainConfig::default().validate_every,
            ),
            ("--adam-eps", a.adam_eps != p.adam_eps),
        ],
    };
    flags
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
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
    let ignored = flags_the_method_ignores(&a);
    if !ignored.is_empty() {
        let (method, other) = match a.method {
            Method::Imitation => ("imitation", "ppo"),
            Method::Ppo => ("ppo", "imitation"),
        };
        return Err(CliError::usage(anyhow::anyhow!(
            "--method {method} does not read {}: {} a `--method {other}` training",
            ignored.join(", "),
            if ignored.len() == 1 {
                "it shapes"
            } else {
                "they shape"
            },
        )));
    }
    match a.method {
        // --replot conflicts with --method: the default, imitation, is the one it draws.
        Method::Imitation if a.replot => imitation_figures(&checkpoint_dir(&a.out)),
        Method::Imitation => imitation(a),
        Method::Ppo => ppo(a),
    }
}

/// What the figures of an imitation training are drawn from, as `imitation.json` holds it.
#[derive(serde::Deserialize)]
struct ImitationReport {
    config: ReportConfig,
    outcome: ReportOutcome,
}

#[derive(serde::Deserialize)]
struct ReportConfig {
    energy_cap: Option<f64>,
    /// Set when a lookahead over the tuned teacher labelled the network's data.
    #[serde(default)]
    lookahead: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct ReportOutcome {
    teacher_curve: Vec<f64>,
    teacher_validation_et: f64,
    static_validation_et: f64,
    rounds: Vec<ReportRound>,
    kept_round: u32,
    #[serde(default)]
    day_refinement: Option<ReportRefinement>,
}

#[derive(serde::Deserialize)]
struct ReportRefinement {
    score: f64,
}

#[derive(serde::Deserialize)]
struct ReportRound {
    round: u32,
    train_et: f64,
    validation_et: f64,
    /// Under an energy cap (older reports have none).
    #[serde(default)]
    validation_energy_above_bound: Option<f64>,
}

/// Draws `teacher-curve.svg` and `learning-curve.svg` in `ckpt` from its `imitation.json`,
/// and `energy-curve.svg` when the training had an energy cap and measured each round's energy.
fn imitation_figures(ckpt: &std::path::Path) -> CliResult {
    let path = ckpt.join("imitation.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| {
            format!(
                "cannot read {} (written at the end of an imitation training)",
                path.display()
            )
        })
        .map_err(CliError::input)?;
    let r: ImitationReport = serde_json::from_str(&text)
        .with_context(|| format!("{} is not an imitation training's report", path.display()))
        .map_err(CliError::input)?;
    let o = &r.outcome;
    let teacher_name = match r.config.lookahead {
        Some(_) => "teacher (the lookahead's base), validation days",
        None => "teacher, validation days",
    };
    let baselines = [
        ("static-best, validation days".to_string(), o.static_validation_et),
        (teacher_name.to_string(), o.teacher_validation_et),
    ];
    let teacher: Vec<(u32, f64)> = (0..).zip(o.teacher_curve.iter().copied()).collect();
    let teacher_label = match r.config.energy_cap {
        Some(_) => "teacher, training days (ET + energy-cap penalty)",
        None => "teacher, training days",
    };
    plot::learning_curve(
        &ckpt.join("teacher-curve.svg"),
        &[(teacher_label.to_string(), teacher)],
        &baselines,
        "teacher search: ET per round of coordinate descent",
    )
    .map_err(CliError::failure)?;
    let rounds = |f: fn(&ReportRound) -> f64| -> Vec<(u32, f64)> {
        o.rounds.iter().map(|r| (r.round, f(r))).collect()
    };
    // The network learns from the teachers refined on each training day when there are.
    let mut baselines = baselines.to_vec();
    if let Some(r) = &o.day_refinement {
        baselines.push(("teacher refined on each day, training days".to_string(), r.score));
    }
    let kept = o.rounds.iter().find(|r| r.round == o.kept_round);
    let kept_point = |f: fn(&ReportRound) -> f64| -> (String, Vec<(u32, f64)>) {
        (
            format!("kept: round {}", o.kept_round),
            kept.map(|r| (r.round, f(r))).into_iter().collect(),
        )
    };
    plot::per_iteration(
        &ckpt.join("learning-curve.svg"),
        &[
            ("network, training days".to_string(), rounds(|r| r.train_et)),
            (
                "network, validation days".to_string(),
                rounds(|r| r.validation_et),
            ),
            kept_point(|r| r.validation_et),
        ],
        &baselines,
        "mean-field network by imitation: ET per round",
        ("round", "ET vs static CEDF (lower is better)"),
    )
    .map_err(CliError::failure)?;
    // Under a cap the kept round is the best ET among those within it: show why.
    let (Some(cap), true) = (
        r.config.energy_cap,
        o.rounds.iter().all(|r| r.validation_energy_above_bound.is_some()),
    ) else {
        return Ok(());
    };
    let energy = |r: &ReportRound| 100.0 * r.validation_energy_above_bound.unwrap_or(f64::NAN);
    plot::per_iteration(
        &ckpt.join("energy-curve.svg"),
        &[
            ("network, validation days".to_string(), rounds(energy)),
            kept_point(energy),
        ],
        &[("energy cap".to_string(), 100.0 * cap)],
        "mean-field network by imitation: energy per round",
        ("round", "energy above the lower bound, %"),
    )
    .map_err(CliError::failure)
}

/// The baselines the teacher starts from: the scenario file's, or searched now on the
/// training days when absent or tuned for another world.
fn teacher_start(
    sc: &ResolvedScenario,
    a: &TrainArgs,
    cfg: &ImitationConfig,
) -> Result<(Vec<PeriodicSpec>, Vec<String>), CliError> {
    let tuned = file_tuned(sc, &a.scenario, false);
    let first = smartmig_eval::TRAIN_SEED_BASE + cfg.seed * 100_000;
    let days = || -> Result<Vec<(u64, JobSet)>, CliError> {
        (first..first + u64::from(cfg.train_days))
            .map(|s| Ok((s, smartmig_sim::workload::from_scenario(sc, s, false)?)))
            .collect::<Result<_, smartmig_sim::workload::TraceError>>()
            .map_err(CliError::input)
    };
    let static_best = match tuned.static_best {
        Some((l, None)) => l,
        _ => {
            eprintln!("static-best: tuning on the training days first");
            smartmig_eval::tune::tune_static_on(sc, days()?, &ProgressBar::hidden()).layout
        }
    };
    let schedule = match tuned.periodic_best {
        Some((p, None)) => p,
        _ => {
            eprintln!("periodic-best: tuning on the training days first");
            let pb = ProgressBar::hidden();
            smartmig_eval::periodic::tune_periodic_on(
                sc,
                days()?,
                &static_best,
                DEFAULT_BLOCKS,
                DEFAULT_PASSES,
                &pb,
            )
            .map_err(CliError::input)?
            .schedule
        }
    };
    Ok((schedule, static_best))
}

/// A flag's value that is a finite number, 0 or more (`--soft-targets`).
fn parse_non_negative(text: &str) -> Result<f64, String> {
    super::parse_number_in(text, 0.0..=f64::MAX, "a finite number of 0 or more")
}

/// The scenario to train on. A policy chooses among every configuration of the catalogue,
/// so one limited to a site's (`cluster.configurations`, a mig-parted smartmig.toml's
/// mig-configs) is refused before the hours of training: smartmigd there would refuse
/// the file, whose configurations are not its action space.
fn training_scenario(args: &ScenarioArgs) -> Result<ResolvedScenario, CliError> {
    let sc = args.load()?;
    match &sc.scenario.cluster.configurations {
        Some(site) => Err(CliError::input(anyhow::anyhow!(
            "cluster.configurations = {site}: a learned policy chooses among every \
             configuration, and smartmigd takes one only where they are its action space \
             (not a mig-parted site's mig-configs); tune a schedule there instead \
             (smartmig tune-periodic)"
        ))),
        None => Ok(sc),
    }
}

/// `train --method imitation`.
fn imitation(a: TrainArgs) -> CliResult {
    let sc = training_scenario(&a.scenario)?;
    if a.stake_weight > 0.0 && a.lookahead_samples == 0 {
        return Err(CliError::input(anyhow::anyhow!(
            "--stake-weight needs --lookahead-samples (the lookahead scores each decision's stake)"
        )));
    }
    if a.soft_targets > 0.0 && a.lookahead_samples == 0 {
        return Err(CliError::input(anyhow::anyhow!(
            "--soft-targets needs --lookahead-samples (the lookahead scores the actions it shares a decision among)"
        )));
    }
    if !a.lookahead_layouts.is_empty() && a.lookahead_samples == 0 {
        return Err(CliError::input(anyhow::anyhow!(
            "--lookahead-layout needs --lookahead-samples (it is a layout the lookahead tries)"
        )));
    }
    let cfg = ImitationConfig {
        seed: a.seed,
        train_days: a.train_days,
        validation_days: a.validation_days,
        every_events: a.every_events,
        teacher_rounds: a.teacher_rounds,
        student_rounds: a.student_rounds,
        epochs: a.epochs,
        lr: a.lr.unwrap_or(ImitationConfig::default().lr),
        energy_cap: a.energy_cap,
        day_blocks: (a.day_blocks > 0).then_some(a.day_blocks),
        lookahead: (a.lookahead_samples > 0).then(|| LookaheadConfig {
            samples: a.lookahead_samples,
            energy_weight: a.lookahead_energy,
            ..LookaheadConfig::default()
        }),
        lookahead_layouts: a
            .lookahead_layouts
            .iter()
            .map(|l| l.split(',').map(|n| n.trim().to_string()).collect())
            .collect(),
        stake_weight: a.stake_weight,
        soft_temperature: a.soft_targets,
        ..ImitationConfig::default()
    };
    let (schedule, static_best) = teacher_start(&sc, &a, &cfg)?;
    let outcome = train_imitation(&sc, &cfg, &schedule, &static_best, |line| eprintln!("{line}"))
        .map_err(CliError::failure)?;
    let ckpt = checkpoint_dir(&a.out);
    std::fs::create_dir_all(&ckpt)
        .with_context(|| format!("cannot create {}", ckpt.display()))
        .map_err(CliError::failure)?;
    let mut metadata = scenario_metadata(&sc, 0, cfg.every_events, 3, cfg.seed);
    if let Some(path) = &a.scenario.scenario {
        metadata.training_scenario = path.display().to_string();
    }
    metadata.draw = Draw::Apportion;
    metadata.guard = Some(outcome.guard.describe());
    let net = outcome
        .network
        .as_ref()
        .ok_or_else(|| CliError::failure(anyhow::anyhow!("training kept no network")))?;
    smartmig_policy::onnx_writer::write(&a.out, net, &metadata).map_err(CliError::failure)?;
    let report = serde_json::to_string_pretty(&serde_json::json!({ "config": cfg, "outcome": outcome }))
        .map_err(CliError::failure)?;
    let report_path = ckpt.join("imitation.json");
    std::fs::write(&report_path, report)
        .with_context(|| format!("cannot write {}", report_path.display()))
        .map_err(CliError::failure)?;
    imitation_figures(&ckpt)?;
    println!(
        "wrote {} (round {} of {}, validation ET {:.4}; teacher {:.4}, static-best {:.4}; guard {}) in {:.0} s; figures in {}",
        a.out.display(),
        outcome.kept_round,
        outcome.rounds.len(),
        outcome
            .rounds
            .iter()
            .find(|r| r.round == outcome.kept_round)
            .map_or(f64::NAN, |r| r.validation_et),
        outcome.teacher_validation_et,
        outcome.static_validation_et,
        outcome.guard.describe(),
        outcome.seconds,
        ckpt.display()
    );
    Ok(())
}

/// `train --method ppo`.
fn ppo(a: TrainArgs) -> CliResult {
    let sc = training_scenario(&a.scenario)?;
    let cfg = TrainConfig {
        iterations: a.iterations,
        episodes: a.episodes,
        seed: a.seed,
        every_events: a.every_events,
        top_k: 3,
        validate_every: a.validate_every,
        validation_days: a.validation_days,
        ppo: PpoConfig {
            lr: a.lr.unwrap_or(PpoConfig::default().lr),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_negative_flag_refuses_negatives_infinities_and_words_by_name() {
        assert_eq!(parse_non_negative("0.25"), Ok(0.25));
        assert_eq!(parse_non_negative("0"), Ok(0.0));
        assert!(parse_non_negative("-1").unwrap_err().contains("-1 is not"));
        assert!(parse_non_negative("inf").unwrap_err().contains("finite"));
        assert!(parse_non_negative("hot")
            .unwrap_err()
            .contains("\"hot\" is not a number"));
    }

    /// An `imitation.json` as `train` writes it (the fields the figures need, and others);
    /// `refinement` is its `day_refinement` (JSON).
    fn report(energy_cap: &str, refinement: &str) -> String {
        format!(
            r#"{{"config": {{"energy_cap": {energy_cap}, "seed": 0}},
               "outcome": {{"teacher_curve": [0.62, 0.61, 0.605], "teacher_validation_et": 0.594,
                            "day_refinement": {refinement},
                            "static_validation_et": 0.647, "kept_round": 2, "seconds": 9.0,
                            "rounds": [{{"round": 1, "train_et": 0.61, "validation_et": 0.60, "loss": 0.2}},
                                       {{"round": 2, "train_et": 0.60, "validation_et": 0.59, "loss": 0.1}}]}}}}"#
        )
    }

    #[test]
    fn replot_draws_both_figures_from_the_report_and_names_the_penalty_only_under_a_cap() {
        let d = tempfile::tempdir().unwrap();
        let teacher = d.path().join("teacher-curve.svg");
        let learning = d.path().join("learning-curve.svg");
        // A report from before refined teachers has no day_refinement.
        std::fs::write(d.path().join("imitation.json"), report("null", "null")).unwrap();
        imitation_figures(d.path()).unwrap();
        let t = std::fs::read_to_string(&teacher).unwrap();
        assert!(
            t.contains("teacher, training days") && !t.contains("energy-cap"),
            "{t}"
        );
        let l = std::fs::read_to_string(&learning).unwrap();
        assert!(
            l.contains("network, validation days") && l.contains("static-best") && !l.contains("refined"),
            "{l}"
        );
        let refined = r#"{"blocks": 24, "start_score": 0.61, "score": 0.58}"#;
        std::fs::write(d.path().join("imitation.json"), report("0.27", refined)).unwrap();
        imitation_figures(d.path()).unwrap();
        assert!(std::fs::read_to_string(&teacher)
            .unwrap()
            .contains("energy-cap penalty"));
        // The network's curve shows the level of the teachers it learned from.
        let l = std::fs::read_to_string(&learning).unwrap();
        assert!(l.contains("teacher refined on each day, training days") && l.contains("kept: round 2"));
        // A capped report from before energies were measured has no energy figure.
        let energy = d.path().join("energy-curve.svg");
        assert!(!energy.exists());
        let with_energy = report("0.27", "null")
            .replace(
                r#""loss": 0.2"#,
                r#""loss": 0.2, "validation_energy_above_bound": 0.265"#,
            )
            .replace(
                r#""loss": 0.1"#,
                r#""loss": 0.1, "validation_energy_above_bound": 0.268"#,
            );
        std::fs::write(d.path().join("imitation.json"), with_energy).unwrap();
        imitation_figures(d.path()).unwrap();
        let e = std::fs::read_to_string(&energy).unwrap();
        assert!(
            e.contains("energy cap")
                && e.contains("kept: round 2")
                && e.contains("energy above the lower bound"),
            "{e}"
        );
    }

    #[test]
    fn replot_refuses_the_flags_that_shape_a_training() {
        use clap::{CommandFactory, Parser};
        #[derive(Parser)]
        struct Train {
            #[command(flatten)]
            a: TrainArgs,
        }
        Train::command().debug_assert();
        let parse = |extra: &[&str]| {
            Train::try_parse_from([&["train", "--out", "p.onnx", "--replot"], extra].concat())
        };
        assert!(parse(&[]).is_ok_and(|t| t.a.replot));
        for flag in [
            &["--seed", "2"][..],
            &["--set", "workload.days=2"],
            &["--energy-cap", "0.27"],
            &["--resume"],
        ] {
            let e = parse(flag).err().unwrap();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{flag:?}: {e}"
            );
        }
    }

    #[test]
    fn lookahead_layouts_keep_one_flag_each_and_need_a_lookahead() {
        use clap::Parser;
        #[derive(Parser)]
        struct Train {
            #[command(flatten)]
            a: TrainArgs,
        }
        let parse = |extra: &[&str]| Train::try_parse_from([&["train", "--out", "p.onnx"], extra].concat());
        let t = parse(&[
            "--lookahead-samples",
            "4",
            "--lookahead-layout",
            "c1,c2",
            "--lookahead-layout",
            "c6,c6",
        ])
        .unwrap();
        assert_eq!(t.a.lookahead_layouts, ["c1,c2", "c6,c6"]);
        let alone = parse(&["--lookahead-layout", "c1,c2"]).unwrap();
        let e = format!("{:?}", imitation(alone.a).unwrap_err().error);
        assert!(e.contains("--lookahead-layout needs --lookahead-samples"), "{e}");
    }

    #[test]
    fn a_flag_of_the_other_method_is_refused_by_name_before_any_training() {
        use clap::Parser;
        #[derive(Parser)]
        struct Train {
            #[command(flatten)]
            a: TrainArgs,
        }
        let parse = |extra: &[&str]| {
            Train::try_parse_from([&["train", "--out", "p.onnx"], extra].concat())
                .unwrap()
                .a
        };
        // Shared flags and defaults spelled out are read by both methods.
        for shared in [
            &["--seed", "3", "--lr", "0.01", "--every-events", "4"][..],
            &["--method", "ppo", "--validation-days", "4", "--epochs", "40"],
            &["--iterations", "100"],
        ] {
            assert!(flags_the_method_ignores(&parse(shared)).is_empty(), "{shared:?}");
        }
        let ppo = parse(&[
            "--method",
            "ppo",
            "--energy-cap",
            "0.27",
            "--soft-targets",
            "0.05",
        ]);
        assert_eq!(flags_the_method_ignores(&ppo), ["--energy-cap", "--soft-targets"]);
        let e = run(ppo).unwrap_err();
        assert_eq!(e.code(), crate::cli::EXIT_USAGE);
        let message = e.message();
        assert!(
            message.contains("--method ppo does not read --energy-cap, --soft-targets")
                && message.contains("they shape a `--method imitation` training"),
            "{message}"
        );
        let imitation = parse(&["--resume", "--gamma", "0.9"]);
        assert_eq!(flags_the_method_ignores(&imitation), ["--resume", "--gamma"]);
        let message = run(parse(&["--episodes", "2"])).unwrap_err().message();
        assert!(
            message
                .contains("--method imitation does not read --episodes: it shapes a `--method ppo` training"),
            "{message}"
        );
    }

    #[test]
    fn replot_without_a_report_names_the_file_it_looked_for() {
        let d = tempfile::tempdir().unwrap();
        let e = format!("{:?}", imitation_figures(d.path()).unwrap_err());
        assert!(
            e.contains("imitation.json") && e.contains("end of an imitation training"),
            "{e}"
        );
        std::fs::write(d.path().join("imitation.json"), "{}").unwrap();
        let e = format!("{:?}", imitation_figures(d.path()).unwrap_err());
        assert!(e.contains("is not an imitation training's report"), "{e}");
    }
}
