//! The GPU model catalogue: profiles, placements and power curves, loaded from TOML.
//!
//! The catalogue is data, not code: the built-in one is `catalogue.toml` embedded at
//! build time, and a site can add or override models with a file of the same shape.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

use crate::error::{toml_error, SourceError};

/// Most compute slices of a MIG GPU (A100, H100, H200, B200: 7; the A30 has 4).
pub const MAX_COMPUTE_SLICES: u8 = 7;
/// Most memory slices of a MIG GPU (placements are bit masks of one byte).
pub const MAX_MEMORY_SLICES: u8 = 8;

/// The built-in catalogue text.
pub const EMBEDDED_CATALOGUE: &str = include_str!("catalogue.toml");

/// A model-independent profile shape (`3g`, `1g*` for the double-memory 1g, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// One compute slice, one memory slice.
    G1,
    /// One compute slice with the media engines.
    G1Me,
    /// One compute slice, two memory slices.
    G1Double,
    /// Two compute slices.
    G2,
    /// Two compute slices with the media engines.
    G2Me,
    /// Three compute slices.
    G3,
    /// Four compute slices.
    G4,
    /// The whole GPU.
    G7,
}

impl Kind {
    /// All kinds, smallest first.
    pub const ALL: [Kind; 8] = [
        Kind::G1,
        Kind::G1Me,
        Kind::G1Double,
        Kind::G2,
        Kind::G2Me,
        Kind::G3,
        Kind::G4,
        Kind::G7,
    ];
    /// The base kinds the paper and the default enumeration use.
    pub const BASE: [Kind; 5] = [Kind::G1, Kind::G2, Kind::G3, Kind::G4, Kind::G7];

    /// The notation used in docs/model.md and configuration placements.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::G1 => "1g",
            Kind::G1Me => "1g+me",
            Kind::G1Double => "1g*",
            Kind::G2 => "2g",
            Kind::G2Me => "2g+me",
            Kind::G3 => "3g",
            Kind::G4 => "4g",
            Kind::G7 => "7g",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| {
            format!("unknown profile kind `{s}` (expected one of 1g, 1g+me, 1g*, 2g, 2g+me, 3g, 4g, 7g)")
        })
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One GPU instance profile of one GPU model.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Slurm/NVML type name, e.g. `3g.20gb`.
    pub name: String,
    /// Model-independent shape.
    pub kind: Kind,
    /// Profile id for NVML's create calls (not NVML's enum value).
    pub nvml_id: u32,
    /// Compute slices.
    pub compute: u8,
    /// Memory slices, i.e. the placement size.
    pub memory_slices: u8,
    /// Memory of one instance in GB.
    pub memory_gb: f64,
    /// Most instances of this profile on one GPU.
    pub max_count: u8,
    /// Allowed placement starts.
    pub starts: Vec<u8>,
}

impl Profile {
    /// Bit mask of the memory slices an instance at `start` occupies.
    pub fn memory_mask(&self, start: u8) -> u8 {
        let bits: u16 = ((1u16 << self.memory_slices) - 1) << start;
        (bits & 0xff) as u8
    }
}

/// A MIG-capable GPU model.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuModel {
    /// Short key used on the command line (`a100-40gb`).
    pub key: String,
    /// Name NVML reports.
    pub name: String,
    /// Other accepted names.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// PCI device ids as mig-parted writes them (`0x20B010DE`).
    #[serde(default)]
    pub pci_device_ids: Vec<String>,
    /// Total memory in GB.
    pub memory_gb: f64,
    /// Compute slices of the whole GPU.
    #[serde(default = "seven")]
    pub compute_slices: u8,
    /// Memory slices of the whole GPU.
    #[serde(default = "eight")]
    pub memory_slices: u8,
    /// Power in W with 0..=`compute_slices` busy compute slices.
    pub power_w: Vec<f64>,
    /// Where the power curve comes from.
    #[serde(default)]
    pub power_source: String,
    /// Instance profiles.
    #[serde(rename = "profile")]
    pub profiles: Vec<Profile>,
}

