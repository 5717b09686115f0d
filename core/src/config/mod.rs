//! `smartmig.toml`: strict parsing (no I/O but reading the file) and resolving (loading
//! the catalogue, checking cross-field rules) as two separate steps.

mod controller;
mod de;
pub mod hostlist;
pub mod node;
mod rules;
pub mod window;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::error::{line_col, toml_error, SourceError};
use crate::mig::mig_parted::MigPartedFile;
use crate::mig::{
    read_entry, resolve_configurations, Catalogue, Configuration, Driver, GpuModel, LayoutEntry,
};
use crate::routing::RoutingConfig;

pub use controller::{CentralConfig, RelayoutKind, Requeued};
pub use de::{non_negative, positive, seconds, seconds_or_zero, MAX_SECONDS};
pub use rules::{periodic_mismatch, RelayoutRules};

/// The configuration format version this build reads.
pub const CONFIG_VERSION: u32 = 1;

/// Where a config lives when nothing else is said.
pub const DEFAULT_PATH: &str = "/etc/smartmig/smartmig.toml";

/// A configuration problem: where it is and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A key or value is wrong, at a place in the file.
    #[error(transparent)]
    Source(#[from] SourceError),
}

/// The parsed, not yet resolved, configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Format version; must be [`CONFIG_VERSION`].
    pub version: Spanned<u32>,
    /// GPU models and driver.
    #[serde(default)]
    pub gpu: GpuConfig,
    /// Repartition policy.
    #[serde(default)]
    pub policy: PolicyConfig,
    /// The controller daemon.
    #[serde(default)]
    pub controller: ControllerConfig,
    /// The job_submit plugin's routing.
    #[serde(default)]
    pub routing: RoutingConfig,
    /// The smartmigd node agent.
    #[serde(default)]
    pub node: node::NodeConfig,
    /// The file the config came from (set by the loader).
    #[serde(skip)]
    pub origin: String,
    /// The file's text, kept to turn spans into line numbers.
    #[serde(skip)]
    text: String,
}

/// `[gpu]`: which GPU models the cluster has, under which driver rules.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuConfig {
    /// GPU models in the cluster (catalogue key, NVML name or alias).
    #[serde(default = "default_models")]
    pub models: Vec<Spanned<String>>,
    /// Driver generation rules.
    #[serde(default)]
    pub driver: Driver,
    /// Extra catalogue file adding or overriding models (relative to the config file).
    #[serde(default)]
    pub catalogue: Option<Spanned<PathBuf>>,
    /// A mig-parted config file whose mig-configs are the layouts the controller chooses
    /// from, instead of the catalogue's configurations (relative to the config file).
    #[serde(default)]
    pub mig_parted: Option<Spanned<PathBuf>>,
}

impl Default for GpuConfig {
    fn default() -> Self {
        GpuConfig {
            models: default_models(),
            driver: Driver::R510,
            catalogue: None,
            mig_parted: None,
        }
    }
}

fn default_models() -> Vec<Spanned<String>> {
    vec![Spanned::new(0..0, "a100-40gb".to_string())]
}

/// The repartition policy kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// Never repartition; every GPU stays as it is.
    None,
    /// Keep `static_layout`.
    Static,
    /// Switch layouts at times of day (`periodic`).
    Periodic,
    /// The learned mean-field policy.
    MeanField,
}

