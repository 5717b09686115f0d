//! Job classes (speed-up curves and memory needs) and the globs that match jobs to them.

use crate::mig::Kind;

/// The slice sizes a speed-up table covers, in table order.
pub const SIZES: [Kind; 5] = [Kind::G1, Kind::G2, Kind::G3, Kind::G4, Kind::G7];

/// A kind of job: how it speeds up with slice size and how much GPU memory it needs.
#[derive(Debug, Clone, PartialEq)]
pub struct JobClass {
    /// Name used in rules and hints.
    pub name: String,
    /// Speed-up over 1g on 1g, 2g, 3g, 4g, 7g.
    pub speedup: [f64; 5],
    /// GPU memory one instance must have, in GB (0: any).
    pub gpumem_gb: f64,
}

impl JobClass {
    /// Speed-up over 1g on a slice of `compute` compute slices (1g* counts as 1g).
    pub fn speedup_on(&self, compute: u8) -> f64 {
        speedup_on(&self.speedup, compute)
    }
}

/// Speed-up from a 1/2/3/4/7 table for `compute` slices; sizes between entries take the smaller.
pub fn speedup_on(table: &[f64; 5], compute: u8) -> f64 {
    match compute {
        0 | 1 => table[0],
        2 => table[1],
        3 => table[2],
        4..=6 => table[3],
        _ => table[4],
    }
}

/// The built-in classes: docs/model.md §2's four reference job kinds, and `default`.
///
/// `default` assumes linear scaling: with it a rescaled time limit is never shorter than
/// the job needs, whatever its real curve, so an unclassified job is never killed early.
/// Memory needs are our assumptions for the reference models at usual batch sizes.
pub fn builtin_classes() -> Vec<JobClass> {
    let c = |name: &str, speedup: [f64; 5], gpumem_gb: f64| JobClass {
        name: name.to_string(),
        speedup,
        gpumem_gb,
    };
    vec![
        c("bert-train", [1.0, 1.864, 2.636, 3.227, 4.773], 10.0),
        c("resnet-train", [1.0, 1.765, 2.309, 2.471, 2.868], 8.0),
        c("bert-infer", [1.0, 2.0, 3.0, 4.0, 7.0], 4.0),
        c("resnet-infer", [1.0, 2.0, 3.0, 3.906, 5.75], 4.0),
        c("default", [1.0, 2.0, 3.0, 4.0, 7.0], 0.0),
    ]
}

/// Whether a glob can be used (non-empty).
pub fn glob_is_valid(pattern: &str) -> bool {
    !pattern.is_empty()
}

/// Glob match: `*` matches any run of characters, `?` exactly one; nothing else is special.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Iterative matcher with one backtrack point: linear in practice, no recursion.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_prefixes_and_single_characters() {
        assert!(glob_match("bert-*", "bert-train-7"));
        assert!(!glob_match("bert-*", "xbert-train"));
        assert!(glob_match("job?", "job7"));
        assert!(!glob_match("job?", "job77"));
        assert!(glob_match("*infer*", "resnet-infer-batch"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
        assert!(glob_match("*", ""));
    }

    #[test]
    fn builtin_speedups_follow_the_model() {
        let all = builtin_classes();
        let bert = all.iter().find(|c| c.name == "bert-train").unwrap();
        assert_eq!(bert.speedup_on(3), 2.636);
        assert_eq!(bert.speedup_on(7), 4.773);
        for c in &all {
            assert!(
                crate::routing::config::check_speedup(&c.speedup).is_ok(),
                "{}",
                c.name
            );
        }
        assert!(all.iter().any(|c| c.name == "default"));
    }
}
