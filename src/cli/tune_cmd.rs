//! `smartmig tune-static | tune-periodic`: search the best static layout and the best
//! time-of-day schedule of a scenario, and write them where they are used.

use std::path::Path;

use anyhow::{anyhow, Context};
use clap::Args;

use super::daemon_limits::{daemon_layout, SiteLayouts};
use super::sim_cmd::{file_tuned, progress, ScenarioArgs, SeedArg, TraceArgs};
use super::{print_json, CliError, CliResult, Format};
use smartmig_core::config::{Config, RelayoutRules};
use smartmig_eval::compare::{
    compare as run_compare, guard, Days, GuardVerdict, LayoutSpec, Paired, PolicySpec, Tuned,
    GUARD_STANDARD_ERRORS, PERIODIC_BEST, STATIC_BEST,
};
use smartmig_eval::periodic::{tune_periodic_on, PeriodicTuneResult, DEFAULT_BLOCKS, DEFAULT_PASSES};
use smartmig_eval::tune::{tune_static_on, TuneResult};
use smartmig_eval::{EVAL_SEED_BASE, TRAIN_SEED_BASE, VALIDATION_SEED_BASE};
use smartmig_sim::scenario::{PeriodicSpec, ResolvedScenario};
use smartmig_sim::sched::Scheduler;
use smartmig_sim::workload::JobSet;

/// `tune-static`.
#[derive(Debug, Args)]
pub struct TuneArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// Training days: a count from seed 1 (default 16), or a range (`1..=16`).
    #[arg(long)]
    seeds: Option<SeedArg>,
    #[command(flatten)]
    trace: TraceArgs,
    /// Record the result as `baselines.static_best` in the scenario file.
    #[arg(long, requires = "scenario")]
    write: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// `tune-periodic`.
