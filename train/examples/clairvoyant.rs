//! The headroom of a policy that sees only the queue: a teacher refined on each evaluation
//! day of a scenario (the reference unless told) by itself (it knows that day's
//! arrivals), against static-best, beside the common teacher it starts from.
//!
//! `cargo run --release -p smartmig-train --example clairvoyant -- REPORT [CAP]
//! [scenario=FILE] [set=KEY=VALUE]...`: REPORT is an imitation training's
//! `<out>.ckpt/imitation.json` (its common teacher); CAP, a fraction (0.27), holds each
//! day's energy to that far above the energy lower bound, and `teacher` holds each day to
//! the energy the common teacher used on it; FILE is the training's scenario (the
//! reference without it) and each `set=` overrides it as `--set` does (the training's own,
//! e.g. `set=repartition.semantics="drain"`).

use std::error::Error;

use rayon::prelude::*;
use smartmig_eval::compare::{run_reference, run_static};
use smartmig_sim::partition::ladder::LadderParams;
use smartmig_sim::scenario::Scenario;
use smartmig_sim::sched::Scheduler;
use smartmig_train::imitation::{energy_above_bound, refine_on_day, run_ladder, DEFAULT_DAY_BLOCKS};

/// The per-day results: (common ET gain, its energy above the bound, refined gain, energy).
type Day = (f64, f64, f64, f64);

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let report = args
        .next()
        .ok_or("usage: clairvoyant REPORT [CAP|teacher] [scenario=FILE] [set=KEY=VALUE]...")?;
    let (mut cap, mut file, mut sets) = (None, None, Vec::new());
    for a in args {
        match a.split_once('=') {
            Some(("set", v)) => sets.push(v.to_string()),
            Some(("scenario", v)) => file = Some(std::path::PathBuf::from(v)),
            _ if cap.is_none() => cap = Some(a),
            _ => return Err(format!("{a}: one CAP at most").into()),
        }
    }
    let text = std::fs::read_to_string(&report).map_err(|e| format!("{report}: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{report}: {e}"))?;
    let teacher: LadderParams = serde_json::from_value(v["outcome"]["teacher"].clone())
        .map_err(|e| format!("{report} has no imitation teacher: {e}"))?;
    let sc = match &file {
        Some(f) => Scenario::load(f, &sets)?,
        None => Scenario::reference(&sets)?,
    };
    let layout = sc
        .scenario
        .baselines
        .static_best
        .clone()
        .ok_or("no static-best layout")?;
    let objective = &sc.scenario.objective;
    let every = 5;
    let seeds = smartmig_eval::EVAL_SEED_BASE..smartmig_eval::EVAL_SEED_BASE + 20;
    let days: Vec<Day> = seeds
        .into_par_iter()
        .map(|s| -> Result<Day, String> {
            let jobs = smartmig_sim::workload::from_scenario(&sc, s, false).map_err(|e| e.to_string())?;
            let day = (s, jobs);
            let reference = run_reference(&sc, &day.1, s);
            let static_et = run_static(&sc, &day.1, Scheduler::Cedf, &layout, s).et(&reference, objective);
            let common = energy_above_bound(&sc, &day, &teacher, every);
            let day_cap = match cap.as_deref() {
                None => None,
                Some("teacher") => Some(common),
                Some(c) => Some(c.parse::<f64>().map_err(|e| format!("CAP {c}: {e}"))?),
            };
            let (refined, _, _) = refine_on_day(&sc, &day, &teacher, DEFAULT_DAY_BLOCKS, every, day_cap);
            let et = |p: &LadderParams| run_ladder(&sc, &day.1, p, every, s).et(&reference, objective);
            Ok((
                1.0 - et(&teacher) / static_et,
                common,
                1.0 - et(&refined) / static_et,
                energy_above_bound(&sc, &day, &refined, every),
            ))
        })
        .collect::<Result<_, _>>()?;
    let n = days.len() as f64;
    let mean = |f: fn(&Day) -> f64| 100.0 * days.iter().map(f).sum::<f64>() / n;
    // The standard error of a per-day gain's mean, in percent.
    let se = |f: fn(&Day) -> f64| {
        let m = mean(f) / 100.0;
        let var = days.iter().map(|d| (f(d) - m).powi(2)).sum::<f64>() / (n - 1.0);
        100.0 * (var / n).sqrt()
    };
    println!(
        "{} evaluation days | common teacher {:+.1}% ± {:.1}% over static-best, energy +{:.1}% above the bound | refined on each day {:+.1}% ± {:.1}%, energy +{:.1}%",
        days.len(),
        mean(|d| d.0),
        se(|d| d.0),
        mean(|d| d.1),
        mean(|d| d.2),
        se(|d| d.2),
        mean(|d| d.3)
    );
    Ok(())
}
