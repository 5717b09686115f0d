//! The mark the plugin leaves in the admin comment of a job it routed: the request as the
//! user wrote it and the time limit before rescaling. Only jobs with this mark are ever
//! re-routed by the controller (an explicit `gpu:7g.40gb` is the user's choice), and they
//! are re-routed from what the user asked, not from the type they were given. Users cannot
//! forge it: only Slurm admins can set a job's admin comment.

use serde::{Deserialize, Serialize};

use super::hints::HINT_PREFIX;

/// First Slurm release (a `SLURM_VERSION_NUMBER`, 23.02.6) whose job update replaces a
/// pending job's GPU request; before, it merges the new type into the old (SchedMD bug
/// 17184), so a job moved off a vanished type keeps asking for it and cannot start.
pub const RETYPE_SINCE: u32 = 0x17_02_06;

/// The word that starts the mark in the admin comment.
pub const MARK: &str = "smartmig-routed=";

/// What a routed job asked for before the plugin rewrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutedFrom {
    /// The four tres fields as submitted (in `TresField` order).
    pub tres: [Option<String>; 4],
    /// The time limit as submitted, minutes.
    pub time_limit_min: Option<u32>,
}

impl RoutedFrom {
    /// `existing` (the job's admin comment, maybe empty) with this mark added (an earlier
    /// mark replaced).
    pub fn mark(&self, existing: Option<&str>) -> String {
        // JSON without spaces: the tres strings have none, so the mark is one word.
        let json = serde_json::to_string(self).unwrap_or_default();
        let kept: Vec<&str> = existing
            .unwrap_or("")
            .split_whitespace()
            .filter(|w| !w.starts_with(MARK))
            .collect();
        kept.into_iter()
            .chain(std::iter::once(format!("{MARK}{json}").as_str()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The mark in an admin comment, if any.
    pub fn find(admin_comment: &str) -> Option<RoutedFrom> {
        admin_comment
            .split_whitespace()
            .find_map(|w| w.strip_prefix(MARK))
            .and_then(|json| serde_json::from_str(json).ok())
    }
}

/// `comment` (a job's `--comment`, with its hints) asking for at least `gb` of GPU memory
/// per instance: a smaller `gpumem=` hint is raised, none is added.
pub fn with_min_gpumem(comment: Option<&str>, gb: f64) -> String {
    let mut out = Vec::new();
    let mut have = 0.0f64;
    for word in comment.unwrap_or("").split_whitespace() {
        let Some(pairs) = word.strip_prefix(HINT_PREFIX) else {
            out.push(word.to_string());
            continue;
        };
        let mut keep = Vec::new();
        for pair in pairs.split(';').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("gpumem", v)) => {
                    have = have.max(
                        super::hints::parse_hints(&format!("{HINT_PREFIX}gpumem={v}"))
                            .ok()
                            .and_then(|h| h.gpumem_gb)
                            .unwrap_or(0.0),
                    );
                }
                _ => keep.push(pair),
            }
        }
        if !keep.is_empty() {
            out.push(format!("{HINT_PREFIX}{}", keep.join(";")));
        }
    }
    out.push(format!("{HINT_PREFIX}gpumem={}", have.max(gb)));
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_round_trips_beside_the_admins_text_and_replaces_an_old_one() {
        let from = RoutedFrom {
            tres: [Some("gres:gpu:mig:1".into()), None, None, None],
            time_limit_min: Some(60),
        };
        let once = from.mark(Some("ticket 4711"));
        assert!(once.starts_with("ticket 4711 "), "{once}");
        assert_eq!(RoutedFrom::find(&once), Some(from.clone()));
        let twice = from.mark(Some(&once));
        assert_eq!(twice.matches(MARK).count(), 1);
        assert_eq!(RoutedFrom::find("no mark here"), None);
    }

    #[test]
    fn a_smaller_memory_hint_is_raised_and_other_hints_kept() {
        assert_eq!(with_min_gpumem(None, 20.0), "smartmig:gpumem=20");
        assert_eq!(
            with_min_gpumem(Some("run 7 smartmig:class=bert-train;gpumem=10"), 20.0),
            "run 7 smartmig:class=bert-train smartmig:gpumem=20"
        );
        assert_eq!(
            with_min_gpumem(Some("smartmig:gpumem=40"), 20.0),
            "smartmig:gpumem=40"
        );
        let h = super::super::hints::parse_hints(&with_min_gpumem(Some("smartmig:due=2h"), 5.0)).unwrap();
        assert_eq!((h.gpumem_gb, h.due_min), (Some(5.0), Some(120.0)));
    }
}