#[derive(Debug, Args)]
pub struct TunePeriodicArgs {
    #[command(flatten)]
    scenario: ScenarioArgs,
    /// Training days to search on: a count from seed 1 (default 16), or a range.
    #[arg(long)]
    seeds: Option<SeedArg>,
    /// Evaluation days for the report against static-best: a count from the first
    /// evaluation seed, or a range (with a trace: its later half, below).
    #[arg(long, default_value = "20")]
    eval_seeds: SeedArg,
    /// Validation days for the guard (never trained or evaluated on): a count from the
    /// first validation seed, or a range. The schedule is kept only if it beats
    /// static-best there by two standard errors; otherwise the static layout is written.
    /// With a trace the search runs on its earlier half of days and the guard and the
    /// report on the later half (on all of them, said so, below 4 days).
    #[arg(long, default_value = "16")]
    validation_seeds: SeedArg,
    #[command(flatten)]
    trace: TraceArgs,
    /// Equal blocks the day is cut into (6: every 4 h); must divide 1,440 minutes.
    #[arg(long, default_value_t = DEFAULT_BLOCKS)]
    blocks: u32,
    /// Most passes of coordinate descent over the blocks.
    #[arg(long, default_value_t = DEFAULT_PASSES)]
    passes: u32,
    /// Record the schedule as `baselines.periodic_best` in the scenario file.
    #[arg(long, requires = "scenario")]
    write: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// Refuses `--write` when the run's overrides or trace describe another world than the
/// scenario file: the file would then hold a result it does not reproduce.
fn check_write(args: &ScenarioArgs, trace: &TraceArgs, repartitions: bool) -> Result<(), CliError> {
    let sets = args.world_overrides(repartitions);
    let daemon: Vec<&String> = args
        .daemon_overrides()
        .iter()
        .filter(|s| sets.contains(s))
        .collect();
    if let (Some(path), false) = (&args.smartmig_toml, daemon.is_empty()) {
        let listed: Vec<&str> = daemon.iter().map(|s| s.as_str()).collect();
        return Err(CliError::input(anyhow!(
            "--write: {} runs smartmigd under other limits than the scenario file (--set {}), so the \
             file would hold a result it does not reproduce; put them in (a copy of) the file, or \
             leave out --write",
            path.display(),
            listed.join(" --set ")
        )));
    }
    if !sets.is_empty() {
        return Err(CliError::input(anyhow!(
            "--write: --set {} changes the scenario the file describes, so the file would hold a \
             result it does not reproduce; put the overrides in (a copy of) the file instead",
            sets.join(" --set ")
        )));
    }
    if trace.trace.is_some() {
        return Err(CliError::input(anyhow!(
            "--write: --trace replaces the file's workload; make a scenario whose workload is the trace instead"
        )));
    }
    Ok(())
}

/// Training days `tune-static` and `tune-periodic` search on by default, and `policy
/// average` tunes static-best on when the scenario file has none.
pub(crate) const TUNING_DAYS: u32 = 16;

/// The training days: a trace's days, or generated for the seeds (default: `default`
/// days from seed 1).
fn training_days(
    sc: &ResolvedScenario,
    seeds: Option<SeedArg>,
    default: u32,
    trace: &TraceArgs,
) -> Result<(Days, Vec<(u64, JobSet)>), CliError> {
    let days = trace.days(sc, seeds, SeedArg::Count(default), TRAIN_SEED_BASE)?;
    let jobs = days
        .seeds()
        .into_iter()
        .map(|s| days.jobs(sc, s).map(|j| (s, j.into_owned())))
        .collect::<Result<Vec<_>, _>>()
        .map_err(CliError::input)?;
    Ok((days, jobs))
}

/// Runs `tune-static`.
pub fn tune_static(a: TuneArgs) -> CliResult {
    let sc = a.scenario.load()?;
    if a.write {
        check_write(&a.scenario, &a.trace, false)?;
    }
    let (days, train) = training_days(&sc, a.seeds, TUNING_DAYS, &a.trace)?;
    let pb = progress(30, "tune static-best");
    let t = tune_static_on(&sc, train, &pb);
    pb.finish_and_clear();
    if a.write {
        if let Some(path) = &a.scenario.scenario {
            write_static_best(path, &t)?;
        }
    }
    match a.format {
        Format::Json => print_json(&t),
        Format::Table => {
            println!(
                "best static layout: {}",
                super::cluster_layout_summary(&sc, &t.layout)
            );
            println!(
                "ET vs static-cedf on {}: {:.3} (gain {:+.1}%); best uniform {} at {:.3}; {} layouts simulated",
                days.describe(),
                t.et,
                100.0 * (1.0 - t.et),
                t.best_uniform.0,
                t.best_uniform.1,
                t.evaluations
            );
            if a.write {
                println!("written to baselines.static_best");
            }
            // A mig-parted site names the layout by its mig-configs; on several GPU models
            // smartmigd reads a layout list model by model.
            if let Some(path) = &a.scenario.smartmig_toml {
                let site = a.scenario.site_layouts();
                if site.is_some() || sc.models.len() > 1 {
                    let layout = daemon_layout(&sc, &t.layout, site).map_err(|e| named(path, e))?;
                    let terms = if site.is_some() { "mig-configs" } else { "terms" };
                    // As it goes into FILE, ready to paste.
                    println!(
                        "in {}'s {terms}: static_layout = {}  # under [policy]",
                        path.display(),
                        names(&layout)
                    );
                }
            }
            Ok(())
        }
    }
}

/// Edits a TOML file in place, keeping its comments and layout.
fn edit_toml(path: &Path, edit: impl FnOnce(&mut toml_edit::DocumentMut)) -> CliResult {
    edit_toml_checked(path, edit, |_, _| Ok(()))
}

/// [`edit_toml`], writing only when `check(before, after)` accepts the edited text.
fn edit_toml_checked(
    path: &Path,
    edit: impl FnOnce(&mut toml_edit::DocumentMut),
    check: impl FnOnce(&str, &str) -> anyhow::Result<()>,
) -> CliResult {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {}", path.display()))
        .map_err(CliError::input)?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("cannot edit {}", path.display()))
        .map_err(CliError::input)?;
    edit(&mut doc);
    let edited = doc.to_string();
    check(&text, &edited).map_err(CliError::input)?;
    std::fs::write(path, edited)
        .with_context(|| format!("cannot write {}", path.display()))
        .map_err(CliError::failure)
}

fn names(layout: &[String]) -> toml_edit::Array {
    layout.iter().map(String::as_str).collect()
}

/// Sets `baselines.static_best` in a scenario file.
fn write_static_best(path: &Path, t: &TuneResult) -> CliResult {
    edit_toml(path, |doc| {
        if !doc.contains_table("baselines") {
            doc["baselines"] = toml_edit::table();
        }
        doc["baselines"]["static_best"] = toml_edit::value(names(&t.layout));
    })
}

