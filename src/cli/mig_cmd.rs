//! `smartmig mig ...`: inspect the MIG geometry.

use clap::{Args, Subcommand};
use serde::Serialize;
use smartmig_core::mig::{
    maximal_layouts, resolve_configurations, Catalogue, Driver, GpuModel, InstanceRecord, Kind, Layout, Plan,
};

use super::{print_json, table, CliError, CliResult, Format};

/// MIG commands.
#[derive(Debug, Subcommand)]
pub enum MigCommand {
    /// List the GPU models of the catalogue.
    Models {
        /// Output format.
        #[arg(long, value_enum, default_value_t)]
        format: Format,
    },
    /// List the named configurations (c1..c12, the controller's action space) of each GPU
    /// model: slice sizes, the placement NVML gets, and whether the driver allows it.
    Configs(ConfigsArgs),
    /// List every maximal layout of a GPU model.
    Layouts(LayoutsArgs),
    /// Plan the driver calls from one layout to another.
    Plan(PlanArgs),
    /// Read every local GPU's MIG mode, profiles and placements through NVML (read-only)
    /// and compare them with the catalogue; exits 1 when a GPU differs.
    Probe(ProbeArgs),
}

/// `mig probe`.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Probe a simulated node (a smartmigd simulated-backend directory) instead of NVML.
    #[arg(long, value_name = "DIR")]
    pub simulated: Option<std::path::PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// `mig configs`.
#[derive(Debug, Args)]
pub struct ConfigsArgs {
    /// GPU model (key, NVML name or alias); default: every model of the catalogue.
    #[arg(long)]
    pub gpu: Option<String>,
    /// Apply the pre-R510 driver rule (no 4g with 3g).
    #[arg(long)]
    pub pre_r510: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// `mig layouts`.
#[derive(Debug, Args)]
pub struct LayoutsArgs {
    /// GPU model (key, NVML name or alias).
    #[arg(long)]
    pub gpu: String,
    /// Apply the pre-R510 driver rule (no 4g with 3g).
    #[arg(long)]
    pub pre_r510: bool,
    /// Enumerate over every profile, not only the base ones (1g, 2g, 3g, 4g, 7g).
    #[arg(long)]
    pub all_profiles: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// `mig plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// GPU model.
    #[arg(long)]
    pub gpu: String,
    /// Current layout: a configuration (c1..c12) or instances (`4g.20gb@0,3g.20gb@4`).
    #[arg(long)]
    pub from: String,
    /// Target layout, same forms.
    #[arg(long)]
    pub to: String,
    /// Instances in use (`3g.20gb@4,...`): the plan reports whether it touches them.
    #[arg(long)]
    pub busy: Option<String>,
    /// Apply the pre-R510 driver rule.
    #[arg(long)]
    pub pre_r510: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Serialize)]
struct LayoutJson {
    instances: Vec<InstanceRecord>,
}

#[derive(Serialize)]
struct PlanJson {
    gpu: String,
    keep: Vec<InstanceRecord>,
    destroy: Vec<InstanceRecord>,
    create: Vec<InstanceRecord>,
    steps: Vec<String>,
    touches_busy: Vec<InstanceRecord>,
}

fn driver(pre_r510: bool) -> Driver {
    if pre_r510 {
        Driver::PreR510
    } else {
        Driver::R510
    }
}

/// Runs a mig command.
pub fn run(cmd: MigCommand) -> CliResult {
    let cat = Catalogue::embedded();
    match cmd {
        MigCommand::Models { format } => models(&cat, format),
        MigCommand::Configs(a) => configs(&cat, a),
        MigCommand::Layouts(a) => {
            let model = cat.model(&a.gpu).map_err(CliError::input)?;
            let kinds: &[Kind] = if a.all_profiles { &Kind::ALL } else { &Kind::BASE };
            let layouts = maximal_layouts(model, driver(a.pre_r510), kinds);
            match a.format {
                Format::Json => print_json(
                    &layouts
                        .iter()
                        .map(|l| LayoutJson {
                            instances: l.to_records(model),
                        })
                        .collect::<Vec<_>>(),
                ),
                Format::Table => {
                    let rows: Vec<Vec<String>> = layouts
                        .iter()
                        .enumerate()
                        .map(|(i, l)| {
                            let sizes: Vec<String> = l.slice_sizes(model).iter().map(u8::to_string).collect();
                            vec![(i + 1).to_string(), sizes.join("+"), l.display(model).to_string()]
                        })
                        .collect();
                    print!("{}", table(&["#", "slices", "layout"], &rows));
                    println!(
                        "{} maximal layouts of {} ({:?} driver rules)",
                        layouts.len(),
                        model.key,
                        driver(a.pre_r510)
                    );
                    Ok(())
                }
            }
        }
        MigCommand::Plan(a) => plan(&cat, a),
        MigCommand::Probe(a) => probe(&cat, a),
    }
}

