//! The named configurations (c1..c12) resolved to concrete layouts on a GPU model.

use super::catalogue::{Catalogue, CatalogueError, GpuModel};
use super::layout::{Driver, Instance, Layout};

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

/// Resolves every configuration of the catalogue on `model`, in action-space order.
///
/// Fails when the model lacks a profile kind a configuration uses. A configuration whose
/// placement breaks a rule of `driver` (c2 before R510) stays in the list, marked unavailable,
/// so that the action space has the same size on every GPU.
pub fn resolve_configurations(
    cat: &Catalogue,
    model: &GpuModel,
    driver: Driver,
) -> Result<Vec<Configuration>, CatalogueError> {
    cat.configurations
        .iter()
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
        .collect()
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
    fn the_twelve_configurations_are_valid_on_every_model_and_c2_needs_r510() {
        let cat = Catalogue::embedded();
        for m in &cat.models {
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
    fn configurations_use_all_memory_and_are_maximal() {
        let cat = Catalogue::embedded();
        let m = cat.model("a100-40gb").unwrap();
        let with_double = [Kind::G1, Kind::G1Double, Kind::G2, Kind::G3, Kind::G4, Kind::G7];
        let maximal = maximal_layouts(m, Driver::R510, &with_double);
        for c in resolve_configurations(&cat, m, Driver::R510).unwrap() {
            assert_eq!(c.layout.memory_mask(m), 0xff, "{}", c.name);
            assert!(maximal.contains(&c.layout), "{} is not maximal", c.name);
        }
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