impl PolicyKind {
    /// The spelling in smartmig.toml (`mean-field`).
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::None => "none",
            PolicyKind::Static => "static",
            PolicyKind::Periodic => "periodic",
            PolicyKind::MeanField => "mean-field",
        }
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[policy]`: how GPUs are repartitioned.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Which policy runs.
    #[serde(default = "default_kind")]
    pub kind: PolicyKind,
    /// Directory holding the `<gpu-key>-<semantics>.onnx` policies.
    #[serde(default = "default_models_dir")]
    pub models_dir: PathBuf,
    /// Seconds between decisions.
    #[serde(default = "default_interval", deserialize_with = "seconds")]
    pub decision_interval_s: f64,
    /// Decide also after this many job arrivals and completions.
    #[serde(default = "default_events")]
    pub decision_events: u32,
    /// Keep the k most likely next configurations of each row.
    #[serde(default = "default_top_k")]
    pub top_k: u32,
    /// Weight of energy against tardiness (`a` in ET).
    #[serde(default = "default_energy_weight", deserialize_with = "non_negative")]
    pub energy_weight: f64,
    /// Change a GPU's configuration only if the chosen one is this much more likely than staying.
    #[serde(default, deserialize_with = "non_negative")]
    pub stay_threshold: f64,
    /// Static layout, and fallback for a learned policy its file refuses: layouts
    /// (configuration names or instance lists) cycled over each model's GPUs, each model
    /// taking the entries that fit it.
    #[serde(default = "default_static")]
    pub static_layout: Vec<Spanned<String>>,
    /// Periodic schedule: layouts by time of day.
    #[serde(default)]
    pub periodic: Vec<PeriodicEntry>,
    /// The rules (`RelayoutRules`) `periodic` was searched under, written by `smartmig
    /// tune-periodic`; while smartmigd's differ it runs `static_layout` instead.
    #[serde(default)]
    pub periodic_tuned_under: Option<String>,
}

/// One entry of a periodic schedule.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeriodicEntry {
    /// Time of day `HH:MM` from which the layout applies.
    pub at: Spanned<String>,
    /// Layouts cycled over each model's GPUs, as in `static_layout`.
    pub layout: Vec<Spanned<String>>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            kind: default_kind(),
            models_dir: default_models_dir(),
            decision_interval_s: default_interval(),
            decision_events: default_events(),
            top_k: default_top_k(),
            energy_weight: default_energy_weight(),
            stay_threshold: 0.0,
            static_layout: default_static(),
            periodic: Vec::new(),
            periodic_tuned_under: None,
        }
    }
}

fn default_kind() -> PolicyKind {
    PolicyKind::MeanField
}
fn default_models_dir() -> PathBuf {
    PathBuf::from("/usr/share/smartmig/onnx")
}
fn default_interval() -> f64 {
    60.0
}
fn default_events() -> u32 {
    5
}
fn default_top_k() -> u32 {
    3
}
fn default_energy_weight() -> f64 {
    0.5
}
fn default_static() -> Vec<Spanned<String>> {
    vec![Spanned::new(0..0, "c1".to_string())]
}

/// How the controller applies new layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Decide and report; change nothing.
    DryRun,
    /// A GPU changes only when the instances it must destroy are idle (no job stops).
    Drain,
    /// Requeue jobs on instances that must change (admin opt-in).
    Preempt,
}

