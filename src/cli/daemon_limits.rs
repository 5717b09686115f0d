//! `--smartmig-toml FILE`: run the simulator under the limits smartmigd enforces with a
//! site's smartmig.toml, so that a schedule or policy is searched and judged for what the
//! daemon will do (docs/evaluation.md, "Searching layouts and schedules").

use std::path::Path;

use smartmig_core::config::{Config, Mode, RelayoutRules};
use smartmig_core::mig::{identify, read_entry, Catalogue, Configuration, LayoutEntry};
use smartmig_sim::scenario::{
    DrainHold, IndexRule, NodeRule, RepartitionSpec, ResolvedScenario, Semantics, SiteConfigurations,
};

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
/// each of its mig-configs is, per GPU model, and what smartmigd reads a layout entry as.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteLayouts {
    /// The catalogue smartmigd reads entries with (the site's additions included).
    catalogue: Catalogue,
    /// Per scenario model: smartmigd's configurations for it (its mig-configs) and the
    /// scenario configuration each is, if any.
    models: Vec<SiteModel>,
}

/// One GPU model's layouts as smartmigd resolves them.
#[derive(Debug, Clone, PartialEq)]
struct SiteModel {
    key: String,
    configurations: Vec<Configuration>,
    /// Per configuration, the scenario configuration it is (index and name), if any.
    scenario: Vec<Option<(usize, String)>>,
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
    let (catalogue, site) = cfg.gpus(base_dir).map_err(|e| e.to_string())?;
    let models = sc
        .models
        .iter()
        .filter_map(|cm| {
            let sm = site.iter().find(|m| m.model.key == cm.model.key)?;
            let scenario = sm
                .configurations
                .iter()
                .map(|c| {
                    identify(&cm.configurations, &cm.model, &c.layout)
                        .map(|i| (i, cm.configurations[i].name.clone()))
                })
                .collect();
            Some(SiteModel {
                key: cm.model.key.clone(),
                configurations: sm.configurations.clone(),
                scenario,
            })
        })
        .collect();
    Ok(Some(SiteLayouts { catalogue, models }))
}

impl SiteLayouts {
    /// (model key, mig-config, catalogue configuration), in the file's order.
    pub fn named(&self) -> Vec<(&str, &str, &str)> {
        self.models
            .iter()
            .flat_map(|m| {
                m.configurations.iter().zip(&m.scenario).filter_map(|(c, s)| {
                    s.as_ref()
                        .map(|(_, name)| (m.key.as_str(), c.name.as_str(), name.as_str()))
                })
            })
            .collect()
    }

    /// (model key, mig-config) of those that are none of the catalogue's configurations:
    /// the simulator cannot lay GPUs out as them, so searches leave them out (smartmigd
    /// still reads their names as the model's layouts).
    pub fn left_out(&self) -> Vec<(&str, &str)> {
        self.models
            .iter()
            .flat_map(|m| {
                m.configurations
                    .iter()
                    .zip(&m.scenario)
                    .filter(|(_, s)| s.is_none())
                    .map(|(c, _)| (m.key.as_str(), c.name.as_str()))
            })
            .collect()
    }

    /// `cluster.configurations=…` when the site leaves out some configuration of the
    /// scenario's models: one list when every model's is the same, else one per model.
    fn restriction(&self, sc: &ResolvedScenario) -> Option<String> {
        let per_model: Vec<(String, Vec<String>)> = sc
            .models
            .iter()
            .map(|m| {
                let key = &m.model.key;
                let mut names: Vec<String> = Vec::new();
                for (_, _, c) in self.named().into_iter().filter(|(k, _, _)| k == key) {
                    if !names.iter().any(|n| n == c) {
                        names.push(c.to_string());
                    }
                }
                (key.clone(), names)
            })
            .collect();
        let all = sc
            .models
            .iter()
            .zip(&per_model)
            .all(|(m, (_, names))| m.configurations.iter().all(|c| names.contains(&c.name)));
        if all {
            return None;
        }
        let site = if per_model.windows(2).all(|w| w[0].1 == w[1].1) {
            SiteConfigurations::All(per_model[0].1.clone())
        } else {
            SiteConfigurations::PerModel(per_model.into_iter().collect())
        };
        Some(format!("cluster.configurations={site}"))
    }

