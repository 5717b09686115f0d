//! `--smartmig-toml FILE`: run the simulator under the limits smartmigd enforces with a
//! site's smartmig.toml, so that a schedule or policy is searched and judged for what the
//! daemon will do (docs/evaluation.md, "Searching layouts and schedules").

use std::path::Path;

use smartmig_core::config::{Config, Mode, RelayoutRules};
use smartmig_core::mig::{identify, Catalogue};
use smartmig_sim::scenario::{DrainHold, IndexRule, NodeRule, RepartitionSpec, ResolvedScenario, Semantics};

/// The `--set` overrides that give scenario `sc` the driver rules smartmigd applies with
/// `cfg` (before R510, no 4g and 3g instance on one GPU) and, on a site whose layouts are
/// a mig-parted file's (`layouts`, from [`site_layouts`]), only the configurations its
/// mig-configs are; or an error naming the scenario's GPU models `cfg` does not list:
/// smartmigd would reject every layout searched for them.
pub fn daemon_hardware(
    cfg: &Config,
    layouts: Option<&SiteLayouts>,
    sc: &ResolvedScenario,
) -> Result<Vec<String>, String> {
    let catalogue = Catalogue::embedded();
    let key = |name: &str| {
        catalogue
            .model(name)
            .map_or_else(|_| name.to_string(), |m| m.key.clone())
    };
    let site: Vec<String> = cfg.gpu.models.iter().map(|m| key(m.get_ref())).collect();
    let missing: Vec<&str> = sc
        .models
        .iter()
        .map(|m| m.model.key.as_str())
        .filter(|k| !site.iter().any(|s| s == k))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the scenario's GPUs include {}, which its [gpu] models ({}) does not list: smartmigd \
             there would reject what is searched for them; list them there, or use a scenario of \
             the site's GPUs",
            missing.join(", "),
            site.join(", ")
        ));
    }
    let mut sets = Vec::new();
    if cfg.gpu.driver != sc.scenario.cluster.driver {
        sets.push(format!("cluster.driver=\"{}\"", cfg.gpu.driver.as_str()));
    }
    sets.extend(layouts.and_then(|s| s.restriction(sc)));
    Ok(sets)
}

/// A mig-parted site's layouts in the simulator's terms: which catalogue configuration
/// each of its mig-configs is, per GPU model.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteLayouts {
    /// (model key, mig-config, catalogue configuration), in the file's order.
    pub named: Vec<(String, String, String)>,
    /// `mig-config (model)` of those that are none of the catalogue's configurations: the
    /// simulator cannot lay GPUs out as them, so searches leave them out.
    pub left_out: Vec<String>,
}

/// The layouts of `cfg`'s `[gpu] mig_parted` file (read relative to `base_dir`) on the
/// scenario's GPU models; `None` without one (the site takes every configuration).
pub fn site_layouts(
    cfg: &Config,
    base_dir: Option<&Path>,
    sc: &ResolvedScenario,
) -> Result<Option<SiteLayouts>, String> {
    if cfg.gpu.mig_parted.is_none() {
        return Ok(None);
    }
    let (_, site) = cfg.gpus(base_dir).map_err(|e| e.to_string())?;
    let mut layouts = SiteLayouts {
        named: Vec::new(),
        left_out: Vec::new(),
    };
    for cm in &sc.models {
        let Some(sm) = site.iter().find(|m| m.model.key == cm.model.key) else {
            continue;
        };
        for c in &sm.configurations {
            match identify(&cm.configurations, &cm.model, &c.layout) {
                Some(i) => layouts.named.push((
                    cm.model.key.clone(),
                    c.name.clone(),
                    cm.configurations[i].name.clone(),
                )),
                None => layouts.left_out.push(format!("{} ({})", c.name, cm.model.key)),
            }
        }
    }
    Ok(Some(layouts))
}

impl SiteLayouts {
    /// `cluster.configurations=[…]` when the site leaves out some configuration of the
    /// scenario's models.
    fn restriction(&self, sc: &ResolvedScenario) -> Option<String> {
        let mut names: Vec<&str> = Vec::new();
        for (_, _, c) in &self.named {
            if !names.contains(&c.as_str()) {
                names.push(c);
            }
        }
        let all = sc
            .models
            .iter()
            .flat_map(|m| &m.configurations)
            .all(|c| names.contains(&c.name.as_str()));
        let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
        (!all).then(|| format!("cluster.configurations=[{}]", quoted.join(", ")))
    }