impl Mode {
    /// The spelling in smartmig.toml (`dry-run`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::DryRun => "dry-run",
            Mode::Drain => "drain",
            Mode::Preempt => "preempt",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[controller]`: the smartmigd daemon.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerConfig {
    /// How layouts change.
    #[serde(default = "default_mode")]
    pub mode: Mode,
    /// Seconds one re-layout takes end to end (drain semantics).
    #[serde(default = "default_reconfigure", deserialize_with = "seconds_or_zero")]
    pub reconfigure_time_s: f64,
    /// Snapshot file the plugin reads.
    #[serde(default = "default_snapshot")]
    pub snapshot_path: PathBuf,
    /// State and journal directory.
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// Prometheus metrics address; empty disables.
    #[serde(default = "default_metrics")]
    pub metrics_listen: String,
    /// Path of libonnxruntime.so; empty means ORT_DYLIB_PATH, then discovery.
    #[serde(default)]
    pub onnxruntime: Option<PathBuf>,
    /// The central role.
    #[serde(default)]
    pub central: CentralConfig,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            mode: default_mode(),
            reconfigure_time_s: default_reconfigure(),
            snapshot_path: default_snapshot(),
            state_dir: default_state_dir(),
            metrics_listen: default_metrics(),
            onnxruntime: None,
            central: CentralConfig::default(),
        }
    }
}

/// A fresh install only reports what it would do (`smartmig status`) until the admin
/// sets `mode = "drain"`.
fn default_mode() -> Mode {
    Mode::DryRun
}
fn default_reconfigure() -> f64 {
    4.0
}
fn default_snapshot() -> PathBuf {
    PathBuf::from("/run/smartmig/snapshot.json")
}
fn default_state_dir() -> PathBuf {
    PathBuf::from("/var/lib/smartmig")
}
fn default_metrics() -> String {
    "127.0.0.1:9817".to_string()
}

/// A configuration with its catalogue loaded and every cross-field rule checked.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The parsed file.
    pub config: Config,
    /// The catalogue, with the site's additions.
    pub catalogue: Catalogue,
    /// The cluster's GPU models with their configurations, in `gpu.models` order.
    pub models: Vec<ResolvedModel>,
}

/// One GPU model of the cluster, ready to use.
#[derive(Debug, Clone)]
pub struct ResolvedModel {
    /// The model.
    pub model: GpuModel,
    /// The layouts the controller chooses among: the action space (the catalogue's
    /// configurations for the model, or the mig-configs of `[gpu] mig_parted`), then, for
    /// the static and periodic policies, the other layouts their entries name.
    pub configurations: Vec<Configuration>,
    /// The static layout as configuration indices.
    pub static_layout: Vec<usize>,
    /// Each `[[policy.periodic]]` entry's layout as configuration indices.
    pub periodic: Vec<Vec<usize>>,
}

impl Config {
    /// Reads and parses a file (no other I/O).
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Parses config text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| toml_error(origin, text, &e))?;
        cfg.origin = origin.to_string();
        cfg.text = text.to_string();
        if *cfg.version.get_ref() != CONFIG_VERSION {
            return Err(cfg
                .at(
                    &cfg.version,
                    "version",
                    format!(
                        "version {} is not supported (this build reads {CONFIG_VERSION})",
                        cfg.version.get_ref()
                    ),
                )
                .into());
        }
        if cfg.policy.top_k == 0 {
            return Err(cfg
                .error_at_key("policy.top_k", "top_k", "must be at least 1")
                .into());
        }
        cfg.controller.central.check().map_err(|(key, message)| {
            cfg.error_at_key(&format!("controller.central.{key}"), &key, &message)
        })?;
        cfg.node
            .check()
            .map_err(|(key, message)| cfg.error_at_key(&format!("node.{key}"), &key, &message))?;
        for (key, p) in [
            ("state_dir", &cfg.controller.state_dir),
            ("snapshot_path", &cfg.controller.snapshot_path),
        ] {
            if p.is_relative() {
                let message = format!("must be an absolute path, got `{}`", p.display());
                return Err(cfg
                    .error_at_key(&format!("controller.{key}"), key, &message)
                    .into());
            }
        }
        cfg.routing
            .check()
            .map_err(|(key, message)| cfg.error_at_key(&format!("routing.{key}"), &key, &message))?;
        Ok(cfg)
    }

    /// An error about a spanned value.
    pub fn at<T>(&self, value: &Spanned<T>, key: &str, message: String) -> SourceError {
        let (line, column) = if value.span().is_empty() {
            (None, None)
        } else {
            let (l, c) = line_col(&self.text, value.span().start);
            (Some(l), Some(c))
        };
        SourceError {
            origin: self.origin.clone(),
            line,
            column,
            key: Some(key.to_string()),
            message,
        }
    }

    /// An error about a key, located at the first line assigning its last component.
    fn error_at_key(&self, dotted: &str, last: &str, message: &str) -> SourceError {
        let line = self.text.lines().position(|l| {
            l.trim_start()
                .strip_prefix(last)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        });
        SourceError {
            origin: self.origin.clone(),
            line: line.map(|l| l + 1),
            column: None,
            key: Some(dotted.to_string()),
            message: message.to_string(),
        }
    }

    /// Loads the catalogue (the only I/O) and checks every cross-field rule.
    pub fn resolve(self, base_dir: Option<&Path>) -> Result<Resolved, ConfigError> {
        let (catalogue, mut models) = self.gpus(base_dir)?;
        // Layouts outside the action space would change the learned policy's K.
        let extend = self.policy.kind != PolicyKind::MeanField;
        let defaulted = self.policy.static_layout.iter().all(|s| s.span().is_empty());
        let layouts = self.layout_lists(
            &catalogue,
            &mut models,
            &self.policy.static_layout,
            "policy.static_layout",
            extend,
            defaulted,
        )?;
        for (m, l) in models.iter_mut().zip(layouts) {
            m.static_layout = l;
        }
        let mut last = None;
        for entry in &self.policy.periodic {
            let minute = parse_time_of_day(entry.at.get_ref())
                .map_err(|m| self.at(&entry.at, "policy.periodic.at", m))?;
            if last.is_some_and(|l| minute <= l) {
                return Err(self
                    .at(&entry.at, "policy.periodic.at", "times must increase".into())
                    .into());
            }
            last = Some(minute);
            let layouts = self.layout_lists(
                &catalogue,
                &mut models,
                &entry.layout,
                "policy.periodic.layout",
                extend,
                false,
            )?;
            for (m, l) in models.iter_mut().zip(layouts) {
                m.periodic.push(l);
            }
        }
        if self.policy.kind == PolicyKind::Periodic && self.policy.periodic.is_empty() {
            return Err(self
                .error_at_key(
                    "policy.kind",
                    "kind",
                    "is periodic but [[policy.periodic]] is empty",
                )
                .into());
        }
        Ok(Resolved {
            config: self,
            catalogue,
            models,
        })
    }

    /// The catalogue with the site's additions and each `[gpu] models` entry with its
    /// action space (the catalogue's configurations, or `[gpu] mig_parted`'s mig-configs),
    /// whatever `[policy]` says: what the site's GPUs can be laid out as.
    pub fn gpus(&self, base_dir: Option<&Path>) -> Result<(Catalogue, Vec<ResolvedModel>), ConfigError> {
        let mut catalogue = Catalogue::embedded();
        if let Some(extra) = &self.gpu.catalogue {
            let path = match base_dir {
                Some(dir) if extra.get_ref().is_relative() => dir.join(extra.get_ref()),
                _ => extra.get_ref().clone(),
            };
            let text = std::fs::read_to_string(&path).map_err(|e| {
                self.at(
                    extra,
                    "gpu.catalogue",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            let site = Catalogue::from_toml_str(&text, &path.display().to_string())
                .map_err(|e| self.at(extra, "gpu.catalogue", e.to_string()))?;
            catalogue
                .merge(site)
                .map_err(|e| self.at(extra, "gpu.catalogue", e.to_string()))?;
        }
        let mig_parted = self.read_mig_parted(base_dir)?;
        let mut models = Vec::new();
        for name in &self.gpu.models {
            let model = catalogue
                .model(name.get_ref())
                .map_err(|e| self.at(name, "gpu.models", e.to_string()))?
                .clone();
            let configurations = match &mig_parted {
                Some(MigPartedSource {
                    file,
                    key: spanned,
                    origin,
                }) => {
                    let layouts = file
                        .layouts_for(&model, self.gpu.driver, origin)
                        .map_err(|e| self.at(spanned, "gpu.mig_parted", e.to_string()))?;
                    if layouts.is_empty() {
                        return Err(self
                            .at(
                                spanned,
                                "gpu.mig_parted",
                                format!("{origin}: no mig-config gives {} a layout", model.key),
                            )
                            .into());
                    }
                    layouts
                        .into_iter()
                        .map(|(n, l)| Configuration::custom(&n, &model, l))
                        .collect()
                }
                None => resolve_configurations(&catalogue, &model, self.gpu.driver)
                    .map_err(|e| self.at(name, "gpu.models", e.to_string()))?,
            };
            models.push(ResolvedModel {
                model,
                configurations,
                static_layout: Vec::new(),
                periodic: Vec::new(),
            });
        }
        if models.is_empty() {
            return Err(self
                .error_at_key("gpu.models", "models", "names no GPU model")
                .into());
        }
        Ok((catalogue, models))
    }

    /// Reads `[gpu] mig_parted`, if set.
    fn read_mig_parted(&self, base_dir: Option<&Path>) -> Result<Option<MigPartedSource<'_>>, ConfigError> {
        let Some(spanned) = &self.gpu.mig_parted else {
            return Ok(None);
        };
        let path = match base_dir {
            Some(dir) if spanned.get_ref().is_relative() => dir.join(spanned.get_ref()),
            _ => spanned.get_ref().clone(),
        };
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| self.at(spanned, "gpu.mig_parted", format!("cannot read {origin}: {e}")))?;
        let file = MigPartedFile::parse(&text, &origin)
            .map_err(|e| self.at(spanned, "gpu.mig_parted", e.to_string()))?;
        Ok(Some(MigPartedSource {
            file,
            key: spanned,
            origin,
        }))
    }

    /// A list of layout entries → each model's configuration indices: every model takes
    /// the entries that fit it ([`read_entry`]); an entry fitting no model, or a model no
    /// entry fits, is an error (unless `defaulted`: then such a model keeps its first
    /// configuration, the whole GPU). With `extend`, layouts outside the configurations
    /// join them; without, they are refused.
    fn layout_lists(
        &self,
        catalogue: &Catalogue,
        models: &mut [ResolvedModel],
        entries: &[Spanned<String>],
        key: &str,
        extend: bool,
        defaulted: bool,
    ) -> Result<Vec<Vec<usize>>, ConfigError> {
        if entries.is_empty() {
            return Err(self
                .error_at_key(key, key.rsplit('.').next().unwrap_or(key), "is empty")
                .into());
        }
        let mut fits_some = vec![false; entries.len()];
        let mut out = Vec::new();
        for m in models.iter_mut() {
            let mut indices = Vec::new();
            for (e, entry) in entries.iter().enumerate() {
                let read = read_entry(
                    catalogue,
                    &m.configurations,
                    &m.model,
                    self.gpu.driver,
                    entry.get_ref(),
                )
                .map_err(|msg| self.at(entry, key, msg))?;
                let index = match read {
                    None => continue,
                    Some(LayoutEntry::Configuration(i)) => i,
                    Some(LayoutEntry::Layout(layout)) => {
                        if !extend {
                            return Err(self
                                .at(
                                    entry,
                                    key,
                                    format!(
                                        "`{}` is none of {}'s configurations ({}), which the mean-field policy \
                                         chooses among; name one, or set [gpu] mig_parted to choose among other layouts",
                                        entry.get_ref(),
                                        m.model.key,
                                        names(&m.configurations)
                                    ),
                                )
                                .into());
                        }
                        let name = entry.get_ref().trim();
                        match m.configurations.iter().position(|c| c.name == name) {
                            Some(i) => i,
                            None => {
                                m.configurations
                                    .push(Configuration::custom(name, &m.model, layout));
                                m.configurations.len() - 1
                            }
                        }
                    }
                };
                fits_some[e] = true;
                indices.push(index);
            }
            out.push(indices);
        }
        if defaulted {
            // Each model's whole GPU, its first configuration.
            return Ok(out
                .into_iter()
                .map(|i| if i.is_empty() { vec![0] } else { i })
                .collect());
        }
        if let Some(e) = fits_some.iter().position(|f| !f) {
            let known: Vec<String> = models
                .iter()
                .map(|m| format!("{}: {}", m.model.key, names(&m.configurations)))
                .collect();
            return Err(self
                .at(
                    &entries[e],
                    key,
                    format!(
                        "unknown configuration `{}`: no layout of that name or instances fits the cluster's GPU models ({})",
                        entries[e].get_ref(),
                        known.join("; ")
                    ),
                )
                .into());
        }
        if let Some(m) = out.iter().position(Vec::is_empty) {
            let m = &models[m];
            return Err(self
                .error_at_key(
                    key,
                    key.rsplit('.').next().unwrap_or(key),
                    &format!(
                        "names no layout for {} (its configurations: {}; or an instance list such as `{}`)",
                        m.model.key,
                        names(&m.configurations),
                        m.configurations[0].layout.profile_list(&m.model)
                    ),
                )
                .into());
        }
        Ok(out)
    }
}

/// `[gpu] mig_parted` read: the file, its key (for errors) and its path.
struct MigPartedSource<'a> {
    file: MigPartedFile,
    key: &'a Spanned<PathBuf>,
    origin: String,
}

/// Configuration names, comma-separated.
fn names(configs: &[Configuration]) -> String {
    configs
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `HH:MM` → minutes after midnight.
pub fn parse_time_of_day(s: &str) -> Result<u32, String> {
    let bad = || format!("`{s}` is not a time of day HH:MM");
    let (h, m) = s.split_once(':').ok_or_else(bad)?;
    let (h, m): (u32, u32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if h >= 24 || m >= 60 {
        return Err(bad());
    }
    Ok(h * 60 + m)
}

#[cfg(test)]
mod tests;
