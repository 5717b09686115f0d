//! The causal lookahead teacher of `smartmig_train::lookahead` acting by itself on the
//! reference scenario, against its base ladder and static-best.
//!
//! `cargo run --release -p smartmig-train --example lookahead -- [base=REPORT] [mu=0]
//! [samples=16] [hold=60] [plan=15] [days=20] [on=evaluation|validation] [set=KEY=VALUE]...
//! [layout=c1,c1,...]... [rollout=POLICY.onnx]`: REPORT is an imitation training's
//! `<out>.ckpt/imitation.json` (its common teacher is the base; without it periodic-best
//! as a ladder); mu weighs E/E_ref into the lookahead's score; each `set=` overrides the
//! reference scenario as `smartmig --set` does (train the base with the same ones); each
//! `layout=` is a node layout the lookahead tries besides the base's rungs (`train
//! --lookahead-layout`); `rollout=` imagines that learned policy, not the base ladder,
//! after each held action (BENCHMARKS.md, "A causal lookahead teacher").

use std::error::Error;

use rayon::prelude::*;
use smartmig_eval::compare::{run_reference, run_static, LayoutSpec, Paired, PolicySpec};
use smartmig_sim::partition::ladder::LadderParams;
use smartmig_sim::scenario::Scenario;
use smartmig_sim::sched::Scheduler;
use smartmig_sim::workload::{self, JobSet};
use smartmig_sim::{RunOptions, RunResult, Simulation};
use smartmig_train::imitation::{ladder_from, node_layout, run_ladder};
use smartmig_train::lookahead::{actions, Lookahead, LookaheadConfig, Score, SAMPLE_SEED_BASE};

fn main() -> Result<(), Box<dyn Error>> {
    let mut base_report = None;
    let mut first = smartmig_eval::EVAL_SEED_BASE;
    let mut cfg = LookaheadConfig::default();
    let mut ndays = 20u64;
    let mut sets = Vec::new();
    let mut layouts: Vec<Vec<String>> = Vec::new();
    let mut rollout: Option<std::path::PathBuf> = None;
    for a in std::env::args().skip(1) {
        let (k, v) = a
            .split_once('=')
            .ok_or_else(|| format!("{a}: expected key=value"))?;
        match k {
            "base" => base_report = Some(v.to_string()),
            "mu" => cfg.energy_weight = v.parse()?,
            "samples" => cfg.samples = v.parse()?,
            "hold" => cfg.hold_min = v.parse()?,
            "plan" => cfg.plan_min = v.parse()?,
            "days" => ndays = v.parse()?,
            "set" => sets.push(v.to_string()),
            "rollout" => rollout = Some(v.into()),
            "layout" => layouts.push(v.split(',').map(|n| n.trim().to_string()).collect()),
            "on" => {
                first = match v {
                    "evaluation" => smartmig_eval::EVAL_SEED_BASE,
                    "validation" => smartmig_eval::VALIDATION_SEED_BASE,
                    _ => return Err(format!("{a}: evaluation or validation").into()),
                }
            }
            _ => return Err(format!("{a}: unknown key").into()),
        }
    }
    let sc = Scenario::reference(&sets)?;
    let static_layout = sc
        .scenario
        .baselines
        .static_best
        .clone()
        .ok_or("no static-best layout")?;
    let base: LadderParams = match &base_report {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            let v: serde_json::Value = serde_json::from_str(&text)?;
            serde_json::from_value(v["outcome"]["teacher"].clone())?
        }
        None => {
            let best = sc
                .scenario
                .baselines
                .periodic_best
                .clone()
                .ok_or("no periodic-best schedule")?;
            ladder_from(&sc, &best, &static_layout, 6)
        }
    };
    let per_node = base.rungs.first().map_or(0, Vec::len);
    let extra: Vec<Vec<u16>> = layouts
        .iter()
        .map(|names| node_layout(&sc, names, per_node))
        .collect::<Result<_, _>>()?;
    let acts = actions(&base, &extra);
    let objective = &sc.scenario.objective;
    let every = 5;
    // The score's references: the mean reference run over the training days.
    let refs: Vec<RunResult> = (0..16)
        .into_par_iter()
        .map(|d| {
            let s = smartmig_eval::TRAIN_SEED_BASE + d;
            workload::from_scenario(&sc, s, false).map(|j| run_reference(&sc, &j, s))
        })
        .collect::<Result<_, _>>()?;
    let score = Score::new(&sc, &refs, cfg.energy_weight);
    let started = std::time::Instant::now();
    // Static-best's ET, the base's, the lookahead's, and the energy above the bound of the
    // last two.
    type Day = (f64, f64, f64, f64, f64);
    let days: Vec<Day> = (0..ndays)
        .into_par_iter()
        .map(|d| -> Result<Day, String> {
            let s = first + d;
            let jobs = workload::from_scenario(&sc, s, false).map_err(|e| e.to_string())?;
            let futures: Vec<JobSet> = (0..cfg.samples as u64)
                .map(|i| workload::from_scenario(&sc, SAMPLE_SEED_BASE + d * 100 + i, false))
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())?;
            let reference = run_reference(&sc, &jobs, s);
            let bound = smartmig_bounds::energy_day(&sc, &jobs.jobs).energy.energy_wmin;
            let static_et =
                run_static(&sc, &jobs, Scheduler::Cedf, &static_layout, s).et(&reference, objective);
            let base_run = run_ladder(&sc, &jobs, &base, every, s);
            let mut la = Lookahead::new(&sc, &jobs, &futures, s, score, cfg, &base, &acts, every, None);
            if let Some(model) = &rollout {
                let spec = LayoutSpec::MeanField {
                    model: model.clone(),
                    initial: static_layout.clone(),
                    stay_threshold: 0.0,
                };
                let policy = PolicySpec::new("rollout", Scheduler::Cedf, spec)
                    .repartitioner(&sc)
                    .map_err(|e| format!("{}: {e}", model.display()))?;
                la = la.with_rollout(policy);
            }
            let opts = RunOptions::of(&sc, Scheduler::Cedf, s);
            let r = Simulation::new(&sc, &jobs.jobs, opts).run(&mut la);
            Ok((
                static_et,
                base_run.et(&reference, objective),
                r.et(&reference, objective),
                base_run.energy_wmin / bound - 1.0,
                r.energy_wmin / bound - 1.0,
            ))
        })
        .collect::<Result<_, _>>()?;
    let col = |f: fn(&Day) -> f64| days.iter().map(f).collect::<Vec<f64>>();
    let mean = |f: fn(&Day) -> f64| 100.0 * days.iter().map(f).sum::<f64>() / days.len().max(1) as f64;
    let static_ets = col(|d| d.0);
    println!(
        "{} days from seed {first}, {:.0} s, against static-best | base: {}, energy +{:.1}% above the bound | lookahead: {}, energy +{:.1}% | {cfg:?}, {} actions, rollout {}",
        days.len(),
        started.elapsed().as_secs_f64(),
        Paired::of(&col(|d| d.1), &static_ets).describe(),
        mean(|d| d.3),
        Paired::of(&col(|d| d.2), &static_ets).describe(),
        mean(|d| d.4),
        acts.len(),
        rollout.as_ref().map_or("the base ladder".into(), |p| p.display().to_string())
    );
    Ok(())
}
