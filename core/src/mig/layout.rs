//! Positional layouts of GPU instances on one GPU, and the driver's rules for them.

use std::fmt;

use serde::Serialize;

use super::catalogue::{GpuModel, Kind, ProfileId};

/// Which driver generation's rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Driver {
    /// R510 or later: 4g and 3g may share a GPU.
    #[default]
    R510,
    /// Before R510: a 4g instance and a 3g instance may not share a GPU.
    PreR510,
}

impl Driver {
    /// The spelling in smartmig.toml and scenario files (`pre-r510`).
    pub fn as_str(self) -> &'static str {
        match self {
            Driver::R510 => "r510",
            Driver::PreR510 => "pre-r510",
        }
    }
}

/// One GPU instance: a profile at a placement start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Instance {
    /// Memory-slice index where the instance starts.
    pub start: u8,
    /// Profile within the GPU model.
    pub profile: ProfileId,
}

/// A set of GPU instances on one GPU, kept sorted by start.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Layout {
    instances: Vec<Instance>,
}

/// A broken layout rule, naming the instance that breaks it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The profile id does not exist on the model.
    #[error("instance #{index}: the model has no profile with id {profile}")]
    NoSuchProfile {
        /// Index of the instance in the layout.
        index: usize,
        /// The profile id.
        profile: ProfileId,
    },
    /// The start is not among the profile's allowed placements.
    #[error("{instance}: start {start} is not an allowed placement for {profile} (allowed: {allowed})")]
    Placement {
        /// The instance, as `name@start`.
        instance: String,
        /// Its start.
        start: u8,
        /// Its profile name.
        profile: String,
        /// The allowed starts.
        allowed: String,
    },
    /// Two instances share memory slices.
    #[error("{first} and {second} overlap in memory slices")]
    Overlap {
        /// The earlier instance.
        first: String,
        /// The later instance.
        second: String,
    },
    /// More instances of a profile than the GPU holds.
    #[error("{instance}: more than {max} instances of {profile}")]
    Count {
        /// The first instance over the limit.
        instance: String,
        /// The profile.
        profile: String,
        /// The limit.
        max: u8,
    },
    /// A second instance with the media engines (a GPU has one JPEG decoder and one OFA).
    #[error("{instance}: the GPU's media engines are already in {other}")]
    MediaEngines {
        /// The instance that asks for them.
        instance: String,
        /// The instance that has them.
        other: String,
    },
    /// More compute slices in use than the GPU has.
    #[error("{instance}: compute slices exceed {max} (would use {used})")]
    Compute {
        /// The instance that crossed the limit.
        instance: String,
        /// Slices used including it.
        used: u8,
        /// Slices available.
        max: u8,
    },
    /// 4g and 3g together before driver R510.
    #[error("{instance}: 4g and 3g instances on one GPU need driver R510 or later")]
    PreR510 {
        /// The instance that completes the forbidden pair.
        instance: String,
    },
    /// A layout string could not be read.
    #[error("cannot read layout `{text}`: {reason}")]
    Parse {
        /// The text.
        text: String,
        /// Why.
        reason: String,
    },
}

impl Layout {
    /// A layout of the given instances (sorted; not validated).
    pub fn new(mut instances: Vec<Instance>) -> Layout {
        instances.sort();
        Layout { instances }
    }

    /// The empty layout.
    pub fn empty() -> Layout {
        Layout::default()
    }

    /// The instances, by start.
    pub fn instances(&self) -> &[Instance] {
        &self.instances
    }

    /// Whether the layout holds `inst`.
    pub fn contains(&self, inst: &Instance) -> bool {
        self.instances.binary_search(inst).is_ok()
    }

    /// A copy with one more instance.
    pub fn with(&self, inst: Instance) -> Layout {
        let mut v = self.instances.clone();
        v.push(inst);
        Layout::new(v)
    }

    /// A copy without `inst`.
    pub fn without(&self, inst: &Instance) -> Layout {
        Layout {
            instances: self.instances.iter().copied().filter(|i| i != inst).collect(),
        }
    }

    /// Memory slices used, as a bit mask.
    pub fn memory_mask(&self, model: &GpuModel) -> u8 {
        self.instances
            .iter()
            .filter_map(|i| model.profiles.get(i.profile).map(|p| p.memory_mask(i.start)))
            .fold(0, |a, b| a | b)
    }

    /// Compute slices used.
    pub fn compute(&self, model: &GpuModel) -> u8 {
        self.instances
            .iter()
            .filter_map(|i| model.profiles.get(i.profile).map(|p| p.compute))
            .sum()
    }