/// Sets `baselines.periodic_best` in a scenario file: one inline table per line.
fn write_periodic_best(path: &Path, schedule: &[PeriodicSpec]) -> CliResult {
    edit_toml(path, |doc| {
        if !doc.contains_table("baselines") {
            doc["baselines"] = toml_edit::table();
        }
        let mut arr = toml_edit::Array::new();
        for e in schedule {
            let mut t = toml_edit::InlineTable::new();
            t.insert("at", e.at.as_str().into());
            t.insert("layout", toml_edit::Value::Array(names(&e.layout)));
            let mut v = toml_edit::Value::InlineTable(t);
            v.decor_mut().set_prefix("\n  ");
            arr.push_formatted(v);
        }
        arr.set_trailing("\n");
        arr.set_trailing_comma(true);
        doc["baselines"]["periodic_best"] = toml_edit::value(arr);
    })
}

/// Replaces `[[policy.periodic]]` in a smartmig.toml, with the rules it was searched under
/// as `policy.periodic_tuned_under` (smartmigd runs the static layout while its own differ).
/// A file that loaded before must load after (its GPUs' mig-configs, say, may not offer a
/// layout the scenario's catalogue does): else nothing is written.
fn write_policy_periodic(path: &Path, schedule: &[PeriodicSpec], rules: &RelayoutRules) -> CliResult {
    let loads =
        |text: &str| Config::parse(text, &path.display().to_string()).and_then(|c| c.resolve(path.parent()));
    let check = |before: &str, after: &str| match (loads(before), loads(after)) {
        (Ok(_), Err(e)) => Err(anyhow!(
            "{}: the schedule found does not load there, nothing written: {e}",
            path.display()
        )),
        _ => Ok(()),
    };
    edit_toml_checked(
        path,
        |doc| {
            if !doc.contains_table("policy") {
                doc["policy"] = toml_edit::table();
            }
            doc["policy"]["periodic_tuned_under"] = toml_edit::value(rules.to_string());
            let mut tables = toml_edit::ArrayOfTables::new();
            for e in schedule {
                let mut t = toml_edit::Table::new();
                t["at"] = toml_edit::value(e.at.as_str());
                t["layout"] = toml_edit::value(names(&e.layout));
                tables.push(t);
            }
            doc["policy"]["periodic"] = toml_edit::Item::ArrayOfTables(tables);
        },
        check,
    )
}

/// `schedule` as smartmig.toml reads it ([`daemon_layout`]): a site whose layouts are a
/// mig-parted file's (`site`) gets its mig-config names (the search ran over the
/// configurations they are), any other the catalogue's; on several GPU models each
/// model's layouts in turn.
fn daemon_schedule(
    sc: &ResolvedScenario,
    schedule: &[PeriodicSpec],
    site: Option<&SiteLayouts>,
) -> Result<Vec<PeriodicSpec>, String> {
    schedule
        .iter()
        .map(|e| {
            Ok(PeriodicSpec {
                at: e.at.clone(),
                layout: daemon_layout(sc, &e.layout, site)?,
            })
        })
        .collect()
}

/// An input error about `path`.
fn named(path: &Path, e: String) -> CliError {
    CliError::input(anyhow!("{}: {e}", path.display()))
}

/// The `[[policy.periodic]]` text of a schedule, as smartmigd reads it.
pub fn policy_periodic_toml(schedule: &[PeriodicSpec]) -> String {
    let mut out = String::new();
    for e in schedule {
        let layout: Vec<String> = e.layout.iter().map(|c| format!("\"{c}\"")).collect();
        out.push_str(&format!(
            "[[policy.periodic]]\nat = \"{}\"\nlayout = [{}]\n",
            e.at,
            layout.join(", ")
        ));
    }
    out
}

/// The report of `tune-periodic`: the search and the evaluation against static-best.
#[derive(Debug, serde::Serialize)]
struct PeriodicReport {
    /// What the search found on the training days.
    search: PeriodicTuneResult,
    /// The searched schedule against static-best on the validation days.
    guard: GuardVerdict,
    /// The schedule written and evaluated as periodic-best: the search's when the guard
    /// passed it, else static-best's layout all day.
    schedule: Vec<PeriodicSpec>,
    /// `static-best`'s layout: what the guard measures against, and the schedule when
    /// the guard refuses the search's.
    static_best: Vec<String>,
    /// Evaluation days.
    evaluation_days: String,
    /// Mean ET against static CEDF on the evaluation days: static-best, periodic-best.
    static_best_et: f64,
    periodic_best_et: f64,
    /// periodic-best against static-best, paired by day.
    vs_static_best: Option<Paired>,
    /// Mean re-layouts per evaluation day.
    repartitions: f64,
}

