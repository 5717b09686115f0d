//! `smartmig policy ...`: inspect policy files, provision ONNX Runtime, write an example
//! policy, and measure the decision path (`smartmig bench --policy`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use smartmig_core::mig::{resolve_configurations, Catalogue, Driver};

use super::sim_cmd::{file_tuned, mean_field_start, progress, ScenarioArgs, GUARD_DAYS};
use super::tune_cmd::TUNING_DAYS;
use super::{print_json, table, CliError, CliResult, Format};
use anyhow::Context;
use smartmig_eval::compare::{guard, Days, LayoutSpec, PolicySpec, SMART_MIG};
use smartmig_eval::tune::tune_static_on;
use smartmig_eval::{TRAIN_SEED_BASE, VALIDATION_SEED_BASE};
use smartmig_policy::{
    ensemble, onnx_reader, onnx_writer, provision, requeue_limit_text, Activation, FeatureLayout,
    OnnxRuntime, PolicyMetadata, PolicyNetwork, PolicyRuntime, SamplingConfig, Semantics, Trainings,
    TransitionTable,
};
use smartmig_sim::sched::Scheduler;
use smartmig_sim::workload;

/// Policy commands.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Show a policy file's contract and metadata, and a sample decision on zero features.
    Inspect(InspectArgs),
    /// Download the pinned ONNX Runtime library from PyPI into the per-user cache, or with
    /// `--system` into /usr/lib/smartmig for every user and smartmigd (once).
    FetchRuntime(FetchArgs),
    /// Write an untrained policy (random weights) with the contract of a GPU model.
    Example(ExampleArgs),
    /// Average policy files of one contract (e.g. one recipe trained at several seeds) into
    /// one whose logits are the mean of their trainings' (an average counts as the trainings
    /// it holds), and run the deployment guard on it.
    Average(AverageArgs),
}

/// `policy inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The ONNX policy file.
    pub file: PathBuf,
    /// libonnxruntime.so to load (default: $ORT_DYLIB_PATH, then the cache).
    #[arg(long)]
    pub onnxruntime: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// `policy fetch-runtime`.
#[derive(Debug, Args)]
pub struct FetchArgs {
    /// Install into /usr/lib/smartmig (as root), where smartmigd's units, which cannot see
    /// home directories, and every user find it.
    #[arg(long)]
    pub system: bool,
}

