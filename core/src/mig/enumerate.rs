//! Enumeration of the maximal positional layouts of a GPU model.

use super::catalogue::{GpuModel, Kind, ProfileId};
use super::layout::{Driver, Instance, Layout};

/// Every placement (profile, start) of the given profiles, in profile then start order.
pub fn candidate_instances(model: &GpuModel, profiles: &[ProfileId]) -> Vec<Instance> {
    profiles
        .iter()
        .flat_map(|&pid| {
            model.profiles[pid]
                .starts
                .iter()
                .map(move |&start| Instance { start, profile: pid })
        })
        .collect()
}

/// All maximal layouts over the profiles of `kinds`: valid, and no further instance of
/// those profiles fits. Sorted by their display order (instances by start).
pub fn maximal_layouts(model: &GpuModel, driver: Driver, kinds: &[Kind]) -> Vec<Layout> {
    let profiles = model.profiles_of_kinds(kinds);
    let candidates = candidate_instances(model, &profiles);
    let mut out = Vec::new();
    // Depth-first over candidates in a fixed order, so each set is visited once; the
    // validity rules are hereditary, so a branch that breaks one is cut at once.
    let mut stack: Vec<(Layout, usize)> = vec![(Layout::empty(), 0)];
    while let Some((layout, next)) = stack.pop() {
        if layout.is_maximal(model, driver, &profiles) {
            out.push(layout.clone());
        }
        for (i, &c) in candidates.iter().enumerate().skip(next) {
            if layout.fits(model, driver, c) {
                stack.push((layout.with(c), i + 1));
            }
        }
    }
    out.sort_by(|a, b| a.instances().cmp(b.instances()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::catalogue::Catalogue;
    use std::collections::HashSet;

    #[test]
    fn a100_has_19_maximal_layouts_and_18_before_r510() {
        let cat = Catalogue::embedded();
        let m = cat.model("a100-40gb").unwrap();
        assert_eq!(maximal_layouts(m, Driver::R510, &Kind::BASE).len(), 19);
        assert_eq!(maximal_layouts(m, Driver::PreR510, &Kind::BASE).len(), 18);
    }

    /// The maximal layouts of the base profiles, worked out by hand from NVIDIA's placement
    /// tables (`nvidia-smi mig -lgipp`): on 8-memory-slice GPUs the halves 0..=3 and 4..=7
    /// fill independently (1g cannot start at 7), plus the whole GPU.
    const EIGHT_SLICE_MAXIMAL: [&str; 19] = [
        "7g@0",
        "4g@0 3g@4",
        "4g@0 2g@4 1g@6",
        "4g@0 1g@4 1g@5 1g@6",
        "3g@0 3g@4",
        "3g@0 2g@4 1g@6",
        "3g@0 1g@4 1g@5 1g@6",
        "2g@0 2g@2 3g@4",
        "2g@0 2g@2 2g@4 1g@6",
        "2g@0 2g@2 1g@4 1g@5 1g@6",
        "2g@0 1g@2 1g@3 3g@4",
        "2g@0 1g@2 1g@3 2g@4 1g@6",
        "2g@0 1g@2 1g@3 1g@4 1g@5 1g@6",
        "1g@0 1g@1 2g@2 3g@4",
        "1g@0 1g@1 2g@2 2g@4 1g@6",
        "1g@0 1g@1 2g@2 1g@4 1g@5 1g@6",
        "1g@0 1g@1 1g@2 1g@3 3g@4",
        "1g@0 1g@1 1g@2 1g@3 2g@4 1g@6",
        "1g@0 1g@1 1g@2 1g@3 1g@4 1g@5 1g@6",
    ];

    /// The A30's, by hand from its table: 1g at 0..=3, 2g at 0 and 2, 4g (the whole GPU) at 0.
    const A30_MAXIMAL: [&str; 5] = [
        "4g@0",
        "2g@0 2g@2",
        "2g@0 1g@2 1g@3",
        "1g@0 1g@1 2g@2",
        "1g@0 1g@1 1g@2 1g@3",
    ];

    fn kinds_at(m: &GpuModel, l: &Layout) -> String {
        l.instances()
            .iter()
            .map(|i| format!("{}@{}", m.profiles[i.profile].kind, i.start))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn every_model_lists_the_layouts_of_nvidias_placement_tables() {
        let cat = Catalogue::embedded();
        for m in &cat.models {
            let want: HashSet<String> = if m.memory_slices == 4 {
                A30_MAXIMAL.iter().map(|s| s.to_string()).collect()
            } else {
                EIGHT_SLICE_MAXIMAL.iter().map(|s| s.to_string()).collect()
            };
            let got: HashSet<String> = maximal_layouts(m, Driver::R510, &Kind::BASE)
                .iter()
                .map(|l| kinds_at(m, l))
                .collect();
            assert_eq!(got, want, "{}", m.key);
        }
    }

    #[test]
    fn the_a30_has_one_media_engine_instance_at_most() {
        let cat = Catalogue::embedded();
        let m = cat.model("a30-24gb").unwrap();
        let all = maximal_layouts(m, Driver::R510, &Kind::ALL);
        let me: Vec<String> = all
            .iter()
            .map(|l| kinds_at(m, l))
            .filter(|t| t.contains("+me"))
            .collect();
        assert!(me.contains(&"2g+me@0 2g@2".to_string()), "{me:?}");
        assert!(me.contains(&"1g+me@0 1g@1 2g@2".to_string()), "{me:?}");
        assert!(me.iter().all(|t| t.matches("+me").count() == 1), "{me:?}");
    }

    #[test]
    fn hopper_models_share_the_a100_geometry() {
        let cat = Catalogue::embedded();
        let a = cat.model("a100-40gb").unwrap();
        let shape = |m: &GpuModel| -> Vec<Vec<(Kind, u8)>> {
            maximal_layouts(m, Driver::R510, &Kind::BASE)
                .iter()
                .map(|l| {
                    l.instances()
                        .iter()
                        .map(|i| (m.profiles[i.profile].kind, i.start))
                        .collect()
                })
                .collect()
        };
        for key in cat
            .models
            .iter()
            .filter(|m| m.memory_slices == 8)
            .map(|m| m.key.as_str())
        {
            assert_eq!(shape(cat.model(key).unwrap()), shape(a), "{key}");
        }
    }

    /// Brute force over every subset of placements: an independent check of the DFS.
    fn brute_force(model: &GpuModel, driver: Driver, kinds: &[Kind]) -> HashSet<Layout> {
        let profiles = model.profiles_of_kinds(kinds);
        let cands = candidate_instances(model, &profiles);
        assert!(
            cands.len() <= 20,
            "brute force over {} placements is too large",
            cands.len()
        );
        (0u32..(1 << cands.len()))
            .map(|bits| {
                Layout::new(
                    (0..cands.len())
                        .filter(|i| bits & (1 << i) != 0)
                        .map(|i| cands[i])
                        .collect(),
                )
            })
            .filter(|l| l.validate(model, driver).is_ok() && l.is_maximal(model, driver, &profiles))
            .collect()
    }

    #[test]
    fn enumeration_equals_brute_force_over_placements() {
        let cat = Catalogue::embedded();
        let with_double = [Kind::G1, Kind::G1Double, Kind::G2, Kind::G3, Kind::G4, Kind::G7];
        for model in &cat.models {
            for driver in [Driver::R510, Driver::PreR510] {
                for kinds in [&Kind::BASE[..], &with_double[..]] {
                    let enumerated: HashSet<Layout> =
                        maximal_layouts(model, driver, kinds).into_iter().collect();
                    for l in &enumerated {
                        assert!(l.validate(model, driver).is_ok(), "{}", l.display(model));
                    }
                    assert_eq!(
                        enumerated,
                        brute_force(model, driver, kinds),
                        "{} {driver:?} {kinds:?}",
                        model.key
                    );
                }
            }
        }
    }

    #[test]
    fn every_profile_enumeration_includes_media_engine_layouts() {
        let cat = Catalogue::embedded();
        let m = cat.model("a100-40gb").unwrap();
        let all = maximal_layouts(m, Driver::R510, &Kind::ALL);
        let me = m.profile_of_kind(Kind::G1Me).unwrap();
        assert!(all.iter().any(|l| l.instances().iter().any(|i| i.profile == me)));
        assert!(all.len() > 19);
    }
}