    /// Compute slice sizes of the instances, largest first (`[4, 2, 1]`).
    pub fn slice_sizes(&self, model: &GpuModel) -> Vec<u8> {
        let mut v: Vec<u8> = self
            .instances
            .iter()
            .filter_map(|i| model.profiles.get(i.profile).map(|p| p.compute))
            .collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    }

    /// Checks every driver rule; the error names the first instance that breaks one.
    pub fn validate(&self, model: &GpuModel, driver: Driver) -> Result<(), LayoutError> {
        let mut mask = 0u8;
        let mut compute = 0u8;
        let mut counts = vec![0u8; model.profiles.len()];
        let mut seen_4g = false;
        let mut seen_3g = false;
        let mut media: Option<&Instance> = None;
        for (index, inst) in self.instances.iter().enumerate() {
            let p = model
                .profiles
                .get(inst.profile)
                .ok_or(LayoutError::NoSuchProfile {
                    index,
                    profile: inst.profile,
                })?;
            let name = || display_instance(model, inst);
            if !p.starts.contains(&inst.start) {
                return Err(LayoutError::Placement {
                    instance: name(),
                    start: inst.start,
                    profile: p.name.clone(),
                    allowed: join(&p.starts),
                });
            }
            let m = p.memory_mask(inst.start);
            if mask & m != 0 {
                let first = self.instances[..index]
                    .iter()
                    .find(|o| model.profiles[o.profile].memory_mask(o.start) & m != 0)
                    .map(|o| display_instance(model, o))
                    .unwrap_or_default();
                return Err(LayoutError::Overlap {
                    first,
                    second: name(),
                });
            }
            mask |= m;
            counts[inst.profile] += 1;
            if counts[inst.profile] > p.max_count {
                return Err(LayoutError::Count {
                    instance: name(),
                    profile: p.name.clone(),
                    max: p.max_count,
                });
            }
            if matches!(p.kind, Kind::G1Me | Kind::G2Me) {
                if let Some(other) = media {
                    return Err(LayoutError::MediaEngines {
                        instance: name(),
                        other: display_instance(model, other),
                    });
                }
                media = Some(inst);
            }
            compute += p.compute;
            if compute > model.compute_slices {
                return Err(LayoutError::Compute {
                    instance: name(),
                    used: compute,
                    max: model.compute_slices,
                });
            }
            seen_4g |= p.kind == Kind::G4;
            seen_3g |= p.kind == Kind::G3;
            if driver == Driver::PreR510 && seen_4g && seen_3g {
                return Err(LayoutError::PreR510 { instance: name() });
            }
        }
        Ok(())
    }

    /// Whether `inst` can be added without breaking a rule.
    pub fn fits(&self, model: &GpuModel, driver: Driver, inst: Instance) -> bool {
        !self.contains(&inst) && self.with(inst).validate(model, driver).is_ok()
    }

    /// Whether no instance of the given profiles can be added.
    pub fn is_maximal(&self, model: &GpuModel, driver: Driver, profiles: &[ProfileId]) -> bool {
        profiles.iter().all(|&pid| {
            model.profiles[pid]
                .starts
                .iter()
                .all(|&start| !self.fits(model, driver, Instance { start, profile: pid }))
        })
    }

