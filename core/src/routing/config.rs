//! `[routing]` of smartmig.toml: how the job_submit plugin routes MIG requests.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::classes::{builtin_classes, glob_is_valid, JobClass};
use crate::mig::Kind;

/// What the plugin does when it fails internally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// Accept the job unchanged and log (default: a smartmig bug never blocks submissions).
    #[default]
    Open,
    /// Reject the job with the error.
    Closed,
}

/// A site job class: `[[routing.class]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassConfig {
    /// Class name, used in rules and in `smartmig:class=` hints.
    pub name: String,
    /// Speed-up over 1g on 1g, 2g, 3g, 4g, 7g (first value 1, non-decreasing).
    pub speedup: [f64; 5],
    /// GPU memory one instance must have, in GB (0: any).
    #[serde(default)]
    pub gpumem_gb: f64,
}

/// A rule mapping jobs to a class: `[[routing.rule]]`; every given matcher must match.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// The class jobs matching this rule get.
    pub class: String,
    /// Glob on the job name (`*` any run, `?` one character).
    #[serde(default)]
    pub name: Option<String>,
    /// Glob on the account.
    #[serde(default)]
    pub account: Option<String>,
    /// Glob on the partition.
    #[serde(default)]
    pub partition: Option<String>,
}

/// `[routing]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingConfig {
    /// Fail open or closed on internal errors.
    #[serde(default)]
    pub on_error: OnError,
    /// Route untyped `gpu:N` requests too.
    #[serde(default)]
    pub route_untyped: bool,
    /// A controller snapshot older than this is ignored (static rule instead).
    #[serde(default = "default_max_age", deserialize_with = "crate::config::seconds")]
    pub snapshot_max_age_s: f64,
    /// Soft due time when the job has no `--deadline` or `due=` hint:
    /// submit + slack × run time on 7g + `grace_min`.
    #[serde(default = "default_slack", deserialize_with = "crate::config::positive")]
    pub slack: f64,
    /// Minutes added to the soft due time, so that short jobs may take small slices.
    #[serde(default = "default_grace", deserialize_with = "crate::config::non_negative")]
    pub grace_min: f64,
    /// The slice a user's `--time` refers to (1g, 2g, 3g, 4g or 7g).
    #[serde(default = "default_time_on", deserialize_with = "de_base_kind")]
    pub time_refers_to: Kind,
    /// Run-time estimate on the `time_refers_to` slice, in minutes, for jobs without `--time`.
    #[serde(default = "default_runtime", deserialize_with = "crate::config::positive")]
    pub default_runtime_min: f64,
    /// Cap on a rescaled time limit in minutes for every partition (0: no cap).
    #[serde(default)]
    pub max_time_min: u32,
    /// Cap on a rescaled time limit per partition, in minutes (partition name → minutes;
    /// 0: none of its own, as for `max_time_min`).
    #[serde(default)]
    pub partition_max_time_min: BTreeMap<String, u32>,
    /// Class of jobs that no hint and no rule places.
    #[serde(default = "default_class")]
    pub default_class: String,
    /// Site classes, added to (or replacing by name) the built-in ones.
    #[serde(default, rename = "class")]
    pub classes: Vec<ClassConfig>,
    /// Rules placing jobs into classes, first match wins.
    #[serde(default, rename = "rule")]
    pub rules: Vec<RuleConfig>,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        RoutingConfig {
            on_error: OnError::Open,
            route_untyped: false,
            snapshot_max_age_s: default_max_age(),
            slack: default_slack(),
            grace_min: default_grace(),
            time_refers_to: default_time_on(),
            default_runtime_min: default_runtime(),
            max_time_min: 0,
            partition_max_time_min: BTreeMap::new(),
            default_class: default_class(),
            classes: Vec::new(),
            rules: Vec::new(),
        }
    }
}

fn default_max_age() -> f64 {
    120.0
}
fn default_slack() -> f64 {
    1.5
}
fn default_grace() -> f64 {
    60.0
}
fn default_time_on() -> Kind {
    Kind::G7
}
fn default_runtime() -> f64 {
    60.0
}
fn default_class() -> String {
    "default".to_string()
}

