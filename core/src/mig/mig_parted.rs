//! NVIDIA mig-parted config files (`version: v1`, `mig-configs:`): read as layouts of the
//! catalogue's models, and written from them, so that sites that manage MIG with
//! mig-parted can bring their layouts and take smartmig's back.
//!
//! A mig-config is a list of specs, each with `devices` (`all` or GPU indices), an optional
//! `device-filter` (PCI device ids, `0x20B010DE`), `mig-enabled` and `mig-devices`
//! (profile name → count). smartmig gives every GPU of a model the same layouts, so a
//! mig-config gives a model one layout: that of its specs with MIG on that fit the model
//! (a spec without `device-filter` fits every model that has its profiles). Specs that turn
//! MIG off are skipped (smartmig manages only GPUs with MIG on); specs that give one model
//! two different layouts are refused. Placements are not part of the format: smartmig
//! gives each layout the first placement that fits ([`Layout::place`]).

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::catalogue::GpuModel;
use super::layout::{Driver, Layout};

/// The format version mig-parted writes and reads.
pub const VERSION: &str = "v1";

/// A mig-parted file that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MigPartedError {
    /// Not YAML of the mig-parted shape (with the parser's line and column).
    #[error("{origin}: {message}")]
    Parse {
        /// The file.
        origin: String,
        /// What is wrong, and where.
        message: String,
    },
    /// A mig-config cannot be a layout of a model.
    #[error("{origin}: mig-config `{config}`: {message}")]
    Invalid {
        /// The file.
        origin: String,
        /// The mig-config.
        config: String,
        /// What is wrong.
        message: String,
    },
}

/// Which GPUs a spec is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    /// Every GPU (that passes the device filter).
    All,
    /// These GPU indices.
    Indices(Vec<u32>),
}

/// One spec of a mig-config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// PCI device ids the spec is for; empty: every device.
    pub device_filter: Vec<String>,
    /// The GPUs.
    pub devices: Devices,
    /// Whether MIG is on.
    pub mig_enabled: bool,
    /// Profile name (`3g.20gb`, or `3c.3g.20gb` with its compute instance) → count, in
    /// file order.
    pub mig_devices: Vec<(String, u32)>,
}

/// A whole mig-parted file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigPartedFile {
    /// mig-configs in file order.
    pub configs: Vec<(String, Vec<Spec>)>,
}

