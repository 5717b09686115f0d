//! The rules smartmigd re-lays out under, as one comparable line: what a time-of-day
//! schedule's search assumed (`[policy] periodic_tuned_under`, written by `smartmig
//! tune-periodic`) against what the daemon runs now.

use std::fmt;

use super::{Config, Mode, PolicyKind, Requeued};

/// The settings that change what a re-layout costs, and so what a schedule gains; two are
/// the same rules when their lines (`Display`) are equal.
#[derive(Debug, Clone)]
pub struct RelayoutRules {
    /// Drain or preempt (a dry run changes nothing and has no rules).
    pub mode: Mode,
    /// `[controller.central] padding`.
    pub padding: bool,
    /// What a requeued job keeps (preempt only).
    pub requeued: Requeued,
    /// `[controller.central] requeue_max_run_s` (preempt only).
    pub requeue_max_run_s: Option<f64>,
    /// `[controller.central] min_relayout_interval_s`.
    pub min_relayout_interval_s: f64,
    /// `[controller.central] persist_cycles`.
    pub persist_cycles: u32,
    /// `[controller.central] max_nodes_per_batch`.
    pub max_nodes_per_batch: u32,
}

impl RelayoutRules {
    /// The rules of `config`'s daemon; None in dry-run mode.
    pub fn of(config: &Config) -> Option<RelayoutRules> {
        let c = &config.controller.central;
        (config.controller.mode != Mode::DryRun).then_some(RelayoutRules {
            mode: config.controller.mode,
            padding: c.padding,
            requeued: c.requeued,
            requeue_max_run_s: c.requeue_max_run_s,
            min_relayout_interval_s: c.min_relayout_interval_s,
            persist_cycles: c.persist_cycles,
            max_nodes_per_batch: c.max_nodes_per_batch,
        })
    }
}

/// One line, the same for equal rules: `mode = preempt, padding = false, requeued =
/// restart, …`. Preempt-only settings are left out in drain mode, where they do nothing.
impl fmt::Display for RelayoutRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mode = {}, padding = {}", self.mode, self.padding)?;
        if self.mode == Mode::Preempt {
            write!(f, ", requeued = {}", self.requeued.as_str())?;
            match self.requeue_max_run_s {
                Some(s) => write!(f, ", requeue_max_run_s = {s}")?,
                None => write!(f, ", requeue_max_run_s = none")?,
            }
        }
        write!(
            f,
            ", min_relayout_interval_s = {}, persist_cycles = {}, max_nodes_per_batch = {}",
            self.min_relayout_interval_s, self.persist_cycles, self.max_nodes_per_batch
        )
    }
}

/// Why `config`'s periodic policy must not run: its schedule was searched under other
/// rules than the daemon's (None: another policy kind, no record, a dry run, or the same
/// rules).
pub fn periodic_mismatch(config: &Config) -> Option<String> {
    if config.policy.kind != PolicyKind::Periodic {
        return None;
    }
    let tuned = config.policy.periodic_tuned_under.as_deref()?;
    let now = RelayoutRules::of(config)?.to_string();
    (tuned != now).then(|| {
        format!(
            "[[policy.periodic]] was searched under \"{tuned}\", smartmigd runs under \"{now}\": \
             search it again with `smartmig tune-periodic --smartmig-toml` on this file"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(body: &str) -> Config {
        Config::parse(&format!("version = 1\n{body}"), "smartmig.toml").unwrap()
    }

    #[test]
    fn drain_rules_leave_out_what_only_preempt_uses() {
        let drain = config("[controller]\nmode = \"drain\"\n[controller.central]\nrequeue_max_run_s = 60\n");
        let line = RelayoutRules::of(&drain).unwrap().to_string();
        assert!(
            line.starts_with("mode = drain, padding = false, min_relayout_interval_s = "),
            "{line}"
        );
        let preempt =
            config("[controller]\nmode = \"preempt\"\n[controller.central]\nrequeue_max_run_s = 60\n");
        let line = RelayoutRules::of(&preempt).unwrap().to_string();
        assert!(
            line.contains("requeued = restart, requeue_max_run_s = 60,"),
            "{line}"
        );
        assert!(RelayoutRules::of(&config("[controller]\nmode = \"dry-run\"\n")).is_none());
    }

    #[test]
    fn a_schedule_searched_under_other_rules_is_named_with_both() {
        let searched = "[controller]\nmode = \"preempt\"\n[controller.central]\nrequeued = \"resume\"\n";
        let line = RelayoutRules::of(&config(searched)).unwrap().to_string();
        let with = |controller: &str| {
            config(&format!(
                "[policy]\nkind = \"periodic\"\nperiodic_tuned_under = \"{line}\"\n\
                 [[policy.periodic]]\nat = \"00:00\"\nlayout = [\"c1\"]\n{controller}"
            ))
        };
        assert_eq!(periodic_mismatch(&with(searched)), None);
        // A dry run changes nothing: no rules to hold it to.
        assert_eq!(
            periodic_mismatch(&with("[controller]\nmode = \"dry-run\"\n")),
            None
        );
        // The site's requeued jobs start over (preempt's default): not what was searched.
        let why = periodic_mismatch(&with("[controller]\nmode = \"preempt\"\n")).unwrap();
        assert!(
            why.contains("requeued = resume") && why.contains("requeued = restart"),
            "{why}"
        );
        assert!(why.contains("smartmig tune-periodic"), "{why}");
        // The record matters only to the periodic policy.
        let static_kind = config(&format!(
            "[policy]\nkind = \"static\"\nperiodic_tuned_under = \"{line}\"\n[controller]\nmode = \"preempt\"\n"
        ));
        assert_eq!(periodic_mismatch(&static_kind), None);
        // A hand-written schedule has no record and runs as written.
        let hand =
            config("[policy]\nkind = \"periodic\"\n[[policy.periodic]]\nat = \"00:00\"\nlayout = [\"c1\"]\n");
        assert_eq!(periodic_mismatch(&hand), None);
    }
}
