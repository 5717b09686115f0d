//! The named configurations (c1..c12, q1..q4) resolved to concrete layouts on a GPU
//! model, and the layout entries of a configuration file (a configuration name or an
//! instance list) read against them.

use super::catalogue::{Catalogue, CatalogueError, GpuModel};
use super::layout::{Driver, Instance, Layout, LayoutError};

/// One named configuration on one GPU model.
#[derive(Debug, Clone, PartialEq)]
pub struct Configuration {
    /// Name, e.g. `c3`.
    pub name: String,
    /// The concrete placement NVML gets.
    pub layout: Layout,
    /// Compute slice sizes, largest first.
    pub sizes: Vec<u8>,
    /// Why the GPU cannot take this configuration under the driver rules, if it cannot.
    pub unavailable: Option<String>,
}

impl Configuration {
    /// Whether the GPU can take this configuration.
    pub fn is_available(&self) -> bool {
        self.unavailable.is_none()
    }
}

/// Resolves every configuration of the catalogue for `model` (those filling its memory
/// slices), in action-space order.
///
/// Fails when the model lacks a profile kind a configuration uses, or has no configuration.
/// A configuration whose placement breaks a rule of `driver` (c2 before R510) stays in the
/// list, marked unavailable, so that the action space has the same size on every GPU.
pub fn resolve_configurations(
    cat: &Catalogue,
    model: &GpuModel,
    driver: Driver,
) -> Result<Vec<Configuration>, CatalogueError> {
    let out = cat
        .configurations_for(model)
        .map(|def| {
            let invalid = |message: String| CatalogueError::Invalid {
                origin: format!("configuration `{}` on {}", def.name, model.key),
                message,
            };
            let instances = def
                .placements
                .iter()
                .map(|&(kind, start)| {
                    model
                        .profile_of_kind(kind)
                        .map(|profile| Instance { start, profile })
                        .ok_or_else(|| invalid(format!("the model has no {kind} profile")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let layout = Layout::new(instances);
            let unavailable = layout.validate(model, driver).err().map(|e| e.to_string());
            Ok(Configuration {
                name: def.name.clone(),
                sizes: layout.slice_sizes(model),
                layout,
                unavailable,
            })
        })
        .collect::<Result<Vec<_>, CatalogueError>>()?;
    if out.is_empty() {
        return Err(CatalogueError::Invalid {
            origin: format!("configurations of {}", model.key),
            message: format!(
                "no configuration fills its {} memory slices (add one with memory_slices = {})",
                model.memory_slices, model.memory_slices
            ),
        });
    }
    Ok(out)
}

impl Configuration {
    /// A configuration of its own for a layout that is none of the named ones.
    pub fn custom(name: &str, model: &GpuModel, layout: Layout) -> Configuration {
        Configuration {
            name: name.to_string(),
            sizes: layout.slice_sizes(model),
            layout,
            unavailable: None,
        }
    }
}

/// What one layout entry of a configuration file (`static_layout`, a periodic `layout`, a
/// baseline) names on one GPU model.
#[derive(Debug, Clone, PartialEq)]
pub enum LayoutEntry {
    /// One of the model's configurations (by name, or an instance list equal to it up to
    /// placement).
    Configuration(usize),
    /// A valid layout that is none of the model's configurations.
    Layout(Layout),
}

/// Reads `text` on `model`: a configuration name of `configs`, or an instance list as
/// [`Layout::read`] takes it. `Ok(None)`: the entry is for other models (a configuration
/// name of another geometry, or profiles the model does not have); an error: it names
/// something of this model that the driver refuses.
pub fn read_entry(
    cat: &Catalogue,
    configs: &[Configuration],
    model: &GpuModel,
    driver: Driver,
    text: &str,
) -> Result<Option<LayoutEntry>, String> {
    let text = text.trim();
    if let Some(i) = configs.iter().position(|c| c.name.eq_ignore_ascii_case(text)) {
        return match &configs[i].unavailable {
            Some(why) => Err(format!("{} cannot take {}: {why}", model.key, configs[i].name)),
            None => Ok(Some(LayoutEntry::Configuration(i))),
        };
    }
    if cat
        .configurations
        .iter()
        .any(|c| c.name.eq_ignore_ascii_case(text))
    {
        return Ok(None);
    }
    match Layout::read(model, driver, text) {
        Ok(layout) => Ok(Some(match identify(configs, model, &layout) {
            Some(i) if configs[i].is_available() => LayoutEntry::Configuration(i),
            _ => LayoutEntry::Layout(layout),
        })),
        Err(LayoutError::Parse { reason, .. }) if reason.contains("has no profile") => Ok(None),
        Err(e) => Err(format!("`{text}` on {}: {e}", model.key)),
    }
}

/// The configuration a layout is, ignoring permutations: same multiset of profiles.
pub fn identify(configs: &[Configuration], model: &GpuModel, layout: &Layout) -> Option<usize> {
    let key = |l: &Layout| {
        let mut p: Vec<_> = l
            .instances()
            .iter()
            .map(|i| model.profiles[i.profile].kind)
            .collect();
        p.sort();
        p
    };
    let want = key(layout);
    configs.iter().position(|c| key(&c.layout) == want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::catalogue::Kind;
    use crate::mig::enumerate::maximal_layouts;

    #[test]
    fn the_twelve_configurations_are_valid_on_every_8_slice_model_and_c2_needs_r510() {
        let cat = Catalogue::embedded();
        for m in cat.models.iter().filter(|m| m.memory_slices == 8) {
            let cs = resolve_configurations(&cat, m, Driver::R510).unwrap();
            assert_eq!(cs.len(), 12);
            assert_eq!(cs[2].sizes, vec![4, 2, 1], "{}", m.key);
            assert!(cs.iter().all(Configuration::is_available));
            // c2 is the only 4g+3g configuration: it alone is unavailable before R510.
            let pre = resolve_configurations(&cat, m, Driver::PreR510).unwrap();
            let names: Vec<&str> = pre
                .iter()
                .filter(|c| !c.is_available())
                .map(|c| c.name.as_str())
                .collect();
            assert_eq!(names, ["c2"]);
        }
    }

    #[test]
    fn configurations_use_all_memory_and_are_maximal_on_every_model() {
        let cat = Catalogue::embedded();
        let with_double = [Kind::G1, Kind::G1Double, Kind::G2, Kind::G3, Kind::G4, Kind::G7];
        for m in &cat.models {
            let maximal = maximal_layouts(m, Driver::R510, &with_double);
            let cs = resolve_configurations(&cat, m, Driver::R510).unwrap();
            assert_eq!(cs.len(), if m.key == "a30-24gb" { 4 } else { 12 }, "{}", m.key);
            for c in cs {
                assert_eq!(
                    c.layout.memory_mask(m),
                    m.full_memory_mask(),
                    "{} {}",
                    m.key,
                    c.name
                );
                assert!(maximal.contains(&c.layout), "{} {} is not maximal", m.key, c.name);
            }
        }
    }

    #[test]
    fn an_entry_is_a_configuration_a_layout_or_for_another_model() {
        let cat = Catalogue::embedded();
        let m = cat.model("a100-80gb").unwrap();
        let cs = resolve_configurations(&cat, m, Driver::R510).unwrap();
        let read = |t: &str| read_entry(&cat, &cs, m, Driver::R510, t);
        assert_eq!(read("C5"), Ok(Some(LayoutEntry::Configuration(4))));
        // c7 up to placement.
        assert_eq!(
            read("3g.40gb+2g.20gb+1g.10gb+1g.10gb"),
            Ok(Some(LayoutEntry::Configuration(6)))
        );
        let Ok(Some(LayoutEntry::Layout(l))) = read("3g.40gb+2g.20gb+1g.20gb") else {
            panic!("{:?}", read("3g.40gb+2g.20gb+1g.20gb"))
        };
        assert_eq!(l.display(m).to_string(), "3g.40gb@0 2g.20gb@4 1g.20gb@6");
        assert_eq!(read("q2"), Ok(None), "an A30 configuration");
        assert_eq!(read("2g.12gb+2g.12gb"), Ok(None), "A30 profiles");
        let e = read("3g.40gb@2").unwrap_err();
        assert!(e.contains("not an allowed placement"), "{e}");
        let pre = resolve_configurations(&cat, m, Driver::PreR510).unwrap();
        let e = read_entry(&cat, &pre, m, Driver::PreR510, "c2").unwrap_err();
        assert!(e.contains("a100-80gb cannot take c2"), "{e}");
    }

    #[test]
    fn identify_ignores_permutations() {
        let cat = Catalogue::embedded();
        let m = cat.model("a100-40gb").unwrap();
        let cs = resolve_configurations(&cat, m, Driver::R510).unwrap();
        let permuted = Layout::parse(m, "3g@0 2g@4 2g@6").unwrap_or_default();
        // 2g@6 is not a legal placement, but identification is by profile multiset only.
        assert_eq!(
            identify(&cs, m, &permuted).map(|i| cs[i].name.as_str()),
            Some("c6")
        );
        assert_eq!(identify(&cs, m, &Layout::parse(m, "1g@0").unwrap()), None);
    }
}