/// A trace's days split for `tune-periodic`: the search on the earlier half, the guard and
/// the report on the later half it never saw (a site's history has no other days to judge
/// a schedule on). A trace of fewer than 4 days has no 2 to hold out: the guard and the
/// report then run on the days searched, which is said. Generated days are left alone
/// (`None`: validation and evaluation seeds of their own).
fn hold_out(days: Days, train: Vec<(u64, JobSet)>) -> (Days, Vec<(u64, JobSet)>, Option<Days>) {
    let Days::Trace { name, days: all } = days else {
        return (days, train, None);
    };
    let n = all.len();
    let later = n / 2;
    if later < 2 {
        eprintln!(
            "warning: trace {name} has {n} days, too few to hold 2 out: the guard and the report \
             run on the days searched (in-sample)"
        );
        let days = Days::Trace { name, days: all };
        return (days.clone(), train, Some(days));
    }
    let first = n - later;
    let searched = Days::Trace {
        name: format!("{name} (days 1..={first} of {n})"),
        days: all[..first].to_vec(),
    };
    let held = Days::Trace {
        name: format!("{name} (days {}..={n} of {n}, held out)", first + 1),
        days: all[first..].to_vec(),
    };
    (searched, train.into_iter().take(first).collect(), Some(held))
}

/// Runs `tune-periodic`.
pub fn tune_periodic(a: TunePeriodicArgs) -> CliResult {
    let sc = a.scenario.load()?;
    if a.write {
        check_write(&a.scenario, &a.trace, true)?;
    }
    let (days, train) = training_days(&sc, a.seeds, TUNING_DAYS, &a.trace)?;
    let trace = matches!(days, Days::Trace { .. });
    let (days, train, held_out) = hold_out(days, train);
    let start = match file_tuned(&sc, &a.scenario, trace).static_best {
        Some((layout, None)) => layout,
        _ => {
            eprintln!(
                "static-best: tuning on {} first (the search starts from it)",
                days.describe()
            );
            let pb = progress(30, "tune static-best");
            let t = tune_static_on(&sc, train.clone(), &pb);
            pb.finish_and_clear();
            t.layout
        }
    };
    let pb = progress(u64::from(a.blocks * a.passes), "tune periodic-best");
    let t = tune_periodic_on(&sc, train, &start, a.blocks, a.passes, &pb).map_err(CliError::input)?;
    pb.finish_and_clear();
    let candidate = PolicySpec::new(
        PERIODIC_BEST,
        Scheduler::Cedf,
        LayoutSpec::Periodic(t.schedule.clone()),
    );
    // A trace's held-out days serve the guard and the report; generated days have a set each.
    let (validation, eval) = match held_out {
        Some(days) => (None, days),
        None => (
            Some(Days::Seeds(a.validation_seeds.seeds(VALIDATION_SEED_BASE))),
            Days::Seeds(a.eval_seeds.seeds(EVAL_SEED_BASE)),
        ),
    };
    let verdict =
        guard(&sc, candidate, &start, validation.as_ref().unwrap_or(&eval)).map_err(CliError::input)?;
    // Refused, the schedule is the layout the guard measured against, not the search's
    // start: where whole nodes cannot hold static-best's mix, that start is only its
    // nearest share.
    let schedule = if verdict.passed {
        t.schedule.clone()
    } else {
        vec![PeriodicSpec {
            at: "00:00".into(),
            layout: start.clone(),
        }]
    };
    let tuned = Tuned {
        static_best: Some((start.clone(), None)),
        periodic_best: Some((schedule.clone(), None)),
    };
    let policies: Vec<_> = smartmig_eval::compare::baselines(&sc, &tuned)
        .into_iter()
        .filter(|p| {
            [smartmig_eval::compare::REFERENCE, STATIC_BEST, PERIODIC_BEST].contains(&p.name.as_str())
        })
        .collect();
    let pb = progress(eval.seeds().len() as u64, "evaluate");
    let cmp = run_compare(&sc, &policies, &eval, None, false, &pb).map_err(CliError::input)?;
    pb.finish_and_clear();
    let row = |name: &str| cmp.policies.iter().find(|p| p.name == name);
    let report = PeriodicReport {
        guard: verdict,
        static_best: start,
        evaluation_days: eval.describe(),
        static_best_et: row(STATIC_BEST).map_or(f64::NAN, |p| p.et),
        periodic_best_et: row(PERIODIC_BEST).map_or(f64::NAN, |p| p.et),
        vs_static_best: row(PERIODIC_BEST).and_then(|p| p.vs_static_best),
        repartitions: row(PERIODIC_BEST).map_or(f64::NAN, |p| p.repartitions),
        search: t,
        schedule,
    };
    // FILE's form first: a schedule smartmigd cannot read is written nowhere.
    let for_file = match &a.scenario.smartmig_toml {
        Some(path) => Some((
            path,
            daemon_schedule(&sc, &report.schedule, a.scenario.site_layouts()).map_err(|e| named(path, e))?,
        )),
        None => None,
    };
    if a.write {
        if let Some(path) = &a.scenario.scenario {
            write_periodic_best(path, &report.schedule)?;
        }
    }
    let mut written = None;
    if let Some((path, schedule)) = for_file {
        let rules = super::daemon_limits::searched_rules(&sc.scenario.repartition);
        write_policy_periodic(path, &schedule, &rules)?;
        written = Some(schedule);
    }
    match a.format {
        Format::Json => print_json(&report),
        Format::Table => {
            print_periodic(&sc, &a, &days, &report, written.as_deref());
            Ok(())
        }
    }
}