/// `policy example`.
#[derive(Debug, Args)]
pub struct ExampleArgs {
    /// Where to write the ONNX file.
    pub out: PathBuf,
    /// GPU model key of the catalogue.
    #[arg(long, default_value = "a100-40gb")]
    pub gpu: String,
    /// Hidden layer widths, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "64,64")]
    pub hidden: Vec<usize>,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// `policy average`.
#[derive(Debug, Args)]
pub struct AverageArgs {
    /// The policy files to average (two or more, of one contract, semantics and depth).
    #[arg(required = true, num_args = 2..)]
    pub members: Vec<PathBuf>,
    /// Where to write the average (its guard verdict in its metadata, as `train` writes).
    #[arg(long)]
    pub out: PathBuf,
    /// The scenario on whose validation days the guard judges the average.
    #[command(flatten)]
    pub scenario: ScenarioArgs,
}

/// Runs a policy command.
pub fn run(cmd: PolicyCommand) -> CliResult {
    match cmd {
        PolicyCommand::Inspect(a) => inspect(a),
        PolicyCommand::FetchRuntime(a) => fetch(a.system),
        PolicyCommand::Example(a) => example(a),
        PolicyCommand::Average(a) => average(a),
    }
}

fn fetch(system: bool) -> CliResult {
    let dir = if system {
        PathBuf::from(provision::SYSTEM_DIR)
    } else {
        provision::cache_dir().map_err(CliError::failure)?
    };
    let path = download_runtime(&dir, "")?;
    // Prove the file is a working ONNX Runtime before saying so.
    let rt = OnnxRuntime::init(Some(&path)).map_err(CliError::failure)?;
    println!(
        "ONNX Runtime {} ready: {}",
        provision::ORT_VERSION,
        rt.library().display()
    );
    Ok(())
}

/// The library in `dir`, downloaded there first when absent: said first, with pip's
/// progress on standard error; `why` ends the announcement (`" for the smart-mig row"`).
fn download_runtime(dir: &Path, why: &str) -> Result<PathBuf, CliError> {
    if dir.join(provision::library_file_name()).is_file() {
        return provision::fetch_runtime_to(dir, provision::Progress::Quiet).map_err(CliError::failure);
    }
    eprintln!(
        "smartmig: downloading ONNX Runtime {} (the onnxruntime wheel from PyPI, about {} MB) into {}{why}; once only",
        provision::ORT_VERSION,
        provision::WHEEL_MB,
        dir.display()
    );
    provision::fetch_runtime_to(dir, provision::Progress::Stderr).map_err(CliError::failure)
}

/// Makes sure a learned policy can run: when ONNX Runtime is configured nowhere and not
/// cached yet, downloads it now (announced, with progress) rather than silently inside a
/// run. A configured library that is missing is left for the run to report.
pub(crate) fn ensure_runtime() -> CliResult {
    match OnnxRuntime::locate(None) {
        Err(smartmig_policy::RuntimeError::NotFound { .. })
            if std::env::var_os(smartmig_policy::runtime::ORT_DYLIB_ENV).is_none_or(|v| v.is_empty()) =>
        {
            let dir = provision::cache_dir().map_err(CliError::failure)?;
            download_runtime(
                &dir,
                " to run the learned policy (`smartmig policy fetch-runtime` does this ahead of time)",
            )
            .map(|_| ())
        }
        _ => Ok(()),
    }
}

/// The metadata of a model the paper's way for a catalogue GPU model: its configurations,
/// the simulator's feature layout (what `compare` and `smartmigd` expect), 5-event
/// decisions, top-3, preempt semantics.
fn paper_metadata(gpu: &str, scenario: &str, seed: u64) -> Result<PolicyMetadata, CliError> {
    let cat = Catalogue::embedded();
    let model = cat.model(gpu).map_err(CliError::input)?;
    let configurations: Vec<String> = resolve_configurations(&cat, model, Driver::R510)
        .map_err(CliError::input)?
        .into_iter()
        .map(|c| c.name)
        .collect();
    Ok(PolicyMetadata {
        training_scenario: scenario.into(),
        training_seed: seed,
        ..PolicyMetadata::new(
            model.key.clone(),
            configurations,
            Semantics::Preempt,
            smartmig_policy::Requeued::Resume,
        )
    })
}

fn example(a: ExampleArgs) -> CliResult {
    let meta = paper_metadata(&a.gpu, "untrained (random weights)", a.seed)?;
    let dims: Vec<usize> = std::iter::once(meta.input_dim())
        .chain(a.hidden.iter().copied())
        .chain([meta.k() * meta.k()])
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    let mut net = PolicyNetwork::init(&dims, Activation::Tanh, &mut rng);
    // Random biases too, so that rows differ even on an all-zero feature vector.
    for l in &mut net.layers {
        l.b.iter_mut().for_each(|b| *b = rng.random_range(-1.0..1.0));
    }
    onnx_writer::write(&a.out, &net, &meta).map_err(CliError::input)?;
    println!(
        "{}: untrained policy {:?} for {}",
        a.out.display(),
        dims,
        meta.gpu_model
    );
    Ok(())
}

/// How scenario repartition `r` differs from what policy `meta` was validated under, in
/// what its contract records and smartmigd acts on (semantics, padding, and for preempt what
/// a requeued job keeps and how long it may have run), with the `--set` that matches it.
fn scenario_differs(meta: &PolicyMetadata, r: &smartmig_sim::scenario::RepartitionSpec) -> Option<String> {
    if r.semantics != meta.semantics {
        return Some(format!(
            "the members were trained with {} semantics, the scenario has {} (`--set \
             repartition.semantics=\"{}\"`)",
            meta.semantics.as_str(),
            r.semantics.as_str(),
            meta.semantics.as_str()
        ));
    }
    if r.index_rule.padded() != meta.padding {
        let (members, scenario, rule) = if meta.padding {
            ("with", "has none", "padded-assigned")
        } else {
            ("without", "has them", "fixed")
        };
        return Some(format!(
            "the members were validated {members} padding records, the scenario {scenario} \
             (`--set repartition.index_rule=\"{rule}\"`)"
        ));
    }
    if meta.semantics == Semantics::Preempt && r.requeued != meta.requeued {
        return Some(format!(
            "the members were validated where requeued jobs {}, the scenario's {} (`--set \
             repartition.requeued=\"{}\"`)",
            meta.requeued.as_str(),
            r.requeued.as_str(),
            meta.requeued.as_str()
        ));
    }
    let cap = r.requeue_max_run_s.filter(|_| r.semantics == Semantics::Preempt);
    if cap != meta.requeue_max_run_s {
        let set = meta.requeue_max_run_s.map_or(
            "a scenario without repartition.requeue_max_run_s".to_string(),
            |s| format!("`--set repartition.requeue_max_run_s={s}`"),
        );
        return Some(format!(
            "the members were validated with requeue_max_run_s {}, the scenario has {} ({set})",
            requeue_limit_text(meta.requeue_max_run_s),
            requeue_limit_text(cap)
        ));
    }
    None
}

/// `policy average`: reads every member, builds the average, guards it on the validation
/// days against static-best (tuned first on the training days when the scenario does not
/// name one for its overrides) and writes it with the verdict.
fn average(a: AverageArgs) -> CliResult {
    let members = a
        .members
        .iter()
        .map(|path| {
            let bytes = std::fs::read(path)
                .with_context(|| format!("cannot read policy file {}", path.display()))
                .map_err(CliError::input)?;
            onnx_reader::read_policy(path, &bytes).map_err(CliError::input)
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    let (net, mut meta) = ensemble::average(&members).map_err(|e| {
        let files: Vec<String> = a
            .members
            .iter()
            .enumerate()
            .map(|(i, p)| format!("member {i} = {}", p.display()))
            .collect();
        CliError::input(anyhow::anyhow!(
            "cannot average the policies: {e} ({})",
            files.join(", ")
        ))
    })?;
    let sc = a.scenario.load()?;
    if let Some(why) = scenario_differs(&meta, &sc.scenario.repartition) {
        return Err(CliError::input(anyhow::anyhow!(
            "cannot guard the average on this scenario: {why}; the verdict would not be the \
             one its contract describes"
        )));
    }
    let static_layout = match file_tuned(&sc, &a.scenario, false).static_best {
        Some((layout, None)) => layout,
        _ => {
            eprintln!("static-best: tuning on the training days first (the guard compares with it)");
            let days = (0..u64::from(TUNING_DAYS))
                .map(|d| {
                    Ok((
                        TRAIN_SEED_BASE + d,
                        workload::from_scenario(&sc, TRAIN_SEED_BASE + d, false)?,
                    ))
                })
                .collect::<Result<Vec<_>, workload::TraceError>>()
                .map_err(CliError::input)?;
            let pb = progress(30, "tune static-best");
            let layout = tune_static_on(&sc, days, &pb).layout;
            pb.finish_and_clear();
            layout
        }
    };
    ensure_runtime()?;
    // The guard runs the average from a file: an unguarded one, beside the output and
    // removed afterwards, so that `--out` only ever holds a guarded policy.
    let dir = match a.out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let unguarded = tempfile::Builder::new()
        .prefix(".smartmig-average-")
        .suffix(".onnx")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a file in {}", dir.display()))
        .map_err(CliError::failure)?;
    onnx_writer::write(unguarded.path(), &net, &meta).map_err(CliError::failure)?;
    let candidate = PolicySpec::new(
        SMART_MIG,
        Scheduler::Cedf,
        LayoutSpec::MeanField {
            model: unguarded.path().to_path_buf(),
            initial: mean_field_start(&sc),
            stay_threshold: 0.0,
        },
    );
    let seeds = (0..GUARD_DAYS).map(|d| VALIDATION_SEED_BASE + d).collect();
    let pb = progress(1, "guard");
    let verdict = guard(&sc, candidate, &static_layout, &Days::Seeds(seeds)).map_err(CliError::input)?;
    pb.finish_and_clear();
    meta.guard = Some(verdict.describe());
    onnx_writer::write(&a.out, &net, &meta).map_err(CliError::failure)?;
    println!(
        "wrote {}: the mean of the logits of {} ({}); guard {}",
        a.out.display(),
        meta.averaged_from
            .as_ref()
            .map_or_else(String::new, ToString::to_string),
        a.members
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        verdict.describe()
    );
    Ok(())
}

/// Which configurations the GPU model can take (all, when the catalogue lacks the model).
fn availability(meta: &PolicyMetadata) -> Vec<bool> {
    let cat = Catalogue::embedded();
    let Ok(model) = cat.model(&meta.gpu_model) else {
        return vec![true; meta.k()];
    };
    match resolve_configurations(&cat, model, Driver::R510) {
        Ok(cs) => meta
            .configurations
            .iter()
            .map(|name| cs.iter().any(|c| &c.name == name && c.is_available()))
            .collect(),
        Err(_) => vec![true; meta.k()],
    }
}

#[derive(Serialize)]
struct RowReport {
    from: String,
    next: Vec<(String, f64)>,
    stay: f64,
}

#[derive(Serialize)]
struct InspectReport {
    file: String,
    contract_version: u32,
    gpu_model: String,
    input: String,
    output: String,
    configurations: Vec<String>,
    feature_layout: FeatureLayout,
    decision_events: u32,
    decision_interval_s: f64,
    top_k: u32,
    training_scenario: String,
    training_seed: u64,
    /// The trainings an average holds, as the file stores them (scenario and seed each).
    #[serde(skip_serializing_if = "Option::is_none")]
    averaged_from: Option<Trainings>,
    semantics: &'static str,
    draw: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    guard: Option<String>,
    requeued: &'static str,
    padding: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    requeue_max_run_s: Option<f64>,
    onnxruntime: String,
    zero_features_decision: Vec<RowReport>,
}

fn inspect(a: InspectArgs) -> CliResult {
    let bytes = std::fs::read(&a.file).map_err(|e| {
        CliError::input(anyhow::Error::new(e).context(format!("cannot read {}", a.file.display())))
    })?;
    // The metadata is read without ONNX Runtime, so a broken file is reported even where
    // the library is missing; ONNX Runtime then checks it against itself.
    let meta = read_metadata(&a.file, &bytes)?;
    if a.onnxruntime.is_none() {
        ensure_runtime()?;
    }
    let rt = OnnxRuntime::init_or_fetch(a.onnxruntime.as_deref()).map_err(CliError::failure)?;
    let mut policy = PolicyRuntime::from_bytes(&rt, &bytes, &meta, &a.file.display().to_string())
        .map_err(CliError::input)?;
    let logits = policy
        .infer(&vec![0.0; meta.input_dim()])
        .map_err(CliError::failure)?;
    let cfg = SamplingConfig {
        top_k: meta.top_k as usize,
        stay_threshold: 0.0,
    };
    let table_rows = TransitionTable::new(&logits, &availability(&meta), cfg).map_err(CliError::failure)?;
    let rows: Vec<RowReport> = (0..meta.k())
        .filter_map(|c| table_rows.row(c).ok().map(|r| (c, r)))
        .map(|(c, r)| RowReport {
            from: meta.configurations[c].clone(),
            next: r
                .candidates
                .iter()
                .map(|&(n, p)| (meta.configurations[usize::from(n)].clone(), p))
                .collect(),
            stay: r.stay,
        })
        .collect();
    let report = InspectReport {
        file: a.file.display().to_string(),
        contract_version: meta.contract_version,
        gpu_model: meta.gpu_model.clone(),
        input: format!(
            "{} f32 [batch, {}]",
            smartmig_policy::INPUT_NAME,
            meta.input_dim()
        ),
        output: format!(
            "{} f32 [batch, {k}, {k}]",
            smartmig_policy::OUTPUT_NAME,
            k = meta.k()
        ),
        configurations: meta.configurations.clone(),
        feature_layout: meta.feature_layout.clone(),
        decision_events: meta.decision.events,
        decision_interval_s: meta.decision.seconds,
        top_k: meta.top_k,
        training_scenario: meta.training_scenario.clone(),
        training_seed: meta.training_seed,
        averaged_from: meta.averaged_from.clone(),
        semantics: meta.semantics.as_str(),
        draw: meta.draw.as_str(),
        guard: meta.guard.clone(),
        requeued: meta.requeued.as_str(),
        padding: meta.padding,
        requeue_max_run_s: meta.requeue_max_run_s,
        onnxruntime: rt.library().display().to_string(),
        zero_features_decision: rows,
    };
    match a.format {
        Format::Json => print_json(&report),
        Format::Table => {
            print_report(&report);
            Ok(())
        }
    }
}

pub(crate) fn read_metadata(path: &Path, bytes: &[u8]) -> Result<PolicyMetadata, CliError> {
    smartmig_policy::onnx_proto::read_metadata(path, bytes).map_err(CliError::input)
}

fn print_report(r: &InspectReport) {
    let l = &r.feature_layout;
    println!(
        "{}: smartmig policy, contract version {}",
        r.file, r.contract_version
    );
    println!("  GPU model        {}", r.gpu_model);
    println!("  input            {}", r.input);
    println!("  output           {}", r.output);
    println!("  configurations   {}", r.configurations.join(","));
    println!(
        "  features         {} shares, duration bins {:?}, deadline bins {:?} (min), split by slice {:?}, time of day {:?}",
        l.configurations, l.duration_edges_min, l.deadline_edges_min, l.slice_sizes, l.time_of_day
    );
    println!(
        "  decisions        every {} events / {} s, top-{}, {} semantics",
        r.decision_events, r.decision_interval_s, r.top_k, r.semantics
    );
    println!("  draw             {}", r.draw);
    if r.padding {
        println!(
            "  padding          validated with padding records (smartmigd runs it only with padding = true)"
        );
    }
    if let Some(cap) = r.requeue_max_run_s {
        println!(
            "  requeue limit    validated requeueing only jobs that ran ≤ {cap} s (where jobs start over, smartmigd runs it only with requeue_max_run_s ≤ {cap})"
        );
    }
    if let Some(g) = &r.guard {
        println!("  guard            {g}");
    }
    match &r.averaged_from {
        Some(members) => println!("  average of       {members}, requeued jobs {}", r.requeued),
        None => println!(
            "  trained on       {} (seed {}), requeued jobs {}",
            r.training_scenario, r.training_seed, r.requeued
        ),
    }
    println!("  ONNX Runtime     {}", r.onnxruntime);
    println!(
        "\nDecision on an all-zero feature vector (top-{}, renormalised):",
        r.top_k
    );
    let cells: Vec<Vec<String>> = r
        .zero_features_decision
        .iter()
        .map(|row| {
            vec![
                row.from.clone(),
                row.next
                    .iter()
                    .map(|(c, p)| format!("{c} {p:.3}"))
                    .collect::<Vec<_>>()
                    .join("  "),
                format!("{:.3}", row.stay),
            ]
        })
        .collect();
    print!("{}", table(&["from", "next (probability)", "p(stay)"], &cells));
}

/// Measures one decision at batch 1 (D = 34, H = 64×2, K = 12) and sampling 10,000 GPUs.
pub(crate) fn bench(onnxruntime: Option<&Path>, reps: u32) -> CliResult {
    let meta = paper_metadata("a100-40gb", "bench", 1)?;
    let (d, k) = (meta.input_dim(), meta.k());
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let net = PolicyNetwork::init(&[d, 64, 64, k * k], Activation::Tanh, &mut rng);
    let bytes = onnx_writer::to_bytes(&net, &meta).map_err(CliError::failure)?;
    if onnxruntime.is_none() {
        ensure_runtime()?;
    }
    let rt = OnnxRuntime::init_or_fetch(onnxruntime).map_err(CliError::failure)?;

    let n = reps.max(1) as usize;
    let mut loads = Vec::new();
    let mut policy = None;
    for _ in 0..5 {
        let t = Instant::now();
        policy = Some(PolicyRuntime::from_bytes(&rt, &bytes, &meta, "bench").map_err(CliError::failure)?);
        loads.push(t.elapsed().as_secs_f64());
    }
    let mut policy = policy.ok_or_else(|| CliError::failure(anyhow::anyhow!("no session")))?;
    let x: Vec<f32> = (0..d).map(|_| rng.random_range(0.0..1.0)).collect();
    let mut logits = Vec::new();
    let ort_times = time_each(n, || {
        logits = policy.infer(&x).map_err(CliError::failure)?;
        Ok(())
    })?;
    let rust_times = time_each(n, || net.forward(&x, 1).map(|_| ()).map_err(CliError::failure))?;
    let available = availability(&meta);
    let cfg = SamplingConfig::default();
    let mut table_rows = None;
    let table_times = time_each(n, || {
        table_rows = Some(TransitionTable::new(&logits, &available, cfg).map_err(CliError::failure)?);
        Ok(())
    })?;
    let t = table_rows.ok_or_else(|| CliError::failure(anyhow::anyhow!("no table")))?;
    let gpus: Vec<u16> = (0..10_000).map(|i| (i % k) as u16).collect();
    let mut srng = ChaCha8Rng::seed_from_u64(2);
    let sample_times = time_each(n.min(1000), || {
        t.sample_gpus(&gpus, &mut srng)
            .map(|_| ())
            .map_err(CliError::failure)
    })?;
    let rows = [
        ("session load (from memory)", &loads),
        ("inference, batch 1 (ONNX Runtime)", &ort_times),
        ("forward pass, batch 1 (pure Rust)", &rust_times),
        ("transition table (mask, softmax, top-3)", &table_times),
        ("sample 10,000 GPUs", &sample_times),
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(name, times)| {
            let mut s = times.to_vec();
            s.sort_by(f64::total_cmp);
            let q = |f: f64| s[((s.len() - 1) as f64 * f).round() as usize];
            vec![
                name.to_string(),
                s.len().to_string(),
                fmt_time(q(0.5)),
                fmt_time(q(0.99)),
            ]
        })
        .collect();
    println!(
        "policy D = {d}, hidden 64×2, K = {k}; ONNX Runtime {}",
        rt.library().display()
    );
    print!("{}", table(&["step", "runs", "median", "p99"], &cells));
    Ok(())
}

fn time_each(n: usize, mut f: impl FnMut() -> CliResult) -> Result<Vec<f64>, CliError> {
    for _ in 0..n.min(100) {
        f()?; // warm-up: first runs allocate and fault pages in
    }
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f().map(|()| t.elapsed().as_secs_f64())
        })
        .collect()
}

fn fmt_time(s: f64) -> String {
    if s < 1e-3 {
        format!("{:.1} µs", s * 1e6)
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::EXIT_INPUT;

    #[test]
    fn an_average_of_policies_held_to_a_requeue_limit_is_guarded_only_under_that_limit() {
        let restart = smartmig_policy::Requeued::Restart;
        let meta = PolicyMetadata {
            requeue_max_run_s: Some(60.0),
            ..PolicyMetadata::new("a100-40gb", vec!["c1".into()], Semantics::Preempt, restart)
        };
        let spec = |cap: Option<f64>| smartmig_sim::scenario::RepartitionSpec {
            semantics: Semantics::Preempt,
            requeued: restart,
            requeue_max_run_s: cap,
            ..Default::default()
        };
        assert_eq!(scenario_differs(&meta, &spec(Some(60.0))), None);
        let why = scenario_differs(&meta, &spec(None)).unwrap_or_default();
        assert!(
            why.contains("requeue_max_run_s 60 s, the scenario has none")
                && why.contains("--set repartition.requeue_max_run_s=60"),
            "{why}"
        );
        let unlimited = PolicyMetadata {
            requeue_max_run_s: None,
            ..meta
        };
        let why = scenario_differs(&unlimited, &spec(Some(60.0))).unwrap_or_default();
        assert!(why.contains("without repartition.requeue_max_run_s"), "{why}");
    }

    #[test]
    fn average_writes_a_guarded_wider_policy_and_names_the_member_that_differs() {
        let dir = tempfile::tempdir().unwrap();
        let member = |name: &str, gpu: &str, seed: u64| {
            let out = dir.path().join(name);
            example(ExampleArgs {
                out: out.clone(),
                gpu: gpu.into(),
                hidden: vec![8],
                seed,
            })
            .unwrap();
            out
        };
        let (a, b) = (member("a.onnx", "a100-40gb", 3), member("b.onnx", "a100-40gb", 4));
        let out = dir.path().join("avg.onnx");
        let args = |members: Vec<PathBuf>| AverageArgs {
            members,
            out: out.clone(),
            scenario: ScenarioArgs::with_sets(None, Vec::new()),
        };
        average(args(vec![a.clone(), b.clone()])).unwrap();
        let bytes = std::fs::read(&out).unwrap();
        let (net, meta) = onnx_reader::read_policy(&out, &bytes).unwrap();
        // Both members' hidden units side by side, one shared output.
        assert_eq!(net.layers[0].out_dim, 16);
        assert_eq!(net.layers[1].out_dim, 144);
        let guard = meta.guard.expect("the average carries its guard verdict");
        assert!(guard.contains("over static-best on validation days"), "{guard}");
        assert_eq!(
            meta.averaged_from.as_ref().map(ToString::to_string).as_deref(),
            Some("2 trainings of untrained (random weights): seeds 3, 4")
        );
        // Only the output is left: the unguarded file the guard ran is gone.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");

        let a30 = member("c.onnx", "a30-24gb", 5);
        let err = average(args(vec![a, a30.clone()])).unwrap_err();
        assert_eq!(err.code(), EXIT_INPUT);
        let msg = err.message();
        assert!(msg.contains("member 1 has another contract"), "{msg}");
        assert!(msg.contains(&format!("member 1 = {}", a30.display())), "{msg}");
    }

    #[test]
    fn example_then_inspect_works_and_broken_input_is_exit_3() {
        let dir = std::env::temp_dir().join(format!("smartmig-policy-cmd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("p.onnx");
        let args = |gpu: &str| ExampleArgs {
            out: out.clone(),
            gpu: gpu.into(),
            hidden: vec![8],
            seed: 3,
        };
        let inspect_args = || InspectArgs {
            file: out.clone(),
            onnxruntime: None,
            format: Format::Json,
        };
        example(args("a100-40gb")).unwrap();
        let bytes = std::fs::read(&out).unwrap();
        let meta = read_metadata(&out, &bytes).unwrap();
        assert_eq!(meta.gpu_model, "a100-40gb");
        assert_eq!(meta.k(), 12);
        inspect(inspect_args()).unwrap();

        assert_eq!(example(args("no-such-gpu")).unwrap_err().code(), EXIT_INPUT);
        std::fs::write(&out, &bytes[..bytes.len() / 3]).unwrap();
        let err = inspect(inspect_args()).unwrap_err();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(err.code(), EXIT_INPUT);
        assert!(
            err.message().contains("is not an ONNX model"),
            "{}",
            err.message()
        );
    }
}
