//! The mark the plugin leaves in the admin comment of a job it routed: the request as the
//! user wrote it and the time limit before rescaling. Only jobs with this mark are ever
//! re-routed by the controller (an explicit `gpu:7g.40gb` is the user's choice), and they
//! are re-routed from what the user asked, not from the type they were given. Users cannot
//! forge it: only Slurm admins can set a job's admin comment.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::hints::HINT_PREFIX;
use super::request::TresField;

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
    /// The four tres fields as routed (what the plugin, or smartmigd re-routing, wrote).
    /// A job whose GPU request differs from them was changed since (`scontrol update`):
    /// the mark no longer says what its owner asks for. Absent in marks written before it
    /// was recorded (trusted as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<[Option<String>; 4]>,
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

    /// `tres` (a job's four fields) with the fields a routing `written` over them: what a
    /// mark's [`RoutedFrom::to`] records.
    pub fn routed_to(tres: &[Option<String>; 4], written: &[(TresField, String)]) -> [Option<String>; 4] {
        let mut to = tres.clone();
        for (field, text) in written {
            to[*field as usize] = Some(text.clone());
        }
        to
    }

    /// The mark in an admin comment, if any.
    pub fn find(admin_comment: &str) -> Option<RoutedFrom> {
        admin_comment
            .split_whitespace()
            .find_map(|w| w.strip_prefix(MARK))
            .and_then(|json| serde_json::from_str(json).ok())
    }

    /// The mark in `admin_comment` if it still describes a job whose tres fields are now
    /// `tres`: the GPUs they ask for (type and count per field, however the Slurm release
    /// spells them) are those the mark was routed to.
    pub fn find_current(admin_comment: &str, tres: &[Option<String>; 4]) -> Option<RoutedFrom> {
        let mark = Self::find(admin_comment)?;
        let current = match &mark.to {
            None => true,
            Some(to) => to
                .iter()
                .zip(tres)
                .all(|(a, b)| gpus_asked(a.as_deref()) == gpus_asked(b.as_deref())),
        };
        current.then_some(mark)
    }
}

/// The GPUs a tres field asks for, count by type (untyped: ""); None when unreadable.
fn gpus_asked(field: Option<&str>) -> Option<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    for raw in crate::tres::entries(field.unwrap_or("")) {
        let e = crate::tres::parse(raw).ok()?;
        if e.is_gpu() {
            *out.entry(e.gpu_type.unwrap_or("").to_string()).or_insert(0) += e.count().ok()?;
        }
    }
    Some(out)
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
            to: None,
        };
        let once = from.mark(Some("ticket 4711"));
        assert!(once.starts_with("ticket 4711 "), "{once}");
        assert_eq!(RoutedFrom::find(&once), Some(from.clone()));
        let twice = from.mark(Some(&once));
        assert_eq!(twice.matches(MARK).count(), 1);
        assert_eq!(RoutedFrom::find("no mark here"), None);
    }

    #[test]
    fn a_mark_is_current_while_the_job_asks_for_the_gpus_it_was_routed_to() {
        let routed = |to: &str| RoutedFrom {
            tres: [Some("gres:gpu:mig:1".into()), None, None, None],
            time_limit_min: Some(60),
            to: Some([Some(to.into()), None, None, None]),
        };
        let mark = routed("gres:gpu:3g.20gb:1").mark(Some("ticket 4711"));
        let now = |t: &str| [Some(t.to_string()), None, None, None];
        // 22.05's and 23.02's spellings of the same request.
        for same in [
            "gres:gpu:3g.20gb:1",
            "gres/gpu:3g.20gb=1",
            "gres/gpu:3g.20gb:1,gres/shard:2",
        ] {
            assert!(RoutedFrom::find_current(&mark, &now(same)).is_some(), "{same}");
        }
        // Changed since: another type, another count, another field, unreadable.
        for changed in [
            "gres/gpu:2g.10gb=1",
            "gres/gpu:3g.20gb=2",
            "gres/gpu=1",
            "gres/gpu:3g.20gb=x",
        ] {
            assert!(
                RoutedFrom::find_current(&mark, &now(changed)).is_none(),
                "{changed}"
            );
        }
        let moved = [None, Some("gres/gpu:3g.20gb=1".to_string()), None, None];
        assert!(RoutedFrom::find_current(&mark, &moved).is_none());
        // A mark from before `to` was recorded is trusted as before.
        let old = r#"smartmig-routed={"tres":["gres:gpu:mig:1",null,null,null],"time_limit_min":60}"#;
        let found = RoutedFrom::find_current(old, &now("gres/gpu:1g.5gb=4")).expect("an old mark");
        assert_eq!(found.to, None);
        assert_eq!(RoutedFrom::find_current("no mark", &now("gres/gpu=1")), None);
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