/// The base kinds a time reference or speed-up table may name.
pub(crate) fn parse_base_kind(s: &str) -> Result<Kind, String> {
    match s.parse::<Kind>() {
        Ok(k) if Kind::BASE.contains(&k) => Ok(k),
        _ => Err(format!("`{s}` is not one of 1g, 2g, 3g, 4g, 7g")),
    }
}

fn de_base_kind<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Kind, D::Error> {
    let s = String::deserialize(d)?;
    parse_base_kind(&s).map_err(serde::de::Error::custom)
}

/// Checks a speed-up table: finite, positive, first 1, non-decreasing.
pub(crate) fn check_speedup(s: &[f64; 5]) -> Result<(), String> {
    if s.iter().any(|v| !v.is_finite() || *v <= 0.0) {
        return Err("speed-ups must be finite and positive".into());
    }
    if (s[0] - 1.0).abs() > 1e-9 {
        return Err(format!("the first speed-up (1g over 1g) must be 1, got {}", s[0]));
    }
    if s.windows(2).any(|w| w[1] < w[0]) {
        return Err("speed-ups must not decrease with slice size".into());
    }
    Ok(())
}

impl RoutingConfig {
    /// Cross-field checks within `[routing]`: `Err((key, message))`.
    pub fn check(&self) -> Result<(), (String, String)> {
        let err = |k: &str, m: String| Err((k.to_string(), m));
        for (i, c) in self.classes.iter().enumerate() {
            if c.name.is_empty() || c.name.contains(char::is_whitespace) {
                return err("name", format!("class name `{}` is empty or has spaces", c.name));
            }
            if self.classes[..i].iter().any(|o| o.name == c.name) {
                return err("name", format!("class `{}` is defined twice", c.name));
            }
            if let Err(m) = check_speedup(&c.speedup) {
                return err("speedup", format!("class `{}`: {m}", c.name));
            }
            if !c.gpumem_gb.is_finite() || c.gpumem_gb < 0.0 {
                return err("gpumem_gb", format!("class `{}`: must be zero or more", c.name));
            }
        }
        let known = |name: &str| {
            self.classes.iter().any(|c| c.name == name) || builtin_classes().iter().any(|c| c.name == name)
        };
        if !known(&self.default_class) {
            return err("default_class", format!("unknown class `{}`", self.default_class));
        }
        for r in &self.rules {
            if !known(&r.class) {
                return err("class", format!("rule names unknown class `{}`", r.class));
            }
            if r.name.is_none() && r.account.is_none() && r.partition.is_none() {
                return err(
                    "class",
                    format!("rule for class `{}` has no name, account or partition", r.class),
                );
            }
            for (key, g) in [
                ("name", &r.name),
                ("account", &r.account),
                ("partition", &r.partition),
            ] {
                if let Some(g) = g {
                    if !glob_is_valid(g) {
                        return err(key, format!("`{g}` is not a valid glob (empty)"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Every class this config knows: built-ins, then site classes replacing by name.
    pub fn all_classes(&self) -> Vec<JobClass> {
        let mut all = builtin_classes();
        for c in &self.classes {
            let class = JobClass {
                name: c.name.clone(),
                speedup: c.speedup,
                gpumem_gb: c.gpumem_gb,
            };
            match all.iter_mut().find(|o| o.name == c.name) {
                Some(slot) => *slot = class,
                None => all.push(class),
            }
        }
        all
    }

    /// The soft due time, minutes after submission, of a job that gives neither
    /// `--deadline` nor a `due=` hint and runs `run_on_7g_min` minutes on a whole GPU:
    /// `slack` × that + `grace_min`. The grace lets short jobs take small slices (a
    /// 10-minute job may take 70 minutes on 1g) while long ones keep large slices.
    pub fn soft_due_min(&self, run_on_7g_min: f64) -> f64 {
        self.slack * run_on_7g_min + self.grace_min
    }

    /// The time-limit cap for a partition (None: no cap).
    pub fn time_cap(&self, partition: Option<&str>) -> Option<u32> {
        let part = partition
            .and_then(|p| p.split(',').next())
            .and_then(|p| self.partition_max_time_min.get(p).copied())
            .filter(|&m| m > 0);
        let global = (self.max_time_min > 0).then_some(self.max_time_min);
        match (part, global) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
