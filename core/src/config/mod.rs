//! `smartmig.toml`: strict parsing (no I/O but reading the file) and resolving (loading
//! the catalogue, checking cross-field rules) as two separate steps.

mod controller;
mod de;
pub mod hostlist;
pub mod node;
pub mod window;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::error::{line_col, toml_error, SourceError};
use crate::mig::{resolve_configurations, Catalogue, Configuration, Driver, GpuModel};
use crate::routing::RoutingConfig;

pub use controller::{CentralConfig, RelayoutKind};
pub use de::{non_negative, positive, seconds, seconds_or_zero, MAX_SECONDS};

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
}

impl Default for GpuConfig {
    fn default() -> Self {
        GpuConfig {
            models: default_models(),
            driver: Driver::R510,
            catalogue: None,
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

/// `[policy]`: how GPUs are repartitioned.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Which policy runs.
    #[serde(default = "default_kind")]
    pub kind: PolicyKind,
    /// Directory holding `<model>.onnx` policies.
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
    /// Static layout, and fallback for the learned policy: configurations cycled over each model's GPUs.
    #[serde(default = "default_static")]
    pub static_layout: Vec<Spanned<String>>,
    /// Periodic schedule: layouts by time of day.
    #[serde(default)]
    pub periodic: Vec<PeriodicEntry>,
}

/// One entry of a periodic schedule.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeriodicEntry {
    /// Time of day `HH:MM` from which the layout applies.
    pub at: Spanned<String>,
    /// Configurations cycled over each model's GPUs.
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
    /// Instances that must change take no new jobs and switch once idle.
    Drain,
    /// Requeue jobs on instances that must change (admin opt-in).
    Preempt,
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
    /// Its configurations c1..c12.
    pub configurations: Vec<Configuration>,
    /// The static layout as configuration indices.
    pub static_layout: Vec<usize>,
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
        let mut models = Vec::new();
        for name in &self.gpu.models {
            let model = catalogue
                .model(name.get_ref())
                .map_err(|e| self.at(name, "gpu.models", e.to_string()))?
                .clone();
            let configurations = resolve_configurations(&catalogue, &model, self.gpu.driver)
                .map_err(|e| self.at(name, "gpu.models", e.to_string()))?;
            let static_layout = self.configuration_list(
                &configurations,
                &model,
                &self.policy.static_layout,
                "policy.static_layout",
            )?;
            models.push(ResolvedModel {
                model,
                configurations,
                static_layout,
            });
        }
        if models.is_empty() {
            return Err(self
                .error_at_key("gpu.models", "models", "names no GPU model")
                .into());
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
            for m in &models {
                self.configuration_list(
                    &m.configurations,
                    &m.model,
                    &entry.layout,
                    "policy.periodic.layout",
                )?;
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

    /// Configuration names → indices, refusing unknown names and those the model cannot take.
    fn configuration_list(
        &self,
        configs: &[Configuration],
        model: &GpuModel,
        names: &[Spanned<String>],
        key: &str,
    ) -> Result<Vec<usize>, ConfigError> {
        if names.is_empty() {
            return Err(self
                .error_at_key(key, key.rsplit('.').next().unwrap_or(key), "is empty")
                .into());
        }
        names
            .iter()
            .map(|n| {
                let idx = configs
                    .iter()
                    .position(|c| c.name.eq_ignore_ascii_case(n.get_ref()))
                    .ok_or_else(|| {
                        let known: Vec<&str> = configs.iter().map(|c| c.name.as_str()).collect();
                        self.at(
                            n,
                            key,
                            format!(
                                "unknown configuration `{}` (known: {})",
                                n.get_ref(),
                                known.join(", ")
                            ),
                        )
                    })?;
                if let Some(why) = &configs[idx].unavailable {
                    return Err(self
                        .at(
                            n,
                            key,
                            format!("{} cannot take {}: {why}", model.key, configs[idx].name),
                        )
                        .into());
                }
                Ok(idx)
            })
            .collect()
    }
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