    /// Reads a layout as people write it for `model` and checks it against the driver's
    /// rules: instances with placements (`3g.40gb@4 2g.20gb@0`, as [`Layout::parse`]
    /// reads them), or without, joined by `+` (`3g.40gb+2g.20gb+1g.10gb+1g.10gb`), which
    /// get the first placement that fits ([`Layout::place`]).
    pub fn read(model: &GpuModel, driver: Driver, text: &str) -> Result<Layout, LayoutError> {
        if text.contains('@') {
            let layout = Layout::parse(model, text)?;
            layout.validate(model, driver)?;
            return Ok(layout);
        }
        let err = |reason: String| LayoutError::Parse {
            text: text.to_string(),
            reason,
        };
        let profiles = text
            .split(|c: char| c == '+' || c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(|name| {
                model
                    .profile_by_name(name)
                    .ok_or_else(|| err(format!("{} has no profile `{name}`", model.key)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if profiles.is_empty() {
            return Err(err("names no instance".into()));
        }
        Layout::place(model, driver, &profiles).ok_or_else(|| {
            err(format!(
                "these instances have no placement together on {} (see `smartmig mig layouts --gpu {}`)",
                model.key, model.key
            ))
        })
    }

    /// The first valid layout of one instance per entry of `profiles`: largest instances
    /// first, each at its lowest allowed start that fits; None when no placement exists.
    pub fn place(model: &GpuModel, driver: Driver, profiles: &[ProfileId]) -> Option<Layout> {
        let mut order: Vec<ProfileId> = profiles.to_vec();
        if order.iter().any(|&p| p >= model.profiles.len()) {
            return None;
        }
        order.sort_by_key(|&p| {
            let q = &model.profiles[p];
            (
                std::cmp::Reverse(q.memory_slices),
                std::cmp::Reverse(q.compute),
                p,
            )
        });
        fn go(
            model: &GpuModel,
            driver: Driver,
            order: &[ProfileId],
            at: Layout,
            min_start: u8,
        ) -> Option<Layout> {
            let Some((&p, rest)) = order.split_first() else {
                return Some(at);
            };
            for &start in &model.profiles[p].starts {
                let inst = Instance { start, profile: p };
                if start < min_start || !at.fits(model, driver, inst) {
                    continue;
                }
                // Equal profiles take increasing starts, so each set is tried once.
                let next_min = if rest.first() == Some(&p) { start + 1 } else { 0 };
                if let Some(done) = go(model, driver, rest, at.with(inst), next_min) {
                    return Some(done);
                }
            }
            None
        }
        go(model, driver, &order, Layout::empty(), 0)
    }

    /// The instances' profile names joined by `+`, largest first: the layout without
    /// its placements (`3g.40gb+2g.20gb+1g.10gb+1g.10gb`).
    pub fn profile_list(&self, model: &GpuModel) -> String {
        let mut v: Vec<&Instance> = self.instances.iter().collect();
        v.sort_by_key(|i| {
            let p = &model.profiles[i.profile];
            (
                std::cmp::Reverse(p.memory_slices),
                std::cmp::Reverse(p.compute),
                i.profile,
            )
        });
        v.iter()
            .map(|i| model.profiles[i.profile].name.as_str())
            .collect::<Vec<_>>()
            .join("+")
    }

    /// Reads `3g.20gb@4,2g.10gb@0` or `3g@4 2g@0` (names or kinds, comma or space separated).
    pub fn parse(model: &GpuModel, text: &str) -> Result<Layout, LayoutError> {
        let err = |reason: String| LayoutError::Parse {
            text: text.to_string(),
            reason,
        };
        let mut v = Vec::new();
        for part in text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
        {
            let (name, start) = part
                .split_once('@')
                .ok_or_else(|| err(format!("`{part}` is not of the form profile@start")))?;
            let profile = model
                .profile_by_name(name)
                .ok_or_else(|| err(format!("{} has no profile `{name}`", model.key)))?;
            let start = start
                .parse::<u8>()
                .map_err(|_| err(format!("`{start}` in `{part}` is not a slice index")))?;
            v.push(Instance { start, profile });
        }
        Ok(Layout::new(v))
    }

    /// The layout with profile names: `4g.20gb@0 3g.20gb@4`.
    pub fn display<'a>(&'a self, model: &'a GpuModel) -> impl fmt::Display + 'a {
        LayoutDisplay { layout: self, model }
    }

    /// The layout as JSON-ready records.
    pub fn to_records(&self, model: &GpuModel) -> Vec<InstanceRecord> {
        self.instances
            .iter()
            .map(|i| InstanceRecord {
                profile: model.profiles[i.profile].name.clone(),
                start: i.start,
            })
            .collect()
    }
}

/// One instance as written in JSON: `{"profile": "3g.20gb", "start": 4}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct InstanceRecord {
    /// Profile name.
    pub profile: String,
    /// Placement start.
    pub start: u8,
}

/// `name@start` of an instance.
pub fn display_instance(model: &GpuModel, inst: &Instance) -> String {
    match model.profiles.get(inst.profile) {
        Some(p) => format!("{}@{}", p.name, inst.start),
        None => format!("profile#{}@{}", inst.profile, inst.start),
    }
}

struct LayoutDisplay<'a> {
    layout: &'a Layout,
    model: &'a GpuModel,
}

impl fmt::Display for LayoutDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.layout.instances.is_empty() {
            return f.write_str("(empty)");
        }
        let parts: Vec<String> = self
            .layout
            .instances
            .iter()
            .map(|i| display_instance(self.model, i))
            .collect();
        f.write_str(&parts.join(" "))
    }
}

fn join(v: &[u8]) -> String {
    v.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drivers_spelling_reads_back_as_that_driver() {
        #[derive(serde::Deserialize)]
        struct D {
            driver: Driver,
        }
        for d in [Driver::R510, Driver::PreR510] {
            let read: D = toml::from_str(&format!("driver = \"{}\"", d.as_str())).unwrap();
            assert_eq!(read.driver, d);
        }
    }
    use crate::mig::catalogue::Catalogue;

    fn a100() -> GpuModel {
        Catalogue::embedded().model("a100-40gb").unwrap().clone()
    }

    #[test]
    fn a_misplaced_instance_is_named_with_its_allowed_starts() {
        let m = a100();
        let l = Layout::parse(&m, "3g.20gb@2").unwrap();
        let e = l.validate(&m, Driver::R510).unwrap_err().to_string();
        assert_eq!(
            e,
            "3g.20gb@2: start 2 is not an allowed placement for 3g.20gb (allowed: 0,4)"
        );
    }

    #[test]
    fn overlapping_instances_are_both_named() {
        let m = a100();
        let l = Layout::parse(&m, "4g@0 2g@2").unwrap();
        let e = l.validate(&m, Driver::R510).unwrap_err().to_string();
        assert_eq!(e, "4g.20gb@0 and 2g.10gb@2 overlap in memory slices");
    }

    #[test]
    fn four_and_three_share_a_gpu_only_from_r510() {
        let m = a100();
        let l = Layout::parse(&m, "4g@0,3g@4").unwrap();
        assert!(l.validate(&m, Driver::R510).is_ok());
        assert!(matches!(
            l.validate(&m, Driver::PreR510),
            Err(LayoutError::PreR510 { .. })
        ));
    }

    #[test]
    fn the_media_engine_profile_is_limited_to_one() {
        let m = a100();
        let l = Layout::parse(&m, "1g+me@0 1g+me@1").unwrap();
        assert!(matches!(
            l.validate(&m, Driver::R510),
            Err(LayoutError::Count { max: 1, .. })
        ));
    }

    #[test]
    fn parse_names_the_bad_part() {
        let m = a100();
        let e = Layout::parse(&m, "3g.40gb@0").unwrap_err().to_string();
        assert!(e.contains("a100-40gb has no profile `3g.40gb`"), "{e}");
    }

    #[test]
    fn an_instance_list_without_placements_gets_the_first_that_fits() {
        let m = Catalogue::embedded().model("a100-80gb").unwrap().clone();
        let l = Layout::read(&m, Driver::R510, "3g.40gb+2g.20gb+1g.10gb+1g.10gb").unwrap();
        // 1g.10gb cannot start at 7 (its placements are 0..=6): the 3g goes to 4.
        assert_eq!(
            l.display(&m).to_string(),
            "2g.20gb@0 1g.10gb@2 1g.10gb@3 3g.40gb@4"
        );
        assert_eq!(l.profile_list(&m), "3g.40gb+2g.20gb+1g.10gb+1g.10gb");
        // 1g.20gb (double memory) after a 4g and a 2g: only start 6 is left for it.
        let l = Layout::read(&m, Driver::R510, "1g.20gb+2g.20gb+4g.40gb").unwrap();
        assert_eq!(l.display(&m).to_string(), "4g.40gb@0 2g.20gb@4 1g.20gb@6");
        let e = Layout::read(&m, Driver::R510, "4g.40gb+4g.40gb")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no placement together on a100-80gb"), "{e}");
        let e = Layout::read(&m, Driver::PreR510, "4g.40gb+3g.40gb")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no placement together"), "{e}");
        let e = Layout::read(&m, Driver::R510, "3g.40gb@2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an allowed placement"), "{e}");
        let e = Layout::read(&m, Driver::R510, "5g.50gb").unwrap_err().to_string();
        assert!(e.contains("a100-80gb has no profile `5g.50gb`"), "{e}");
    }

    #[test]
    fn the_a30_takes_four_compute_slices_at_most() {
        let m = Catalogue::embedded().model("a30-24gb").unwrap().clone();
        assert!(Layout::read(&m, Driver::R510, "2g.12gb+1g.6gb+1g.6gb").is_ok());
        let l = Layout::parse(&m, "4g@0 1g@3").unwrap();
        assert!(matches!(
            l.validate(&m, Driver::R510),
            Err(LayoutError::Overlap { .. })
        ));
        let e = Layout::parse(&m, "2g@0 2g@2 1g@3")
            .unwrap()
            .validate(&m, Driver::R510);
        assert!(e.is_err());
    }

    #[test]
    fn maximality_sees_a_free_slot() {
        let m = a100();
        let base = m.profiles_of_kinds(&Kind::BASE);
        assert!(!Layout::parse(&m, "4g@0 2g@4")
            .unwrap()
            .is_maximal(&m, Driver::R510, &base));
        assert!(Layout::parse(&m, "4g@0 2g@4 1g@6")
            .unwrap()
            .is_maximal(&m, Driver::R510, &base));
    }
}