/// Index of a profile within its model's `profiles`.
pub type ProfileId = usize;

fn seven() -> u8 {
    7
}
fn eight() -> u8 {
    8
}

impl GpuModel {
    /// Whether `name` (key, NVML name or alias, case-insensitive) names this model.
    pub fn answers_to(&self, name: &str) -> bool {
        self.key.eq_ignore_ascii_case(name)
            || self.name.eq_ignore_ascii_case(name)
            || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }

    /// The profile of a given kind, if the model has one.
    pub fn profile_of_kind(&self, kind: Kind) -> Option<ProfileId> {
        self.profiles.iter().position(|p| p.kind == kind)
    }

    /// The profile with a given type name (`3g.20gb`) or kind notation (`3g`).
    pub fn profile_by_name(&self, name: &str) -> Option<ProfileId> {
        self.profiles
            .iter()
            .position(|p| p.name.eq_ignore_ascii_case(name))
            .or_else(|| name.parse::<Kind>().ok().and_then(|k| self.profile_of_kind(k)))
    }

    /// The profile ids of the given kinds that this model has.
    pub fn profiles_of_kinds(&self, kinds: &[Kind]) -> Vec<ProfileId> {
        kinds.iter().filter_map(|&k| self.profile_of_kind(k)).collect()
    }

    /// Power in W with `busy` compute slices in use (clamped to the GPU's slices).
    pub fn power(&self, busy: u8) -> f64 {
        self.power_w[usize::from(busy.min(self.compute_slices))]
    }

    /// Power in W with every compute slice in use.
    pub fn full_power(&self) -> f64 {
        self.power(self.compute_slices)
    }

    /// The mask of every memory slice of the GPU.
    pub fn full_memory_mask(&self) -> u8 {
        ((1u16 << self.memory_slices) - 1) as u8
    }

    fn check(&self) -> Result<(), String> {
        if self.key.is_empty() {
            return Err("model has an empty key".into());
        }
        let ctx = |msg: String| format!("model `{}`: {msg}", self.key);
        if self.compute_slices == 0 || self.compute_slices > MAX_COMPUTE_SLICES {
            return Err(ctx(format!("compute_slices must be 1..={MAX_COMPUTE_SLICES}")));
        }
        if self.memory_slices == 0 || self.memory_slices > MAX_MEMORY_SLICES {
            return Err(ctx(format!("memory_slices must be 1..={MAX_MEMORY_SLICES}")));
        }
        if self.power_w.len() != usize::from(self.compute_slices) + 1 {
            return Err(ctx(format!(
                "power_w has {} values, needs {} (0..={} busy compute slices)",
                self.power_w.len(),
                self.compute_slices + 1,
                self.compute_slices
            )));
        }
        if self.power_w.iter().any(|p| !p.is_finite() || *p < 0.0) {
            return Err(ctx("power_w must be finite and non-negative".into()));
        }
        if self.power_w.windows(2).any(|w| w[1] < w[0]) {
            return Err(ctx("power_w must be non-decreasing in busy slices".into()));
        }
        if self.profiles.is_empty() {
            return Err(ctx("has no profiles".into()));
        }
        for (i, p) in self.profiles.iter().enumerate() {
            let pctx = |msg: &str| ctx(format!("profile `{}`: {msg}", p.name));
            if self.profiles[..i]
                .iter()
                .any(|q| q.name.eq_ignore_ascii_case(&p.name))
            {
                return Err(pctx("duplicate profile name"));
            }
            if self.profiles[..i].iter().any(|q| q.kind == p.kind) {
                return Err(pctx(&format!("second profile of kind {}", p.kind)));
            }
            if p.compute == 0 || p.compute > self.compute_slices {
                return Err(pctx(&format!("compute must be 1..={}", self.compute_slices)));
            }
            if p.memory_slices == 0 || p.memory_slices > self.memory_slices {
                return Err(pctx(&format!("memory_slices must be 1..={}", self.memory_slices)));
            }
            if p.max_count == 0 {
                return Err(pctx("max_count must be at least 1"));
            }
            if p.starts.is_empty() {
                return Err(pctx("starts is empty"));
            }
            if let Some(s) = p
                .starts
                .iter()
                .find(|&&s| u16::from(s) + u16::from(p.memory_slices) > u16::from(self.memory_slices))
            {
                return Err(pctx(&format!(
                    "start {s} runs past memory slice {}",
                    self.memory_slices
                )));
            }
            if p.memory_gb.is_nan() || p.memory_gb <= 0.0 {
                return Err(pctx("memory_gb must be positive"));
            }
        }
        Ok(())
    }
}

