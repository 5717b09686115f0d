//! Positional layouts of GPU instances on one GPU, and the driver's rules for them.

use std::fmt;

use serde::Serialize;

use super::catalogue::{GpuModel, Kind, ProfileId, COMPUTE_SLICES};

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
            compute += p.compute;
            if compute > COMPUTE_SLICES {
                return Err(LayoutError::Compute {
                    instance: name(),
                    used: compute,
                    max: COMPUTE_SLICES,
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