#[derive(Serialize)]
struct ProbeJson {
    index: u32,
    uuid: String,
    name: String,
    model: Option<String>,
    mig_enabled: bool,
    profiles: Vec<ProbeProfileJson>,
    differences: Vec<String>,
}

#[derive(Serialize)]
struct ProbeProfileJson {
    nvml_id: u32,
    name: Option<String>,
    compute: u32,
    max_count: u32,
    memory_mb: u64,
    starts: Vec<u8>,
}

fn probe(cat: &Catalogue, a: ProbeArgs) -> CliResult {
    use smartmig_gpu::GpuBackend;
    let backend: Box<dyn GpuBackend> = match &a.simulated {
        Some(dir) => Box::new(smartmig_gpu::simulated::Simulated::open(dir).map_err(CliError::input)?),
        None => Box::new(smartmig_gpu::nvml::Nvml::open().map_err(CliError::failure)?),
    };
    let mut gpus = Vec::new();
    for g in backend.gpus().map_err(CliError::failure)? {
        let model = g.model.as_deref().and_then(|k| cat.model(k).ok());
        let (profiles, differences) = match model {
            Some(m) => {
                let probed = backend.probe(g.index, m).map_err(CliError::failure)?;
                let diff = if g.mig_enabled {
                    smartmig_gpu::compare(m, &probed)
                } else {
                    Vec::new()
                };
                (probed, diff)
            }
            None => (Vec::new(), vec![format!("`{}` is not a catalogue model", g.name)]),
        };
        gpus.push(ProbeJson {
            index: g.index,
            uuid: g.uuid,
            name: g.name,
            model: g.model,
            mig_enabled: g.mig_enabled,
            profiles: profiles
                .iter()
                .map(|p| ProbeProfileJson {
                    nvml_id: p.nvml_id,
                    name: model.and_then(|m| {
                        m.profiles
                            .iter()
                            .find(|c| c.nvml_id == p.nvml_id)
                            .map(|c| c.name.clone())
                    }),
                    compute: p.compute,
                    max_count: p.max_count,
                    memory_mb: p.memory_mb,
                    starts: p.starts.clone(),
                })
                .collect(),
            differences,
        });
    }
    let differing = gpus.iter().filter(|g| !g.differences.is_empty()).count();
    match a.format {
        Format::Json => print_json(&gpus)?,
        Format::Table => {
            for g in &gpus {
                println!(
                    "GPU {} {} ({}): {}, MIG {}",
                    g.index,
                    g.name,
                    g.uuid,
                    g.model.as_deref().unwrap_or("not in the catalogue"),
                    if g.mig_enabled { "on" } else { "off" }
                );
                let rows: Vec<Vec<String>> = g
                    .profiles
                    .iter()
                    .map(|p| {
                        let starts: Vec<String> = p.starts.iter().map(u8::to_string).collect();
                        vec![
                            p.nvml_id.to_string(),
                            p.name.clone().unwrap_or_else(|| "?".into()),
                            p.compute.to_string(),
                            p.max_count.to_string(),
                            p.memory_mb.to_string(),
                            starts.join(","),
                        ]
                    })
                    .collect();
                if !rows.is_empty() {
                    print!(
                        "{}",
                        table(&["nvml id", "profile", "slices", "max", "MB", "starts"], &rows)
                    );
                }
                if g.differences.is_empty() {
                    println!("matches the catalogue");
                } else {
                    for d in &g.differences {
                        println!("differs: {d}");
                    }
                }
            }
        }
    }
    if differing > 0 {
        return Err(CliError::failure(anyhow::anyhow!(
            "{differing} GPU(s) differ from the catalogue"
        )));
    }
    Ok(())
}

#[derive(Serialize)]
struct ConfigJson {
    gpu: String,
    name: String,
    slices: Vec<u8>,
    instances: Vec<InstanceRecord>,
    available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    unavailable: Option<String>,
}