/// A named configuration (c1..c12, q1..q4): placements by kind, for every model whose
/// memory it fills.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigurationDef {
    /// Name, e.g. `c3`.
    pub name: String,
    /// Memory slices of the models it is for.
    #[serde(default = "eight")]
    pub memory_slices: u8,
    /// Placements as `kind@start`.
    #[serde(deserialize_with = "de_placements")]
    pub placements: Vec<(Kind, u8)>,
}

fn de_placements<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(Kind, u8)>, D::Error> {
    let raw = Vec::<String>::deserialize(d)?;
    raw.iter()
        .map(|s| parse_kind_at(s).map_err(serde::de::Error::custom))
        .collect()
}

/// Parses `kind@start` (`3g@4`).
pub fn parse_kind_at(s: &str) -> Result<(Kind, u8), String> {
    let (k, start) = s
        .split_once('@')
        .ok_or_else(|| format!("placement `{s}` is not of the form kind@start"))?;
    let kind = k.trim().parse::<Kind>()?;
    let start = start
        .trim()
        .parse::<u8>()
        .map_err(|_| format!("placement `{s}`: start `{start}` is not a slice index"))?;
    Ok((kind, start))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogueFile {
    #[serde(default, rename = "model")]
    models: Vec<GpuModel>,
    #[serde(default, rename = "configuration")]
    configurations: Vec<ConfigurationDef>,
}

/// Every GPU model and named configuration smartmig knows.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalogue {
    /// GPU models.
    pub models: Vec<GpuModel>,
    /// Named configurations, in action-space order.
    pub configurations: Vec<ConfigurationDef>,
}

/// A catalogue lookup or load failure.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    /// The catalogue file could not be read or parsed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A model or configuration breaks a geometry rule.
    #[error("{origin}: {message}")]
    Invalid {
        /// Where the catalogue came from.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// No model answers to the name.
    #[error("unknown GPU model `{name}` (known: {known})")]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The known keys.
        known: String,
    },
}

impl Catalogue {
    /// The built-in catalogue.
    pub fn embedded() -> Catalogue {
        // The embedded file is checked by a unit test, so this cannot fail in a build
        // that passed its tests; a failure here is a programming error.
        Catalogue::from_toml_str(EMBEDDED_CATALOGUE, "built-in catalogue")
            .expect("the embedded MIG catalogue is valid")
    }