    /// Configuration `name` of `model` as the site's mig-config; an error where it is none.
    fn site_name(&self, model: &str, name: &str) -> Result<String, String> {
        self.named()
            .into_iter()
            .find(|(k, _, c)| *k == model && *c == name)
            .map(|(_, mig, _)| mig.to_string())
            .ok_or_else(|| format!("{name} is none of the site's mig-configs for {model}"))
    }
}

/// `layout`, the scenario's (one list cycled over all the cluster's GPUs), as smartmigd
/// reads a layout list in smartmig.toml: each GPU model takes the entries it reads as its
/// own, cycled over its GPUs. Entries are named as the site names them (`site`: its
/// mig-configs) or as the catalogue does. With one model the scenario's list is
/// smartmigd's, entry by entry; with several, each model's GPUs are written in turn, as the
/// shortest list that cycles to them, and where another model would then read an entry
/// as its own (an A100's and an H100's `c2`) and so take other layouts, such entries are
/// written as their instance lists. An error names an entry that even so two models read.
pub fn daemon_layout(
    sc: &ResolvedScenario,
    layout: &[String],
    site: Option<&SiteLayouts>,
) -> Result<Vec<String>, String> {
    if let [only] = sc.models.as_slice() {
        // One model reads every entry: the list as it is, each entry in the site's name.
        let Some(site) = site else {
            return Ok(layout.to_vec());
        };
        return layout
            .iter()
            .map(|e| {
                let c = sc.try_layout_indices(std::slice::from_ref(e))?[0];
                site.site_name(&only.model.key, &only.configurations[c].name)
            })
            .collect();
    }
    let per_gpu = sc.try_layout_indices(layout)?;
    let embedded = Catalogue::embedded();
    let driver = sc.scenario.cluster.driver;
    // smartmigd's configurations per model: the site's mig-configs, else the catalogue's,
    // which the scenario's are (it restricts a search by a mask, not by leaving them out).
    let catalogue = site.map_or(&embedded, |s| &s.catalogue);
    let models: Vec<SiteModel> = sc
        .models
        .iter()
        .map(|cm| {
            let own = site.and_then(|s| s.models.iter().find(|sm| sm.key == cm.model.key));
            own.cloned().unwrap_or_else(|| SiteModel {
                key: cm.model.key.clone(),
                configurations: cm.configurations.clone(),
                scenario: cm
                    .configurations
                    .iter()
                    .enumerate()
                    .map(|(i, c)| Some((i, c.name.clone())))
                    .collect(),
            })
        })
        .collect();
    // What model `m` reads `entry` as, by smartmigd's own reading: not at all, or a
    // configuration of the scenario (None: a layout that is none of them, or one it
    // refuses, which is as bad as another's layout).
    let read = |m: usize, entry: &str| -> Option<Option<usize>> {
        let own = &models[m];
        match read_entry(catalogue, &own.configurations, &sc.models[m].model, driver, entry) {
            Ok(Some(LayoutEntry::Configuration(i))) => Some(own.scenario[i].as_ref().map(|(c, _)| *c)),
            Ok(Some(LayoutEntry::Layout(_))) | Err(_) => Some(None),
            Ok(None) => None,
        }
    };
    let seqs: Vec<Vec<usize>> = (0..sc.models.len())
        .map(|m| {
            per_gpu
                .iter()
                .zip(&sc.gpus)
                .filter(|(_, g)| g.model == m)
                .map(|(&c, _)| c)
                .collect()
        })
        .collect();
    let reads_back = |list: &[String]| {
        seqs.iter().enumerate().all(|(m, seq)| {
            let mine: Vec<Option<usize>> = list.iter().filter_map(|e| read(m, e)).collect();
            !mine.is_empty()
                && seq
                    .iter()
                    .enumerate()
                    .all(|(i, &c)| mine[i % mine.len()] == Some(c))
        })
    };
    // Each model's GPUs in turn, as the shortest list that cycles to them.
    let mut entries: Vec<(usize, usize, String)> = Vec::new();
    for (m, seq) in seqs.iter().enumerate() {
        let period = (1..seq.len())
            .find(|&p| (p..seq.len()).all(|i| seq[i] == seq[i - p]))
            .unwrap_or(seq.len());
        for &c in &seq[..period] {
            let cm = &sc.models[m];
            let name = match site {
                Some(s) => s.site_name(&cm.model.key, &cm.configurations[c].name)?,
                None => cm.configurations[c].name.clone(),
            };
            entries.push((m, c, name));
        }
    }
    let plain: Vec<String> = entries.iter().map(|(_, _, n)| n.clone()).collect();
    if reads_back(&plain) {
        return Ok(plain);
    }
    let mut distinct = Vec::new();
    for (m, c, name) in entries {
        let shared = |e: &str| (0..sc.models.len()).find(|&o| o != m && read(o, e).is_some());
        if shared(&name).is_none() {
            distinct.push(name);
            continue;
        }
        let cm = &sc.models[m];
        let instances = cm.configurations[c].layout.profile_list(&cm.model);
        if let Some(o) = shared(&instances) {
            return Err(format!(
                "smartmigd would read `{name}` ({instances}) as a layout of {} too, so one layout \
                 list cannot give {} and {} different layouts there",
                sc.models[o].model.key, cm.model.key, sc.models[o].model.key
            ));
        }
        distinct.push(instances);
    }
    if !reads_back(&distinct) {
        return Err(format!(
            "smartmigd would not read {distinct:?} back as the searched layouts of every model"
        ));
    }
    Ok(distinct)
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

    /// On several GPU models smartmigd reads a layout list model by model: what the
    /// scenario cycles over the whole cluster is written so that each model reads back
    /// its own GPUs' layouts, names two models share as instance lists.
    #[test]
    fn a_mixed_layout_is_written_so_smartmigd_gives_each_model_its_own() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/scenarios/mixed-a100-h100-a30.toml");
        let sc = smartmig_sim::scenario::Scenario::load(&file, &[]).unwrap();
        let layout: Vec<String> = ["c1", "c1", "c1", "c1", "c2", "c2", "q1", "q3"]
            .map(String::from)
            .into();
        let written = daemon_layout(&sc, &layout, None).unwrap();
        assert_eq!(written, ["7g.40gb", "4g.40gb+3g.40gb", "q1", "q3"]);
        // Where every model reads the plain names as its own layouts, they stay.
        let alike: Vec<String> = ["c1", "c1", "c1", "c1", "c1", "c1", "q1", "q3"]
            .map(String::from)
            .into();
        assert_eq!(
            daemon_layout(&sc, &alike, None).unwrap(),
            ["c1", "c1", "q1", "q3"]
        );
        assert_eq!(
            smartmigd_reads(
                "models = [\"a100-40gb\", \"h100-80gb\", \"a30-24gb\"]",
                None,
                &written
            ),
            [vec!["c1"], vec!["c2"], vec!["q1", "q3"]]
        );
        // The scenario's own list would give the H100s the A100s' first entries.
        let plain = smartmigd_reads("models = [\"a100-40gb\", \"h100-80gb\"]", None, &layout[..6]);
        assert_eq!(plain[1][..2], plain[0][..2]);
        // An A100-80GB and an H100 share their profiles' names too: nothing tells them apart.
        let alike = smartmig_sim::scenario::Scenario::reference(&[
            "cluster.gpus=[{model=\"a100-80gb\",count=1},{model=\"h100-80gb\",count=1}]".into(),
            "baselines.reference_layout=[\"c1\"]".into(),
            "baselines.static_best=[\"c1\"]".into(),
            "baselines.periodic=[]".into(),
            "baselines.periodic_best=[{at = \"00:00\", layout = [\"c1\"]}]".into(),
        ])
        .unwrap();
        let e = daemon_layout(&alike, &["c1".into(), "c2".into()], None).unwrap_err();
        assert!(e.contains("`c1` (7g.80gb) as a layout of h100-80gb too"), "{e}");
        // One model and the catalogue's names: the scenario's list as it is.
        let one = smartmig_sim::scenario::Scenario::reference(&[]).unwrap();
        assert_eq!(daemon_layout(&one, &layout[..5], None).unwrap(), layout[..5]);
    }

    /// What smartmigd gives each GPU model from `static_layout = list`, by name, with
    /// `gpu` as its `[gpu]` table (files relative to `dir`).
    fn smartmigd_reads(gpu: &str, dir: Option<&Path>, list: &[String]) -> Vec<Vec<String>> {
        let quoted: Vec<String> = list.iter().map(|n| format!("\"{n}\"")).collect();
        let text = format!(
            "version = 1\n[gpu]\n{gpu}\n[policy]\nkind = \"static\"\nstatic_layout = [{}]\n",
            quoted.join(", ")
        );
        let resolved = Config::parse(&text, "smartmig.toml")
            .unwrap()
            .resolve(dir)
            .unwrap();
        resolved
            .models
            .iter()
            .map(|m| {
                m.static_layout
                    .iter()
                    .map(|&c| m.configurations[c].name.clone())
                    .collect()
            })
            .collect()
    }

    /// A mig-parted site: searches choose among the configurations its mig-configs are, and
    /// what they find is written back in its mig-config names.
    #[test]
    fn a_mig_parted_sites_layouts_are_searched_as_configurations_and_named_back() {
        let dir = tempfile::tempdir().unwrap();
        // mig.yaml with `configs`: each a name and its device specs, each spec a
        // "profile: count" list for all devices.
        type Devices<'a> = &'a [(&'a str, u32)];
        let write = |configs: &[(&str, &[Devices])]| {
            let mut text = String::from("version: v1\nmig-configs:\n");
            for (name, specs) in configs {
                text += &format!("  {name}:\n");
                for devices in *specs {
                    text += "    - devices: all\n      mig-enabled: true\n      mig-devices:\n";
                    for (profile, n) in *devices {
                        text += &format!("        \"{profile}\": {n}\n");
                    }
                }
            }
            std::fs::write(dir.path().join("mig.yaml"), text).unwrap();
        };
        let balanced_a100: Devices = &[("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)];
        write(&[
            ("whole", &[&[("7g.40gb", 1)]]),
            ("balanced", &[balanced_a100]),
            ("one-3g", &[&[("3g.20gb", 1)]]),
        ]);
        let cfg = Config::parse("version = 1\n[gpu]\nmig_parted = \"mig.yaml\"\n", "smartmig.toml").unwrap();
        let sc = smartmig_sim::scenario::Scenario::reference(&[]).unwrap();
        let site = site_layouts(&cfg, Some(dir.path()), &sc).unwrap().unwrap();
        let balanced = site.named()[1].2.to_string();
        assert_eq!(site.named()[0], ("a100-40gb", "whole", "c1"));
        assert_eq!(
            site.left_out(),
            [("a100-40gb", "one-3g")],
            "a lone 3g is no configuration"
        );
        assert_eq!(
            daemon_hardware(&cfg, Some(&site), &sc).unwrap(),
            [format!("cluster.configurations=[\"c1\", \"{balanced}\"]")]
        );
        assert_eq!(
            daemon_layout(&sc, &[balanced.clone(), "c1".into()], Some(&site)).unwrap(),
            ["balanced", "whole"]
        );
        let e = daemon_layout(&sc, &["c2".into()], Some(&site)).unwrap_err();
        assert!(
            e.contains("c2 is none of the site's mig-configs for a100-40gb"),
            "{e}"
        );
        // On an A100 and an H100 each model's mig-configs are its own configurations, and
        // each model's layouts are written by its own mig-config names.
        write(&[
            ("whole", &[&[("7g.40gb", 1)], &[("7g.80gb", 1)]]),
            ("balanced", &[balanced_a100]),
            ("h-halves", &[&[("3g.40gb", 2)]]),
        ]);
        let cfg = Config::parse(
            "version = 1\n[gpu]\nmodels = [\"a100-40gb\", \"h100-80gb\"]\nmig_parted = \"mig.yaml\"\n",
            "smartmig.toml",
        )
        .unwrap();
        let mixed = smartmig_sim::scenario::Scenario::reference(&[
            "cluster.gpus=[{model=\"a100-40gb\",count=1},{model=\"h100-80gb\",count=1}]".into(),
        ])
        .unwrap();
        let site = site_layouts(&cfg, Some(dir.path()), &mixed).unwrap().unwrap();
        let halves = site
            .named()
            .into_iter()
            .find(|(_, mig, _)| *mig == "h-halves")
            .unwrap()
            .2
            .to_string();
        let sets = daemon_hardware(&cfg, Some(&site), &mixed).unwrap();
        assert_eq!(
            sets,
            [format!(
                "cluster.configurations={{ a100-40gb = [\"c1\", \"{balanced}\"], h100-80gb = [\"c1\", \"{halves}\"] }}"
            )]
        );
        let restricted = smartmig_sim::scenario::Scenario::reference(&[
            "cluster.gpus=[{model=\"a100-40gb\",count=1},{model=\"h100-80gb\",count=1}]".into(),
            sets[0].clone(),
        ])
        .unwrap();
        assert!(!restricted.searchable(
            1,
            restricted.models[1]
                .configurations
                .iter()
                .position(|c| c.name == *balanced)
                .unwrap()
        ));
        assert_eq!(
            daemon_layout(&mixed, &[balanced.clone(), halves.clone()], Some(&site)).unwrap(),
            ["balanced", "h-halves"]
        );
        // `whole` is each model's own whole GPU: one name serves both.
        assert_eq!(
            daemon_layout(&mixed, &["c1".into()], Some(&site)).unwrap(),
            ["whole", "whole"]
        );
        // What smartmigd gives each model from a static_layout list, by mig-config name.
        let read_back = |list: &[String]| {
            smartmigd_reads(
                "models = [\"a100-40gb\", \"h100-80gb\"]\nmig_parted = \"mig.yaml\"",
                Some(dir.path()),
                list,
            )
        };
        let written = daemon_layout(&mixed, &[balanced.clone(), halves.clone()], Some(&site)).unwrap();
        assert_eq!(read_back(&written), [vec!["balanced"], vec!["h-halves"]]);
        let written = daemon_layout(&mixed, &["c1".into()], Some(&site)).unwrap();
        assert_eq!(
            read_back(&written),
            [vec!["whole", "whole"], vec!["whole", "whole"]]
        );
        // A mig-config the simulator leaves out on the H100 (a lone 3g) is still one of the
        // H100's layouts there: the A100's `odd` is written as its instances.
        write(&[
            ("odd", &[&[("7g.40gb", 1)], &[("3g.40gb", 1)]]),
            ("h-whole", &[&[("7g.80gb", 1)]]),
            ("balanced", &[balanced_a100]),
        ]);
        let site = site_layouts(&cfg, Some(dir.path()), &mixed).unwrap().unwrap();
        assert_eq!(site.left_out(), [("h100-80gb", "odd")]);
        let written = daemon_layout(&mixed, &["c1".into()], Some(&site)).unwrap();
        assert_eq!(written, ["7g.40gb", "h-whole"]);
        assert_eq!(read_back(&written), [vec!["odd"], vec!["h-whole"]]);
        // Without a mig-parted file the site takes every configuration.
        assert_eq!(
            site_layouts(&Config::parse("version = 1\n", "s").unwrap(), None, &sc),
            Ok(None)
        );
    }
}
