//! `smartmig sweep`: a `compare` split into a Slurm array job, one task per seed, and
//! merged back into the same table.
//!
//! `--emit-sbatch DIR` writes `DIR/sweep.json` (the scenario, overrides, seeds and policy
//! file, resolved to absolute paths) and `DIR/sweep.sbatch` (an array job whose task i
//! runs `smartmig sweep --run-task DIR --task i`). Each task writes
//! `DIR/results/seed-<seed>.json`: every policy's run on that seed's job stream and the
//! day's lower bounds. `--collect DIR` reads them all and prints what `compare --no-tune`
//! prints for the same seeds (the tuned baselines are the scenario file's, marked when the
//! overrides change the world they were tuned for; the learned policy runs without
//! `compare`'s guard); the numbers are equal because the summary is computed by the same
//! code from the same per-day results, read back bit-exact.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use clap::{ArgGroup, Args};
use serde::{Deserialize, Serialize};

use super::sim_cmd::{
    compare_policies, file_tuned, print_comparison, smart_mig_model, ScenarioArgs, SeedArg,
};
use super::{print_json, CliError, CliResult, Format};
use smartmig_eval::compare::{compare_day, summarise, Day, PolicySpec};
use smartmig_eval::EVAL_SEED_BASE;
use smartmig_sim::scenario::ResolvedScenario;

/// Version of `sweep.json`.
const MANIFEST_VERSION: u32 = 1;

/// `sweep`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("mode").required(true).args(["emit_sbatch", "collect", "run_task"])))]
pub struct SweepArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// Evaluation days, one array task each: a count from the first evaluation seed, or
    /// a range of seeds (`1000000..=1000019`).
    #[arg(long, default_value = "10")]
    seeds: SeedArg,
    /// Policy file (ONNX) to include as `smart-mig` (default: the shipped one, when present).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Leave the learned policy out even when one is shipped.
    #[arg(long, conflicts_with = "model")]
    no_model: bool,
    /// Write the sweep's manifest and Slurm array job into this directory.
    #[arg(long, value_name = "DIR")]
    emit_sbatch: Option<PathBuf>,
    /// Extra `#SBATCH` option for the array job, e.g. `--partition=cpu` (repeatable).
    #[arg(long = "sbatch-option", value_name = "OPTION", requires = "emit_sbatch")]
    sbatch_options: Vec<String>,
    /// Merge the results in this directory and print the comparison.
    #[arg(long, value_name = "DIR")]
    collect: Option<PathBuf>,
    /// Run one task of the sweep in this directory (what the array job calls).
    #[arg(long, value_name = "DIR", requires = "task")]
    run_task: Option<PathBuf>,
    /// Task index for `--run-task` (`$SLURM_ARRAY_TASK_ID`).
    #[arg(long)]
    task: Option<usize>,
    /// Output format of `--collect`.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// What every task and the collection read: the comparison to run.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    version: u32,
    /// Scenario file (absolute), or None for the embedded reference.
    scenario: Option<PathBuf>,
    /// Overrides, shorthands folded in.
    sets: Vec<String>,
    /// One task per seed, in this order.
    seeds: Vec<u64>,
    /// Learned policy (absolute), if any.
    model: Option<PathBuf>,
}

impl Manifest {
    fn read(dir: &Path) -> Result<Manifest, CliError> {
        let path = dir.join("sweep.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))
            .map_err(CliError::input)?;
        let m: Manifest = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a sweep manifest", path.display()))
            .map_err(CliError::input)?;
        if m.version != MANIFEST_VERSION {
            return Err(CliError::input(anyhow!(
                "{}: version {} is not supported (this build reads {MANIFEST_VERSION})",
                path.display(),
                m.version
            )));
        }
        Ok(m)
    }

    /// The scenario and the policies, as `compare` would build them.
    fn load(&self) -> Result<(ResolvedScenario, Vec<PolicySpec>), CliError> {
        let args = ScenarioArgs::with_sets(self.scenario.clone(), self.sets.clone());
        let sc = args.load()?;
        let policies = compare_policies(&sc, &file_tuned(&sc, &args, false), self.model.clone(), 0.0);
        Ok((sc, policies))
    }
}

/// Runs `sweep`.
pub fn run(a: SweepArgs) -> CliResult {
    if let Some(dir) = &a.emit_sbatch {
        emit(&a, dir)
    } else if let Some(dir) = &a.run_task {
        run_task(dir, a.task.unwrap_or(0))
    } else if let Some(dir) = &a.collect {
        collect(dir, a.format)
    } else {
        Err(CliError::input(anyhow!(
            "sweep needs --emit-sbatch, --collect or --run-task"
        )))
    }
}

fn absolute(p: &Path) -> Result<PathBuf, CliError> {
    std::path::absolute(p)
        .with_context(|| format!("cannot resolve {}", p.display()))
        .map_err(CliError::input)
}

/// Quotes a word for sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn write(path: &Path, text: &str) -> CliResult {
    std::fs::write(path, text)
        .with_context(|| format!("cannot write {}", path.display()))
        .map_err(CliError::failure)
}