/// `mig configs`: every named configuration resolved on each model asked for.
fn configs(cat: &Catalogue, a: ConfigsArgs) -> CliResult {
    let models: Vec<&GpuModel> = match &a.gpu {
        Some(name) => vec![cat.model(name).map_err(CliError::input)?],
        None => cat.models.iter().collect(),
    };
    let drv = driver(a.pre_r510);
    let mut list = Vec::new();
    for m in &models {
        for c in resolve_configurations(cat, m, drv).map_err(CliError::input)? {
            list.push(ConfigJson {
                gpu: m.key.clone(),
                slices: c.sizes.clone(),
                instances: c.layout.to_records(m),
                available: c.is_available(),
                unavailable: c.unavailable.clone(),
                name: c.name,
            });
        }
    }
    if a.format == Format::Json {
        return print_json(&list);
    }
    for (i, m) in models.iter().enumerate() {
        if i > 0 {
            println!();
        }
        let rows: Vec<Vec<String>> = list
            .iter()
            .filter(|c| c.gpu == m.key)
            .map(|c| {
                let sizes: Vec<String> = c.slices.iter().map(u8::to_string).collect();
                let placement: Vec<String> = c
                    .instances
                    .iter()
                    .map(|r| format!("{}@{}", r.profile, r.start))
                    .collect();
                vec![
                    c.name.clone(),
                    sizes.join("+"),
                    placement.join(" "),
                    c.unavailable
                        .clone()
                        .map_or_else(|| "yes".into(), |why| format!("no: {why}")),
                ]
            })
            .collect();
        println!("{} ({:?} driver rules):", m.key, drv);
        print!(
            "{}",
            table(
                &[
                    "config",
                    "slices",
                    "placement (profile@memory slice)",
                    "available"
                ],
                &rows
            )
        );
    }
    Ok(())
}

fn models(cat: &Catalogue, format: Format) -> CliResult {
    #[derive(Serialize)]
    struct ModelJson<'a> {
        key: &'a str,
        name: &'a str,
        memory_gb: f64,
        power_w: [f64; 8],
        profiles: Vec<&'a str>,
    }
    let list: Vec<ModelJson> = cat
        .models
        .iter()
        .map(|m| ModelJson {
            key: &m.key,
            name: &m.name,
            memory_gb: m.memory_gb,
            power_w: m.power_w,
            profiles: m.profiles.iter().map(|p| p.name.as_str()).collect(),
        })
        .collect();
    match format {
        Format::Json => print_json(&list),
        Format::Table => {
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|m| {
                    vec![
                        m.key.to_string(),
                        m.name.to_string(),
                        format!("{}", m.memory_gb),
                        format!("{}-{}", m.power_w[0], m.power_w[7]),
                        m.profiles.join(" "),
                    ]
                })
                .collect();
            print!("{}", table(&["key", "nvml name", "GB", "W", "profiles"], &rows));
            Ok(())
        }
    }
}

/// A configuration name or an instance list; `flag` names the option in errors.
fn layout_arg(
    cat: &Catalogue,
    model: &GpuModel,
    drv: Driver,
    flag: &str,
    text: &str,
) -> Result<Layout, CliError> {
    let bad = |e: &dyn std::fmt::Display| CliError::input(anyhow::anyhow!("{flag} {text}: {e}"));
    // Every instance list has `@start`; a word without one can only be a configuration name.
    if !text.contains('@') {
        let idx = cat.configuration_index(text).map_err(|e| bad(&e))?;
        let configs = resolve_configurations(cat, model, drv).map_err(CliError::input)?;
        return Ok(configs[idx].layout.clone());
    }
    Layout::parse(model, text).map_err(|e| bad(&e))
}

fn plan(cat: &Catalogue, a: PlanArgs) -> CliResult {
    let model = cat.model(&a.gpu).map_err(CliError::input)?;
    let drv = driver(a.pre_r510);
    let from = layout_arg(cat, model, drv, "--from", &a.from)?;
    let to = layout_arg(cat, model, drv, "--to", &a.to)?;
    let busy = match &a.busy {
        Some(b) => Layout::parse(model, b)
            .map_err(CliError::input)?
            .instances()
            .to_vec(),
        None => Vec::new(),
    };
    if let Some(b) = busy.iter().find(|b| !from.contains(b)) {
        return Err(CliError::input(anyhow::anyhow!(
            "busy instance {} is not in the --from layout",
            smartmig_core::mig::layout::display_instance(model, b)
        )));
    }
    let p = Plan::between(model, drv, &from, &to).map_err(CliError::input)?;
    let touched: Vec<_> = p.touched(&busy).copied().collect();
    match a.format {
        Format::Json => print_json(&PlanJson {
            gpu: model.key.clone(),
            keep: Layout::new(p.keep.clone()).to_records(model),
            destroy: Layout::new(p.destroy.clone()).to_records(model),
            create: Layout::new(p.create.clone()).to_records(model),
            steps: p.steps.iter().map(|s| s.describe(model)).collect(),
            touches_busy: Layout::new(touched.clone()).to_records(model),
        })?,
        Format::Table => {
            print!("{}", p.display(model));
            if !busy.is_empty() && touched.is_empty() {
                println!("busy instances untouched");
            }
        }
    }
    if touched.is_empty() {
        Ok(())
    } else {
        // The driver would refuse to destroy an instance in use: the plan cannot run now.
        Err(CliError::failure(anyhow::anyhow!(
            "the plan destroys busy instance(s) {}; it can run only once they are idle",
            Layout::new(touched).display(model)
        )))
    }
}
