//! `smartmig mig ...`: inspect the MIG geometry.

use clap::{Args, Subcommand};
use serde::Serialize;
use smartmig_core::mig::{
    maximal_layouts, resolve_configurations, Catalogue, Driver, GpuModel, InstanceRecord, Kind, Layout, Plan,
};

use smartmig_core::config::{Config, Resolved};
use smartmig_core::mig::mig_parted::{self, Devices, ExportSpec, MigPartedFile};
use smartmig_core::status::Status;

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
    /// Read a mig-parted config file: the layout each mig-config gives each model, checked
    /// against the model's placements.
    Import(ImportArgs),
    /// Write a mig-parted config file: the central role's desired layout of every GPU
    /// (one mig-config per node), or with --action-space the layouts each configured model
    /// chooses from.
    Export(ExportArgs),
}

/// `mig import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The mig-parted file (`version: v1`, `mig-configs:`).
    pub file: std::path::PathBuf,
    /// Only this GPU model (default: every catalogue model).
    #[arg(long)]
    pub gpu: Option<String>,
    /// Apply the pre-R510 driver rule.
    #[arg(long)]
    pub pre_r510: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// `mig export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// smartmig.toml (its models, and the central role's state_dir).
    #[arg(long, default_value = smartmig_core::config::DEFAULT_PATH)]
    pub config: std::path::PathBuf,
    /// Write each configured model's layouts to choose from instead of the desired ones.
    #[arg(long)]
    pub action_space: bool,
    /// Where to write (default: standard output).
    #[arg(long, short)]
    pub output: Option<std::path::PathBuf>,
}

/// `mig probe`.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Probe a simulated node (a smartmigd simulated-backend directory) instead of NVML.
    #[arg(long, value_name = "DIR")]
    pub simulated: Option<std::path::PathBuf>,
    /// The NVML library to load (as `[node] nvml_library`).
    #[arg(long, value_name = "PATH", default_value = smartmig_gpu::nvml::LIBRARY)]
    pub nvml_library: std::path::PathBuf,
    /// Root of the driver's files (as `[node] nvidia_root`).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub nvidia_root: std::path::PathBuf,
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
        MigCommand::Import(a) => import(&cat, a),
        MigCommand::Export(a) => export(a),
    }
}

fn import(cat: &Catalogue, a: ImportArgs) -> CliResult {
    #[derive(Serialize)]
    struct Imported {
        config: String,
        gpu: String,
        instances: Vec<InstanceRecord>,
    }
    let origin = a.file.display().to_string();
    let text = std::fs::read_to_string(&a.file)
        .map_err(|e| CliError::input(anyhow::anyhow!("cannot read {origin}: {e}")))?;
    let file = MigPartedFile::parse(&text, &origin).map_err(CliError::input)?;
    let models: Vec<&GpuModel> = match &a.gpu {
        Some(g) => vec![cat.model(g).map_err(CliError::input)?],
        None => cat.models.iter().collect(),
    };
    let mut out = Vec::new();
    for m in models {
        for (name, layout) in file
            .layouts_for(m, driver(a.pre_r510), &origin)
            .map_err(CliError::input)?
        {
            out.push((name, m, layout));
        }
    }
    match a.format {
        Format::Json => print_json(
            &out.iter()
                .map(|(name, m, l)| Imported {
                    config: name.clone(),
                    gpu: m.key.clone(),
                    instances: l.to_records(m),
                })
                .collect::<Vec<_>>(),
        ),
        Format::Table => {
            let rows: Vec<Vec<String>> = out
                .iter()
                .map(|(name, m, l)| vec![name.clone(), m.key.clone(), l.display(m).to_string()])
                .collect();
            print!("{}", table(&["mig-config", "gpu", "layout"], &rows));
            println!("{} layouts from {} mig-configs", out.len(), file.configs.len());
            Ok(())
        }
    }
}