fn emit(a: &SweepArgs, dir: &Path) -> CliResult {
    // Loading now reports a bad scenario before anything reaches the cluster.
    let sc = a.scenario.load()?;
    let model = smart_mig_model(&sc, &a.model, a.no_model);
    let dir = absolute(dir)?;
    let results = dir.join("results");
    let busy = std::fs::read_dir(&results)
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    if busy {
        return Err(CliError::input(anyhow!(
            "{} holds results of an earlier sweep: use a new directory",
            results.display()
        )));
    }
    for d in [&results, &dir.join("logs")] {
        std::fs::create_dir_all(d)
            .with_context(|| format!("cannot create {}", d.display()))
            .map_err(CliError::failure)?;
    }
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        scenario: a.scenario.scenario.as_deref().map(absolute).transpose()?,
        sets: a.scenario.all_sets(),
        seeds: a.seeds.seeds(EVAL_SEED_BASE),
        model: model.as_deref().map(absolute).transpose()?,
    };
    let json = serde_json::to_string_pretty(&manifest).map_err(CliError::failure)?;
    write(&dir.join("sweep.json"), &json)?;
    let exe = std::env::current_exe()
        .context("cannot find the smartmig executable")
        .map_err(CliError::failure)?;
    let n = manifest.seeds.len();
    if n == 0 {
        return Err(CliError::input(anyhow!(
            "--seeds 0: a sweep needs at least one seed"
        )));
    }
    let d = dir.display().to_string();
    let mut script = format!(
        "#!/bin/sh\n\
         # smartmig sweep: {n} evaluation days of {name}, one array task per seed.\n\
         # Collect with: smartmig sweep --collect {d}\n\
         #SBATCH --job-name=smartmig-sweep\n\
         #SBATCH --array=0-{last}\n\
         #SBATCH --output={d}/logs/task-%a.out\n",
        name = sc.scenario.name,
        last = n - 1,
    );
    for opt in &a.sbatch_options {
        script.push_str(&format!("#SBATCH {opt}\n"));
    }
    script.push_str(&format!(
        "exec {} sweep --run-task {} --task \"$SLURM_ARRAY_TASK_ID\"\n",
        sh_quote(&exe.display().to_string()),
        sh_quote(&d)
    ));
    let script_path = dir.join("sweep.sbatch");
    write(&script_path, &script)?;
    println!(
        "{}: {n} tasks; submit with `sbatch {}`, then `smartmig sweep --collect {d}`",
        script_path.display(),
        script_path.display()
    );
    Ok(())
}

fn result_path(dir: &Path, seed: u64) -> PathBuf {
    dir.join("results").join(format!("seed-{seed}.json"))
}

fn run_task(dir: &Path, task: usize) -> CliResult {
    let m = Manifest::read(dir)?;
    let Some(&seed) = m.seeds.get(task) else {
        return Err(CliError::input(anyhow!(
            "task {task}: the sweep in {} has only {} tasks",
            dir.display(),
            m.seeds.len()
        )));
    };
    let (sc, policies) = m.load()?;
    let day = compare_day(&sc, &policies, seed, None).map_err(CliError::input)?;
    let path = result_path(dir, seed);
    let json = serde_json::to_string(&day).map_err(CliError::failure)?;
    // Durably, so that a collection never reads half a file.
    smartmig_core::durable::write(&path, json.as_bytes()).map_err(CliError::failure)?;
    log::info!("task {task}: seed {seed} written to {}", path.display());
    Ok(())
}

/// Task numbers as Slurm writes array ranges: `0-3,7,9-196`.
fn ranges(tasks: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < tasks.len() {
        let mut j = i;
        while j + 1 < tasks.len() && tasks[j + 1] == tasks[j] + 1 {
            j += 1;
        }
        parts.push(if j == i {
            tasks[i].to_string()
        } else {
            format!("{}-{}", tasks[i], tasks[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

fn collect(dir: &Path, format: Format) -> CliResult {
    let m = Manifest::read(dir)?;
    let (sc, policies) = m.load()?;
    let mut days = Vec::with_capacity(m.seeds.len());
    let mut missing = Vec::new();
    for (task, &seed) in m.seeds.iter().enumerate() {
        let path = result_path(dir, seed);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.push(task);
                continue;
            }
            Err(e) => {
                return Err(CliError::failure(
                    anyhow!(e).context(format!("cannot read {}", path.display())),
                ))
            }
        };
        let day: Day = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a sweep result", path.display()))
            .map_err(CliError::input)?;
        let names: Vec<&str> = day.runs.iter().map(|r| r.policy.as_str()).collect();
        let want: Vec<&str> = policies.iter().map(|p| p.name.as_str()).collect();
        if day.seed != seed || day.runs.len() != policies.len() {
            return Err(CliError::input(anyhow!(
                "{}: holds seed {} with policies {names:?}, expected seed {seed} with {want:?}",
                path.display(),
                day.seed
            )));
        }
        days.push(day);
    }
    if !missing.is_empty() {
        let first = missing[0];
        return Err(CliError::failure(anyhow!(
            "{}: {} of {} tasks have no result (tasks {}); see {}/logs/task-{first}.out",
            dir.display(),
            missing.len(),
            m.seeds.len(),
            ranges(&missing),
            dir.display()
        )));
    }
    let described = smartmig_eval::compare::Days::Seeds(m.seeds.clone()).describe();
    let cmp = summarise(&sc, &policies, days, &described);
    match format {
        Format::Json => print_json(&cmp),
        Format::Table => {
            let best = sc
                .scenario
                .baselines
                .static_best
                .as_ref()
                .map(|l| super::cluster_layout_summary(&sc, &sc.layout_as_run(l)));
            print_comparison(&cmp, best.as_deref());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 17: `--collect` listed 197 task numbers one by one.
    #[test]
    fn missing_tasks_are_listed_as_ranges() {
        let missing: Vec<usize> = (3..200).filter(|&t| t != 7).collect();
        assert_eq!(ranges(&missing), "3-6,8-199");
        assert_eq!(ranges(&[0, 2, 4, 5]), "0,2,4-5");
        assert_eq!(ranges(&[]), "");
    }
}