    /// Parses and checks a catalogue; `origin` names it in errors.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Catalogue, CatalogueError> {
        let file: CatalogueFile = toml::from_str(text).map_err(|e| toml_error(origin, text, &e))?;
        let cat = Catalogue {
            models: file.models,
            configurations: file.configurations,
        };
        cat.check().map_err(|message| CatalogueError::Invalid {
            origin: origin.to_string(),
            message,
        })?;
        Ok(cat)
    }

    /// Adds the models and configurations of `other`, replacing those with the same key or name.
    pub fn merge(&mut self, other: Catalogue) -> Result<(), CatalogueError> {
        for m in other.models {
            match self
                .models
                .iter_mut()
                .find(|x| x.key.eq_ignore_ascii_case(&m.key))
            {
                Some(slot) => *slot = m,
                None => self.models.push(m),
            }
        }
        for c in other.configurations {
            match self.configurations.iter_mut().find(|x| x.name == c.name) {
                Some(slot) => *slot = c,
                None => self.configurations.push(c),
            }
        }
        self.check().map_err(|message| CatalogueError::Invalid {
            origin: "merged catalogue".into(),
            message,
        })
    }

    /// The model answering to `name` (key, NVML name or alias).
    pub fn model(&self, name: &str) -> Result<&GpuModel, CatalogueError> {
        self.models
            .iter()
            .find(|m| m.answers_to(name))
            .ok_or_else(|| CatalogueError::UnknownModel {
                name: name.to_string(),
                known: self
                    .models
                    .iter()
                    .map(|m| m.key.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The configurations for `model` (those filling its memory), in action-space order.
    pub fn configurations_for<'a>(
        &'a self,
        model: &'a GpuModel,
    ) -> impl Iterator<Item = &'a ConfigurationDef> + 'a {
        self.configurations
            .iter()
            .filter(move |c| c.memory_slices == model.memory_slices)
    }

    fn check(&self) -> Result<(), String> {
        for (i, m) in self.models.iter().enumerate() {
            m.check()?;
            if let Some(other) = self.models[..i]
                .iter()
                .find(|o| o.answers_to(&m.key) || m.answers_to(&o.key) || o.answers_to(&m.name))
            {
                return Err(format!("models `{}` and `{}` share a name", other.key, m.key));
            }
        }
        for (i, c) in self.configurations.iter().enumerate() {
            if self.configurations[..i].iter().any(|o| o.name == c.name) {
                return Err(format!("configuration `{}` defined twice", c.name));
            }
            if c.placements.is_empty() {
                return Err(format!("configuration `{}` has no placements", c.name));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_catalogue_has_every_model_with_a_sourced_power_curve() {
        let cat = Catalogue::embedded();
        let keys: Vec<&str> = cat.models.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "a100-40gb",
                "a100-80gb",
                "a30-24gb",
                "h100-80gb",
                "h100-pcie-80gb",
                "h100-nvl-94gb",
                "h200-141gb",
                "h200-nvl-141gb",
                "gh200-96gb",
                "gh200-144gb",
                "b200-180gb"
            ]
        );
        for m in &cat.models {
            assert!(!m.power_source.is_empty(), "{} names no power source", m.key);
            assert!(!m.pci_device_ids.is_empty(), "{} has no PCI device id", m.key);
            assert_eq!(m.power_w.len(), usize::from(m.compute_slices) + 1, "{}", m.key);
        }
        let c: Vec<&str> = cat.configurations.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(c.len(), 16);
        let a30 = cat.model("a30-24gb").unwrap();
        let q: Vec<&str> = cat.configurations_for(a30).map(|c| c.name.as_str()).collect();
        assert_eq!(q, ["q1", "q2", "q3", "q4"]);
        assert_eq!(cat.configurations_for(cat.model("b200").unwrap()).count(), 12);
    }

    #[test]
    fn power_is_clamped_to_the_gpus_own_slices() {
        let cat = Catalogue::embedded();
        let a30 = cat.model("a30-24gb").unwrap();
        assert_eq!(
            (a30.power(4), a30.power(7), a30.full_power()),
            (165.0, 165.0, 165.0)
        );
        assert_eq!(a30.full_memory_mask(), 0b1111);
        assert_eq!(cat.model("a100-40gb").unwrap().full_memory_mask(), 0xff);
    }

    #[test]
    fn model_lookup_accepts_nvml_names_and_aliases_case_insensitively() {
        let cat = Catalogue::embedded();
        assert_eq!(cat.model("A100-SXM4-40GB").unwrap().key, "a100-40gb");
        assert_eq!(cat.model("nvidia h100 80gb hbm3").unwrap().key, "h100-80gb");
        assert_eq!(cat.model("NVIDIA H100 PCIe").unwrap().key, "h100-pcie-80gb");
        assert_eq!(cat.model("NVIDIA H200 NVL").unwrap().key, "h200-nvl-141gb");
        let err = cat.model("v100").unwrap_err().to_string();
        assert!(
            err.contains("unknown GPU model `v100`") && err.contains("a100-40gb"),
            "{err}"
        );
    }

    #[test]
    fn profiles_match_the_published_placement_table() {
        let cat = Catalogue::embedded();
        let m = cat.model("a100-40gb").unwrap();
        let p = &m.profiles[m.profile_by_name("3g.20gb").unwrap()];
        assert_eq!((p.nvml_id, p.compute, p.memory_slices, p.max_count), (9, 3, 4, 2));
        assert_eq!(p.starts, vec![0, 4]);
        assert_eq!(p.memory_mask(4), 0b1111_0000);
        let d = &m.profiles[m.profile_by_name("1g*").unwrap()];
        assert_eq!(
            (d.name.as_str(), d.nvml_id, d.starts.clone()),
            ("1g.10gb", 15, vec![0, 2, 4, 6])
        );
        let h = cat.model("h200-141gb").unwrap();
        assert_eq!(h.profiles[h.profile_by_name("3g").unwrap()].name, "3g.71gb");
        let a30 = cat.model("NVIDIA A30").unwrap();
        let p = &a30.profiles[a30.profile_by_name("2g+me").unwrap()];
        assert_eq!((p.name.as_str(), p.nvml_id, p.max_count), ("2g.12gb+me", 6, 1));
    }

    #[test]
    fn a_bad_override_is_refused_with_the_model_and_rule() {
        let text = r#"
[[model]]
key = "x"
name = "X"
memory_gb = 10
power_w = [1, 2, 3, 4, 5, 6, 7, 6]
profile = [{ name = "1g.1gb", kind = "1g", nvml_id = 19, compute = 1, memory_slices = 1, memory_gb = 1, max_count = 7, starts = [0] }]
"#;
        let err = Catalogue::from_toml_str(text, "site.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("site.toml") && err.contains("model `x`") && err.contains("non-decreasing"),
            "{err}"
        );
    }

    #[test]
    fn a_power_curve_of_the_wrong_length_names_the_slices_it_needs() {
        let text = r#"
[[model]]
key = "x"
name = "X"
memory_gb = 24
compute_slices = 4
memory_slices = 4
power_w = [1, 2, 3, 4, 5, 6, 7, 8]
profile = [{ name = "1g.6gb", kind = "1g", nvml_id = 14, compute = 1, memory_slices = 1, memory_gb = 6, max_count = 4, starts = [0, 1, 2, 3] }]
"#;
        let err = Catalogue::from_toml_str(text, "site.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("power_w has 8 values, needs 5"), "{err}");
        let text = text
            .replace("power_w = [1, 2, 3, 4, 5, 6, 7, 8]", "power_w = [1, 2, 3, 4, 5]")
            .replace("starts = [0, 1, 2, 3]", "starts = [0, 4]");
        let err = Catalogue::from_toml_str(&text, "site.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("start 4 runs past memory slice 4"), "{err}");
    }

    #[test]
    fn a_misspelt_catalogue_key_names_the_line() {
        let text = "[[model]]\nkey = \"x\"\nnmae = \"X\"\n";
        let err = Catalogue::from_toml_str(text, "site.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("site.toml:3") && err.contains("nmae"), "{err}");
    }

    #[test]
    fn merge_replaces_a_model_with_the_same_key() {
        let mut cat = Catalogue::embedded();
        let mut other = Catalogue::embedded();
        other.configurations.clear();
        other.models.retain(|m| m.key == "a100-40gb");
        other.models[0].power_w = vec![50.0; 8];
        cat.merge(other).unwrap();
        assert_eq!(cat.model("a100-40gb").unwrap().power(3), 50.0);
        assert_eq!(cat.models.len(), Catalogue::embedded().models.len());
    }
}