/// The search's pattern in words: `8 GPUs`, or per model `4 a100-40gb, 2 a30-24gb GPUs`.
fn pattern_words(sc: &ResolvedScenario, gpus: &[usize]) -> String {
    match gpus {
        [one] => format!("{one} GPUs"),
        _ => {
            let per: Vec<String> = gpus
                .iter()
                .zip(&sc.models)
                .map(|(n, m)| format!("{n} {}", m.model.key))
                .collect();
            format!("{} GPUs", per.join(", "))
        }
    }
}

/// The table of `tune-periodic`; `written`: the schedule as written into smartmig.toml.
fn print_periodic(
    sc: &ResolvedScenario,
    a: &TunePeriodicArgs,
    days: &Days,
    r: &PeriodicReport,
    written: Option<&[PeriodicSpec]>,
) {
    let s = &r.search;
    let pattern = pattern_words(sc, &s.pattern_gpus);
    println!(
        "best time-of-day schedule ({} blocks of {} min, {} semantics, a pattern of {pattern}) on {}:",
        a.blocks,
        1440 / a.blocks,
        sc.scenario.repartition.semantics.as_str(),
        days.describe()
    );
    for e in &s.schedule {
        println!(
            "  from {}  {}",
            e.at,
            super::cluster_layout_summary(sc, &e.layout)
        );
    }
    let start = if s.start_exact {
        "static-best".to_string()
    } else {
        format!(
            "its start ({}, static-best's nearest share of {pattern})",
            super::cluster_layout_summary(sc, &s.start),
        )
    };
    println!(
        "training days: ET {:.3} vs static-cedf, {start} {:.3} ({:+.1}%); {:.1} re-layout batches/day; {} schedules simulated in {} pass{}",
        s.et,
        s.start_et,
        100.0 * (1.0 - s.et / s.start_et),
        s.relayout_batches,
        s.evaluations,
        s.passes,
        if s.passes == 1 { "" } else { "es" }
    );
    let g = &r.guard;
    if g.passed {
        println!(
            "guard: beats static-best on the validation days by {} (> {GUARD_STANDARD_ERRORS} standard errors): kept",
            g.vs_static_best.describe()
        );
    } else {
        println!(
            "guard: {} against static-best on the validation days, {}: the schedule is static-best's layout all day ({})",
            g.vs_static_best.describe(),
            if g.vs_static_best.days < 2 {
                "fewer than 2 days, no standard error".to_string()
            } else {
                format!("not {GUARD_STANDARD_ERRORS} standard errors above 0")
            },
            super::cluster_layout_summary(sc, &sc.layout_as_run(&r.static_best))
        );
    }
    println!(
        "evaluation days ({}): periodic-best ET {:.3}, static-best ({}) {:.3}; periodic-best vs static-best {}; {:.1} repartitions/day",
        r.evaluation_days,
        r.periodic_best_et,
        super::cluster_layout_summary(sc, &sc.layout_as_run(&r.static_best)),
        r.static_best_et,
        r.vs_static_best.map_or("-".into(), |p| p.describe()),
        r.repartitions
    );
    if a.write {
        println!("written to baselines.periodic_best");
    }
    match &a.scenario.smartmig_toml {
        Some(p) => println!(
            "written to {} as [[policy.periodic]]{}; set policy.kind = \"periodic\" there to use it",
            p.display(),
            // A mig-parted site's file names the layouts by its mig-configs; on several
            // models smartmigd reads each model's entries in turn.
            written
                .filter(|w| *w != r.schedule.as_slice())
                .map(|w| {
                    let blocks: Vec<String> = w
                        .iter()
                        .map(|e| format!("from {} {}", e.at, super::layout_summary(&e.layout)))
                        .collect();
                    let how = if a.scenario.site_layouts().is_some() {
                        "in its mig-configs' names"
                    } else {
                        "model by model"
                    };
                    format!(" {how} ({})", blocks.join("; "))
                })
                .unwrap_or_default()
        ),
        None => {
            // Searched under the scenario's rules, which may not be the site's: a schedule
            // searched where requeued jobs resume loses where they start over. The record
            // lets smartmigd refuse it under other rules.
            let rules = super::daemon_limits::searched_rules(&sc.scenario.repartition);
            match daemon_schedule(sc, &r.schedule, None) {
                Ok(schedule) => println!(
                    "for smartmig.toml (policy.kind = \"periodic\"; searched under this scenario's rules, \
                     not your smartmigd's: --smartmig-toml FILE searches under FILE's and writes it there; \
                     with periodic_tuned_under in [policy], smartmigd runs the schedule only under the same rules):\n\
                     periodic_tuned_under = \"{rules}\"  # under [policy]\n{}",
                    policy_periodic_toml(&schedule)
                ),
                Err(e) => println!("not for smartmig.toml: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_written_for_smartmigd_parses_as_its_periodic_policy() {
        let schedule = vec![
            PeriodicSpec {
                at: "00:00".into(),
                layout: vec!["c1".into(), "c2".into()],
            },
            PeriodicSpec {
                at: "08:00".into(),
                layout: vec!["c2".into(), "c6".into()],
            },
        ];
        let text = format!(
            "version = 1\n[policy]\nkind = \"periodic\"\n{}",
            policy_periodic_toml(&schedule)
        );
        let cfg = smartmig_core::config::Config::parse(&text, "t.toml").unwrap();
        let p = &cfg.policy.periodic;
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].at.get_ref(), "08:00");
        let layout: Vec<&str> = p[1].layout.iter().map(|c| c.get_ref().as_str()).collect();
        assert_eq!(layout, ["c2", "c6"]);
    }

    #[test]
    fn the_files_written_keep_comments_and_read_back() {
        let dir = std::env::temp_dir().join(format!("smartmig-tune-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let scenario = dir.join("s.toml");
        std::fs::write(&scenario, smartmig_sim::scenario::REFERENCE).unwrap();
        let schedule = vec![
            PeriodicSpec {
                at: "00:00".into(),
                layout: vec!["c1".into()],
            },
            PeriodicSpec {
                at: "04:00".into(),
                layout: vec!["c2".into(), "c6".into()],
            },
        ];
        write_periodic_best(&scenario, &schedule).unwrap();
        let sc = smartmig_sim::scenario::Scenario::load(&scenario, &[]).unwrap();
        let best = sc.scenario.baselines.periodic_best.unwrap();
        assert_eq!(best.len(), 2);
        assert_eq!(best[1].layout, ["c2", "c6"]);
        assert!(std::fs::read_to_string(&scenario)
            .unwrap()
            .contains("# The paper's reference static layout"));
        let conf = dir.join("smartmig.toml");
        let site =
            "version = 1\n# site comment\n[policy]\nkind = \"periodic\"\n[controller]\nmode = \"drain\"\n";
        std::fs::write(&conf, site).unwrap();
        let parse = |text: &str| smartmig_core::config::Config::parse(text, "smartmig.toml").unwrap();
        let rules = RelayoutRules::of(&parse(site)).unwrap();
        write_policy_periodic(&conf, &schedule, &rules).unwrap();
        let text = std::fs::read_to_string(&conf).unwrap();
        let cfg = parse(&text);
        assert_eq!(cfg.policy.periodic.len(), 2);
        assert!(text.contains("# site comment"));
        // The rules read back as written, and smartmigd under them runs the schedule.
        assert_eq!(cfg.policy.periodic_tuned_under, Some(rules.to_string()));
        assert_eq!(smartmig_core::config::periodic_mismatch(&cfg), None);
        std::fs::remove_dir_all(&dir).ok();
    }
}