/// A map read in file order (YAML mappings are ordered in mig-parted's files; the
/// order of mig-configs is the order of the action space they become).
struct Ordered<V>(Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Ordered<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V2<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for V2<V> {
            type Value = Ordered<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(String, V)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, V>()? {
                    if out.iter().any(|(o, _)| *o == k) {
                        return Err(serde::de::Error::custom(format!("`{k}` appears twice")));
                    }
                    out.push((k, v));
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V2(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: String,
    #[serde(rename = "mig-configs")]
    mig_configs: Ordered<Vec<RawSpec>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawDevices {
    Word(String),
    List(Vec<u32>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawSpec {
    #[serde(default)]
    device_filter: Option<OneOrMany>,
    devices: RawDevices,
    mig_enabled: bool,
    #[serde(default)]
    mig_devices: Option<Ordered<u32>>,
}

impl MigPartedFile {
    /// Parses a file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<MigPartedFile, MigPartedError> {
        let parse_err = |message: String| MigPartedError::Parse {
            origin: origin.to_string(),
            message,
        };
        let raw: RawFile = yaml_serde::from_str(text).map_err(|e| parse_err(e.to_string()))?;
        if raw.version != VERSION {
            return Err(parse_err(format!(
                "version `{}` is not supported (mig-parted files are `version: {VERSION}`)",
                raw.version
            )));
        }
        if raw.mig_configs.0.is_empty() {
            return Err(parse_err("mig-configs is empty".into()));
        }
        let mut configs = Vec::new();
        for (name, specs) in raw.mig_configs.0 {
            let invalid = |message: String| MigPartedError::Invalid {
                origin: origin.to_string(),
                config: name.clone(),
                message,
            };
            if specs.is_empty() {
                return Err(invalid("has no spec".into()));
            }
            let mut out = Vec::new();
            for s in specs {
                let devices = match s.devices {
                    RawDevices::Word(w) if w == "all" => Devices::All,
                    RawDevices::Word(w) => {
                        return Err(invalid(format!(
                            "devices `{w}` is neither `all` nor a list of GPU indices"
                        )))
                    }
                    RawDevices::List(l) => Devices::Indices(l),
                };
                let mig_devices = s.mig_devices.map(|m| m.0);
                if s.mig_enabled && mig_devices.is_none() {
                    return Err(invalid("mig-enabled is true but mig-devices is missing".into()));
                }
                if !s.mig_enabled && mig_devices.as_ref().is_some_and(|m| !m.is_empty()) {
                    return Err(invalid("mig-devices given with mig-enabled false".into()));
                }
                out.push(Spec {
                    device_filter: match s.device_filter {
                        None => Vec::new(),
                        Some(OneOrMany::One(f)) => vec![f],
                        Some(OneOrMany::Many(v)) => v,
                    },
                    devices,
                    mig_enabled: s.mig_enabled,
                    mig_devices: mig_devices.unwrap_or_default(),
                });
            }
            configs.push((name, out));
        }
        Ok(MigPartedFile { configs })
    }

    /// The mig-config names, in file order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.configs.iter().map(|(n, _)| n.as_str())
    }

    /// The layout mig-config `name` gives `model`; None when it has none for the model
    /// (no spec fits it, or only specs that turn MIG off). `origin` names the file.
    pub fn layout_for(
        &self,
        name: &str,
        model: &GpuModel,
        driver: Driver,
        origin: &str,
    ) -> Result<Option<Layout>, MigPartedError> {
        let Some((_, specs)) = self.configs.iter().find(|(n, _)| n == name) else {
            return Err(MigPartedError::Invalid {
                origin: origin.to_string(),
                config: name.to_string(),
                message: format!(
                    "no such mig-config (the file has: {})",
                    self.names().collect::<Vec<_>>().join(", ")
                ),
            });
        };
        let invalid = |message: String| MigPartedError::Invalid {
            origin: origin.to_string(),
            config: name.to_string(),
            message,
        };
        let mut found: Option<(Layout, &Spec)> = None;
        for spec in specs.iter().filter(|s| s.mig_enabled) {
            let filtered = !spec.device_filter.is_empty();
            if filtered
                && !spec.device_filter.iter().any(|f| {
                    model
                        .pci_device_ids
                        .iter()
                        .any(|id| id.eq_ignore_ascii_case(f.trim()))
                })
            {
                continue;
            }
            let layout = match spec_layout(spec, model, driver) {
                Ok(l) => l,
                // Without a filter, a spec naming other models' profiles is for them.
                Err(SpecError::NotForModel(_)) if !filtered => continue,
                Err(e) => return Err(invalid(format!("on {}: {e}", model.key))),
            };
            match &found {
                Some((other, _)) if *other != layout => {
                    return Err(invalid(format!(
                        "gives {} GPUs two layouts ({} and {}); smartmig gives every GPU of a \
                         model the same layouts: split it into one mig-config per layout",
                        model.key,
                        other.profile_list(model),
                        layout.profile_list(model)
                    )))
                }
                Some(_) => {}
                None => found = Some((layout, spec)),
            }
        }
        Ok(found.map(|(l, _)| l))
    }

    /// Every mig-config that gives `model` a layout with at least one instance, in file
    /// order: the layouts the controller may choose from on that model.
    pub fn layouts_for(
        &self,
        model: &GpuModel,
        driver: Driver,
        origin: &str,
    ) -> Result<Vec<(String, Layout)>, MigPartedError> {
        let mut out = Vec::new();
        for name in self.names() {
            if let Some(l) = self.layout_for(name, model, driver, origin)? {
                if !l.instances().is_empty() {
                    out.push((name.to_string(), l));
                }
            }
        }
        Ok(out)
    }
}

#[derive(Debug, thiserror::Error)]
enum SpecError {
    #[error("{0}")]
    NotForModel(String),
    #[error("{0}")]
    Bad(String),
}

/// The layout of one spec on `model`.
fn spec_layout(spec: &Spec, model: &GpuModel, driver: Driver) -> Result<Layout, SpecError> {
    let mut profiles = Vec::new();
    for (name, count) in &spec.mig_devices {
        let (ci, gi) = match name.split_once("c.") {
            Some((c, rest)) if c.parse::<u8>().is_ok() => (c.parse::<u8>().ok(), rest),
            _ => (None, name.as_str()),
        };
        let p = model
            .profile_by_name(gi)
            .filter(|&p| model.profiles[p].name.eq_ignore_ascii_case(gi))
            .ok_or_else(|| SpecError::NotForModel(format!("{} has no profile `{gi}`", model.key)))?;
        if let Some(c) = ci {
            if c != model.profiles[p].compute {
                return Err(SpecError::Bad(format!(
                    "`{name}` asks for compute instances of {c} slice(s); smartmig gives each \
                     GPU instance one compute instance of all its slices"
                )));
            }
        }
        profiles.extend(std::iter::repeat_n(p, *count as usize));
    }
    if profiles.is_empty() {
        return Ok(Layout::empty());
    }
    Layout::place(model, driver, &profiles).ok_or_else(|| {
        SpecError::Bad(format!(
            "mig-devices {} have no placement together",
            spec.mig_devices
                .iter()
                .map(|(n, c)| format!("{n}: {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// One spec to write: a layout for the GPUs of one model (all of them, or these indices).
#[derive(Debug, Clone, PartialEq)]
pub struct ExportSpec<'a> {
    /// The model (its PCI device ids become the `device-filter`).
    pub model: &'a GpuModel,
    /// The GPUs.
    pub devices: Devices,
    /// Their layout.
    pub layout: Layout,
}

/// Writes mig-configs (name, specs) as a mig-parted file.
pub fn write(configs: &[(String, Vec<ExportSpec<'_>>)]) -> String {
    #[derive(Serialize)]
    struct File<'a> {
        version: &'static str,
        #[serde(rename = "mig-configs", serialize_with = "ordered")]
        mig_configs: Vec<(&'a str, Vec<OutSpec>)>,
    }
    #[derive(Serialize)]
    struct OutSpec {
        #[serde(rename = "device-filter", skip_serializing_if = "Vec::is_empty")]
        device_filter: Vec<String>,
        #[serde(serialize_with = "devices")]
        devices: Devices,
        #[serde(rename = "mig-enabled")]
        mig_enabled: bool,
        #[serde(rename = "mig-devices", serialize_with = "ordered")]
        mig_devices: Vec<(String, u32)>,
    }
    fn ordered<S: Serializer, K: Serialize, V: Serialize>(v: &[(K, V)], s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(v.iter().map(|(k, v)| (k, v)))
    }
    fn devices<S: Serializer>(d: &Devices, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Devices::All => s.serialize_str("all"),
            Devices::Indices(v) => v.serialize(s),
        }
    }
    let file = File {
        version: VERSION,
        mig_configs: configs
            .iter()
            .map(|(name, specs)| {
                let out = specs
                    .iter()
                    .map(|sp| OutSpec {
                        device_filter: sp.model.pci_device_ids.clone(),
                        devices: sp.devices.clone(),
                        mig_enabled: true,
                        mig_devices: counts(sp.model, &sp.layout),
                    })
                    .collect();
                (name.as_str(), out)
            })
            .collect(),
    };
    // Serialising plain strings, numbers and maps cannot fail.
    yaml_serde::to_string(&file).unwrap_or_default()
}

/// Profile name → count of a layout, smallest profile first (as mig-parted's examples list
/// them).
pub fn counts(model: &GpuModel, layout: &Layout) -> Vec<(String, u32)> {
    let mut out: Vec<(usize, u32)> = Vec::new();
    for i in layout.instances() {
        match out.iter_mut().find(|(p, _)| *p == i.profile) {
            Some((_, n)) => *n += 1,
            None => out.push((i.profile, 1)),
        }
    }
    out.sort_by_key(|(p, _)| {
        let q = &model.profiles[*p];
        (q.compute, q.memory_slices, *p)
    });
    out.into_iter()
        .map(|(p, n)| (model.profiles[p].name.clone(), n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::catalogue::Catalogue;
    use crate::mig::enumerate::maximal_layouts;
    use crate::mig::Kind;

    /// Written the way mig-parted's own example configs are (examples/config.yaml and the
    /// per-model device filters of its default config).
    const EXAMPLE: &str = r#"version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false

  all-1g.5gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7

  all-balanced:
    - device-filter: ["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
    - device-filter: "0x20B710DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.6gb": 2
        "2g.12gb": 1

  all-3g.20gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3c.3g.20gb": 2

  half-and-half:
    - devices: [0,1,2,3]
      mig-enabled: false
    - devices: [4,5,6,7]
      mig-enabled: true
      mig-devices:
        "4g.20gb": 1
        "3g.20gb": 1
"#;

    fn cat() -> Catalogue {
        Catalogue::embedded()
    }

    #[test]
    fn a_file_in_mig_parteds_own_style_gives_each_model_its_layouts() {
        let f = MigPartedFile::parse(EXAMPLE, "example.yaml").unwrap();
        let cat = cat();
        let a100 = cat.model("a100-40gb").unwrap();
        let got: Vec<(String, String)> = f
            .layouts_for(a100, Driver::R510, "example.yaml")
            .unwrap()
            .into_iter()
            .map(|(n, l)| (n, l.display(a100).to_string()))
            .collect();
        let want = [
            (
                "all-1g.5gb",
                "1g.5gb@0 1g.5gb@1 1g.5gb@2 1g.5gb@3 1g.5gb@4 1g.5gb@5 1g.5gb@6",
            ),
            ("all-balanced", "2g.10gb@0 1g.5gb@2 1g.5gb@3 3g.20gb@4"),
            ("all-3g.20gb", "3g.20gb@0 3g.20gb@4"),
            ("half-and-half", "4g.20gb@0 3g.20gb@4"),
        ];
        let want: Vec<(String, String)> = want.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        assert_eq!(got, want);
        let a30 = cat.model("a30-24gb").unwrap();
        let got: Vec<String> = f
            .layouts_for(a30, Driver::R510, "example.yaml")
            .unwrap()
            .into_iter()
            .map(|(n, l)| format!("{n}: {}", l.display(a30)))
            .collect();
        assert_eq!(got, ["all-balanced: 2g.12gb@0 1g.6gb@2 1g.6gb@3"]);
        // Pre-R510 drivers refuse 4g with 3g.
        let e = f
            .layouts_for(a100, Driver::PreR510, "example.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("example.yaml: mig-config `half-and-half`: on a100-40gb: mig-devices"),
            "{e}"
        );
    }

    #[test]
    fn bad_files_are_refused_naming_the_file_config_and_fault() {
        let cat = cat();
        let a100 = cat.model("a100-40gb").unwrap();
        let e = MigPartedFile::parse("version: v2\nmig-configs: {}\n", "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("f.yaml: version `v2`"), "{e}");
        let e = MigPartedFile::parse("version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n      mig-devcies: {}\n", "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("f.yaml") && e.contains("mig-devcies") && e.contains("line"),
            "{e}"
        );
        let e = MigPartedFile::parse(
            "version: v1\nmig-configs:\n  x:\n    - devices: some\n      mig-enabled: false\n",
            "f.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("mig-config `x`: devices `some`"), "{e}");
        let two = "version: v1\nmig-configs:\n  mixed:\n    - devices: [0]\n      mig-enabled: true\n      mig-devices:\n        \"7g.40gb\": 1\n    - devices: [1]\n      mig-enabled: true\n      mig-devices:\n        \"3g.20gb\": 2\n";
        let f = MigPartedFile::parse(two, "f.yaml").unwrap();
        let e = f
            .layouts_for(a100, Driver::R510, "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("two layouts (7g.40gb and 3g.20gb+3g.20gb)"), "{e}");
        let partial = "version: v1\nmig-configs:\n  p:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"1c.3g.20gb\": 2\n";
        let f = MigPartedFile::parse(partial, "f.yaml").unwrap();
        let e = f
            .layouts_for(a100, Driver::R510, "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("compute instances of 1 slice(s)"), "{e}");
        let e = f
            .layout_for("q", a100, Driver::R510, "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no such mig-config (the file has: p)"), "{e}");
    }

    /// Every layout a model allows (as a multiset of profiles: the format has no
    /// placements) goes through a file and back unchanged.
    #[test]
    fn every_layout_of_every_model_round_trips_through_a_file() {
        let cat = cat();
        for m in &cat.models {
            // Every valid layout's profile multiset: the subsets of maximal layouts.
            let mut lists: Vec<Vec<(String, u32)>> = Vec::new();
            for l in maximal_layouts(m, Driver::R510, &Kind::ALL) {
                let n = l.instances().len();
                for bits in 1u32..(1 << n) {
                    let sub = Layout::new(
                        (0..n)
                            .filter(|i| bits & (1 << i) != 0)
                            .map(|i| l.instances()[i])
                            .collect(),
                    );
                    let c = counts(m, &sub);
                    if !lists.contains(&c) {
                        lists.push(c);
                    }
                }
            }
            let configs: Vec<(String, Vec<ExportSpec>)> = lists
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let profiles: Vec<usize> = c
                        .iter()
                        .flat_map(|(name, k)| {
                            std::iter::repeat_n(m.profile_by_name(name).unwrap(), *k as usize)
                        })
                        .collect();
                    let layout = Layout::place(m, Driver::R510, &profiles)
                        .unwrap_or_else(|| panic!("{}: {c:?} has no placement", m.key));
                    (
                        format!("layout-{i}"),
                        vec![ExportSpec {
                            model: m,
                            devices: Devices::All,
                            layout,
                        }],
                    )
                })
                .collect();
            let text = write(&configs);
            let f = MigPartedFile::parse(&text, "written").unwrap();
            let back = f.layouts_for(m, Driver::R510, "written").unwrap();
            assert_eq!(back.len(), lists.len(), "{}", m.key);
            let again: Vec<(String, Vec<ExportSpec>)> = back
                .into_iter()
                .map(|(name, layout)| {
                    (
                        name,
                        vec![ExportSpec {
                            model: m,
                            devices: Devices::All,
                            layout,
                        }],
                    )
                })
                .collect();
            assert_eq!(write(&again), text, "{}", m.key);
            for ((_, specs), c) in f.configs.iter().zip(&lists) {
                assert_eq!(&specs[0].mig_devices, c, "{}", m.key);
                assert_eq!(specs[0].device_filter, m.pci_device_ids);
            }
        }
    }

    #[test]
    fn a_written_file_reads_as_mig_parted_writes_it() {
        let cat = cat();
        let m = cat.model("a100-40gb").unwrap();
        let layout = Layout::parse(m, "4g@0 2g@4 1g*@6").unwrap();
        let text = write(&[(
            "smartmig-n1".into(),
            vec![ExportSpec {
                model: m,
                devices: Devices::Indices(vec![0, 1]),
                layout,
            }],
        )]);
        assert_eq!(
            text,
            "version: v1\nmig-configs:\n  smartmig-n1:\n  - device-filter:\n    - '0x20B010DE'\n    - '0x20F110DE'\n    devices:\n    - 0\n    - 1\n    mig-enabled: true\n    mig-devices:\n      1g.10gb: 1\n      2g.10gb: 1\n      4g.20gb: 1\n"
        );
    }
}