    /// `layout`, catalogue configurations of the scenario's first GPU model (what the
    /// searches cover), as the site's mig-config names; an error names one that is none.
    pub fn site_names(&self, sc: &ResolvedScenario, layout: &[String]) -> Result<Vec<String>, String> {
        let key = sc.models.first().map_or("", |m| m.model.key.as_str());
        layout
            .iter()
            .map(|name| {
                self.named
                    .iter()
                    .find(|(k, _, c)| k == key && c.eq_ignore_ascii_case(name))
                    .map(|(_, mig, _)| mig.clone())
                    .ok_or_else(|| format!("{name} is none of the site's mig-configs for {key}"))
            })
            .collect()
    }
}

/// The `--set` overrides that make a scenario's `[repartition]` what smartmigd does with
/// `cfg`: its mode (a dry run keeps the scenario's semantics), the index rule its padding
/// setting gives, its batch interval, hysteresis, batch size, the seconds between its
/// decisions (when a schedule's block takes effect), run-time limit on requeues and what
/// its requeued jobs keep (preempt mode), and Slurm's node rule with nothing held free
/// (smartmigd holds no instance).
/// Empty when they already agree. An error when the scenario limits requeues by run time
/// and `cfg` does not: no `--set` removes a limit, and the search would hold jobs that
/// smartmigd requeues.
pub fn daemon_limits(cfg: &Config, r: &RepartitionSpec) -> Result<Vec<String>, String> {
    let central = &cfg.controller.central;
    if let (None, Some(max)) = (central.requeue_max_run_s, r.requeue_max_run_s) {
        return Err(format!(
            "the scenario's [repartition] requeue_max_run_s = {max} has no counterpart in smartmigd's \
             [controller.central] (it requeues jobs of any age there): set requeue_max_run_s there, \
             or remove it from the scenario"
        ));
    }
    let mut sets = Vec::new();
    let semantics = match cfg.controller.mode {
        Mode::Drain => Some(Semantics::Drain),
        Mode::Preempt => Some(Semantics::Preempt),
        Mode::DryRun => None,
    };
    if let Some(s) = semantics.filter(|s| *s != r.semantics) {
        sets.push(format!("repartition.semantics=\"{}\"", s.as_str()));
    }
    let (rule, rule_name) = if central.padding {
        (IndexRule::PaddedAssigned, "padded-assigned")
    } else {
        (IndexRule::Fixed, "fixed")
    };
    if r.index_rule != rule {
        sets.push(format!("repartition.index_rule=\"{rule_name}\""));
    }
    if r.node_rule != NodeRule::Slurm2205 {
        sets.push("repartition.node_rule=\"slurm-22.05\"".to_string());
    }
    if r.drain_hold != DrainHold::None {
        sets.push("repartition.drain_hold=\"none\"".to_string());
    }
    if r.min_relayout_interval_s != central.min_relayout_interval_s {
        sets.push(format!(
            "repartition.min_relayout_interval_s={}",
            central.min_relayout_interval_s
        ));
    }
    if r.persist_cycles != central.persist_cycles {
        sets.push(format!("repartition.persist_cycles={}", central.persist_cycles));
    }
    if r.max_nodes_per_batch != central.max_nodes_per_batch {
        sets.push(format!(
            "repartition.max_nodes_per_batch={}",
            central.max_nodes_per_batch
        ));
    }
    // A schedule's block starts take effect at smartmigd's next decision.
    if r.decision_interval_s != cfg.policy.decision_interval_s {
        sets.push(format!(
            "repartition.decision_interval_s={}",
            cfg.policy.decision_interval_s
        ));
    }
    if let Some(max) = central
        .requeue_max_run_s
        .filter(|m| r.requeue_max_run_s != Some(*m))
    {
        sets.push(format!("repartition.requeue_max_run_s={max}"));
    }
    // What a requeued job keeps matters only where jobs are requeued.
    if cfg.controller.mode == Mode::Preempt && r.requeued != central.requeued {
        sets.push(format!("repartition.requeued=\"{}\"", central.requeued.as_str()));
    }
    Ok(sets)
}