fn export(a: ExportArgs) -> CliResult {
    let resolved = Config::from_file(&a.config)
        .and_then(|c| c.resolve(a.config.parent()))
        .map_err(CliError::input)?;
    let configs = if a.action_space {
        action_space(&resolved)
    } else {
        let status = Status::read(&resolved.config.controller.state_dir).map_err(CliError::input)?;
        desired(&resolved, &status).map_err(CliError::input)?
    };
    let text = mig_parted::write(&configs);
    match &a.output {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| CliError::failure(anyhow::anyhow!("cannot write {}: {e}", path.display()))),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

/// Each configured model's layouts as mig-configs named after them; a name several models
/// share is one mig-config with a spec per model (told apart by `device-filter`).
fn action_space(r: &Resolved) -> Vec<(String, Vec<ExportSpec<'_>>)> {
    let mut out: Vec<(String, Vec<ExportSpec>)> = Vec::new();
    for m in &r.models {
        for c in &m.configurations {
            let spec = ExportSpec {
                model: &m.model,
                devices: Devices::All,
                layout: c.layout.clone(),
            };
            match out.iter_mut().find(|(n, _)| *n == c.name) {
                Some((_, specs)) => specs.push(spec),
                None => out.push((c.name.clone(), vec![spec])),
            }
        }
    }
    out
}

/// Every managed GPU's desired layout, from the central role's status: the configuration
/// its last decision chose (applied or to apply), else the layout it has; one mig-config
/// per node, a spec per GPU.
fn desired<'a>(r: &'a Resolved, status: &Status) -> anyhow::Result<Vec<(String, Vec<ExportSpec<'a>>)>> {
    let mut out: Vec<(String, Vec<ExportSpec>)> = Vec::new();
    for g in &status.gpus {
        let (node, index) = g
            .gpu
            .rsplit_once('/')
            .and_then(|(n, i)| Some((n, i.parse::<u32>().ok()?)))
            .ok_or_else(|| anyhow::anyhow!("status names GPU `{}`, not NODE/INDEX", g.gpu))?;
        let m = r.models.iter().find(|m| m.model.key == g.model).ok_or_else(|| {
            anyhow::anyhow!("GPU {} is a {}, which gpu.models does not list", g.gpu, g.model)
        })?;
        let chosen = status
            .decisions
            .iter()
            .rev()
            .find(|d| d.gpu == g.gpu && ["apply", "applied", "would apply"].contains(&d.action.as_str()))
            .and_then(|d| m.configurations.iter().find(|c| c.name == d.to));
        let layout = match chosen {
            Some(c) => c.layout.clone(),
            None => Layout::parse(&m.model, &g.layout)?,
        };
        let spec = ExportSpec {
            model: &m.model,
            devices: Devices::Indices(vec![index]),
            layout,
        };
        match out.iter_mut().find(|(n, _)| n == node) {
            Some((_, specs)) => specs.push(spec),
            None => out.push((node.to_string(), vec![spec])),
        }
    }
    Ok(out)
}

#[derive(Serialize)]
struct ProbeJson {
    index: u32,
    uuid: String,
    name: String,
    model: Option<String>,
    mig_enabled: bool,
    mig_pending: bool,
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
        None => Box::new(
            smartmig_gpu::nvml::Nvml::open_with(&smartmig_gpu::nvml::NvmlOptions {
                library: a.nvml_library.clone().into_os_string(),
                root: a.nvidia_root.clone(),
            })
            .map_err(CliError::failure)?,
        ),
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
            mig_pending: g.mig_pending,
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
                let on_off = |b: bool| if b { "on" } else { "off" };
                println!(
                    "GPU {} {} ({}): {}, MIG {}{}",
                    g.index,
                    g.name,
                    g.uuid,
                    g.model.as_deref().unwrap_or("not in the catalogue"),
                    on_off(g.mig_enabled),
                    if g.mig_pending == g.mig_enabled {
                        String::new()
                    } else {
                        format!(" ({} after the next GPU reset)", on_off(g.mig_pending))
                    }
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
        compute_slices: u8,
        memory_slices: u8,
        power_w: &'a [f64],
        power_source: &'a str,
        profiles: Vec<&'a str>,
    }
    let list: Vec<ModelJson> = cat
        .models
        .iter()
        .map(|m| ModelJson {
            key: &m.key,
            name: &m.name,
            memory_gb: m.memory_gb,
            compute_slices: m.compute_slices,
            memory_slices: m.memory_slices,
            power_w: &m.power_w,
            power_source: &m.power_source,
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
                        format!("{}/{}", m.compute_slices, m.memory_slices),
                        format!("{}-{}", m.power_w[0], m.power_w[m.power_w.len() - 1]),
                        m.profiles.join(" "),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(&["key", "nvml name", "GB", "slices", "W", "profiles"], &rows)
            );
            Ok(())
        }
    }
}

/// A configuration name or an instance list (with or without placements); `flag` names
/// the option in errors.
fn layout_arg(
    cat: &Catalogue,
    model: &GpuModel,
    drv: Driver,
    flag: &str,
    text: &str,
) -> Result<Layout, CliError> {
    let configs = resolve_configurations(cat, model, drv).map_err(CliError::input)?;
    let bad = |e: &dyn std::fmt::Display| CliError::input(anyhow::anyhow!("{flag} {text}: {e}"));
    let word = text.trim();
    if let Some(c) = configs.iter().find(|c| c.name.eq_ignore_ascii_case(word)) {
        return Ok(c.layout.clone());
    }
    // One word that is no profile can only be meant as a configuration name: say which exist.
    let one_word = !word.contains(|c: char| c == '@' || c == '+' || c == ',' || c.is_whitespace());
    if one_word && model.profile_by_name(word).is_none() {
        let known: Vec<&str> = configs.iter().map(|c| c.name.as_str()).collect();
        return Err(bad(&format!(
            "unknown configuration `{word}` (known for {}: {}; or an instance list such as `3g.20gb+2g.10gb`)",
            model.key,
            known.join(", ")
        )));
    }
    Layout::read(model, drv, text).map_err(|e| bad(&e))
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