/// The rules a search under scenario `r` assumed, in smartmigd's terms: what `tune-periodic
/// --smartmig-toml` records beside the schedule for the daemon to check (after
/// [`daemon_limits`] they are the file's, with a dry run's semantics the scenario's).
pub fn searched_rules(r: &RepartitionSpec) -> RelayoutRules {
    RelayoutRules {
        mode: match r.semantics {
            Semantics::Drain => Mode::Drain,
            Semantics::Preempt => Mode::Preempt,
        },
        padding: r.index_rule.padded(),
        requeued: r.requeued,
        requeue_max_run_s: r.requeue_max_run_s,
        min_relayout_interval_s: r.min_relayout_interval_s,
        persist_cycles: r.persist_cycles,
        max_nodes_per_batch: r.max_nodes_per_batch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_takes_smartmigds_mode_padding_and_limits_and_nothing_when_they_agree() {
        let sc = smartmig_sim::scenario::Scenario::reference(&[]).unwrap();
        let r = &sc.scenario.repartition;
        let cfg = |body: &str| Config::parse(&format!("version = 1\n{body}"), "smartmig.toml").unwrap();
        // The reference scenario's limits are smartmigd's defaults; a dry run keeps preempt.
        assert_eq!(daemon_limits(&cfg(""), r), Ok(Vec::new()));
        let site = cfg(
            "[controller]\nmode = \"drain\"\n[controller.central]\npadding = true\n\
             min_relayout_interval_s = 1800\npersist_cycles = 3\nmax_nodes_per_batch = 2\n\
             requeue_max_run_s = 60\n[policy]\ndecision_interval_s = 300\n",
        );
        // In preempt mode the site's requeued jobs restart unless the file says they resume.
        let preempt = |central: &str| {
            daemon_limits(
                &cfg(&format!(
                    "[controller]\nmode = \"preempt\"\n[controller.central]\n{central}"
                )),
                r,
            )
            .unwrap()
        };
        assert_eq!(preempt(""), ["repartition.requeued=\"restart\""]);
        assert!(preempt("requeued = \"resume\"\n").is_empty());
        let sets = daemon_limits(&site, r).unwrap();
        assert_eq!(
            sets,
            [
                "repartition.semantics=\"drain\"",
                "repartition.index_rule=\"padded-assigned\"",
                "repartition.min_relayout_interval_s=1800",
                "repartition.persist_cycles=3",
                "repartition.max_nodes_per_batch=2",
                "repartition.decision_interval_s=300",
                "repartition.requeue_max_run_s=60",
            ]
        );
        // Applied, the scenario agrees with the site's file, and so do the rules recorded
        // beside a schedule searched there.
        let tuned = smartmig_sim::scenario::Scenario::reference(&sets).unwrap();
        assert_eq!(daemon_limits(&site, &tuned.scenario.repartition), Ok(Vec::new()));
        assert_eq!(
            searched_rules(&tuned.scenario.repartition).to_string(),
            RelayoutRules::of(&site).unwrap().to_string()
        );
        let held = smartmig_sim::scenario::Scenario::reference(&[
            "repartition.drain_hold=\"instances\"".into(),
            "repartition.node_rule=\"instances\"".into(),
        ])
        .unwrap();
        // A scenario that limits requeues by run time, for a daemon that does not.
        let limited =
            smartmig_sim::scenario::Scenario::reference(&["repartition.requeue_max_run_s=60".into()])
                .unwrap();
        let e = daemon_limits(&cfg(""), &limited.scenario.repartition).unwrap_err();
        assert!(
            e.contains("requeue_max_run_s = 60") && e.contains("[controller.central]"),
            "{e}"
        );
        assert_eq!(
            daemon_limits(&cfg(""), &held.scenario.repartition).unwrap(),
            [
                "repartition.node_rule=\"slurm-22.05\"",
                "repartition.drain_hold=\"none\""
            ]
        );
    }

    #[test]
    fn the_search_takes_smartmigds_driver_and_refuses_gpus_the_file_does_not_list() {
        // Baselines of whole GPUs, which every driver allows (c2 is a 4g and a 3g).
        let whole = |more: &[String]| {
            let mut sets: Vec<String> = [
                "baselines.reference_layout=[\"c1\"]",
                "baselines.static_best=[\"c1\"]",
                "baselines.periodic=[]",
                "baselines.periodic_best=[{at = \"00:00\", layout = [\"c1\"]}]",
            ]
            .map(String::from)
            .to_vec();
            sets.extend_from_slice(more);
            smartmig_sim::scenario::Scenario::reference(&sets).unwrap()
        };
        let sc = whole(&[]);
        let cfg = |body: &str| Config::parse(&format!("version = 1\n{body}"), "smartmig.toml").unwrap();
        assert_eq!(daemon_hardware(&cfg(""), None, &sc), Ok(Vec::new()));
        let old = cfg("[gpu]\ndriver = \"pre-r510\"\n");
        let sets = daemon_hardware(&old, None, &sc).unwrap();
        assert_eq!(sets, ["cluster.driver=\"pre-r510\""]);
        let applied = whole(&sets);
        assert!(applied.check_layout(&["c2".into()]).is_err(), "no c2 before R510");
        assert_eq!(daemon_hardware(&old, None, &applied), Ok(Vec::new()));
        let a30 = smartmig_sim::scenario::Scenario::reference(&[
            "cluster.gpus=[{model=\"a30-24gb\",count=4}]".into(),
            "baselines.reference_layout=[\"q1\"]".into(),
            "baselines.static_best=[\"q1\"]".into(),
            "baselines.periodic=[]".into(),
            "baselines.periodic_best=[{at = \"00:00\", layout = [\"q1\"]}]".into(),
        ])
        .unwrap();
        let e = daemon_hardware(&cfg(""), None, &a30).unwrap_err();
        assert!(e.contains("include a30-24gb") && e.contains("(a100-40gb)"), "{e}");
        let listed = cfg("[gpu]\nmodels = [\"a30-24gb\"]\n");
        assert_eq!(daemon_hardware(&listed, None, &a30), Ok(Vec::new()));
    }

    /// A mig-parted site: searches choose among the configurations its mig-configs are, and
    /// what they find is written back in its mig-config names.
    #[test]
    fn a_mig_parted_sites_layouts_are_searched_as_configurations_and_named_back() {
        let dir = tempfile::tempdir().unwrap();
        let spec = |devices: &str| {
            format!("    - devices: all\n      mig-enabled: true\n      mig-devices:\n{devices}")
        };
        std::fs::write(
            dir.path().join("mig.yaml"),
            format!(
                "version: v1\nmig-configs:\n  whole:\n{}  balanced:\n{}  one-3g:\n{}",
                spec("        \"7g.40gb\": 1\n"),
                spec("        \"1g.5gb\": 2\n        \"2g.10gb\": 1\n        \"3g.20gb\": 1\n"),
                spec("        \"3g.20gb\": 1\n"),
            ),
        )
        .unwrap();
        let cfg = Config::parse("version = 1\n[gpu]\nmig_parted = \"mig.yaml\"\n", "smartmig.toml").unwrap();
        let sc = smartmig_sim::scenario::Scenario::reference(&[]).unwrap();
        let site = site_layouts(&cfg, Some(dir.path()), &sc).unwrap().unwrap();
        let balanced = &site.named[1].2;
        assert_eq!(site.named[0], ("a100-40gb".into(), "whole".into(), "c1".into()));
        assert_eq!(
            site.left_out,
            ["one-3g (a100-40gb)"],
            "a lone 3g is no configuration"
        );
        assert_eq!(
            daemon_hardware(&cfg, Some(&site), &sc).unwrap(),
            [format!("cluster.configurations=[\"c1\", \"{balanced}\"]")]
        );
        assert_eq!(
            site.site_names(&sc, &[balanced.clone(), "c1".into()]).unwrap(),
            ["balanced", "whole"]
        );
        let e = site.site_names(&sc, &["c2".into()]).unwrap_err();
        assert!(
            e.contains("c2 is none of the site's mig-configs for a100-40gb"),
            "{e}"
        );
        // Without a mig-parted file the site takes every configuration.
        assert_eq!(
            site_layouts(&Config::parse("version = 1\n", "s").unwrap(), None, &sc),
            Ok(None)
        );
    }
}
