use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, "t.toml")
}

fn resolve(text: &str) -> Result<Resolved, ConfigError> {
    parse(text)?.resolve(None)
}

#[test]
fn the_shipped_example_config_is_valid() {
    let text = include_str!("../../../etc/smartmig.toml");
    let r = resolve(text).unwrap();
    assert_eq!(r.models[0].model.key, "a100-40gb");
    assert_eq!(r.models[0].configurations.len(), 12);
    assert_eq!(r.config.policy.top_k, 3);
}

#[test]
fn a_misspelt_key_is_named_with_its_line() {
    let e = parse("version = 1\n[policy]\ndecision_intervl_s = 5\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.toml:3:"), "{e}");
    assert!(
        e.contains("decision_intervl_s") && e.contains("unknown field"),
        "{e}"
    );
}

#[test]
fn a_negative_interval_is_refused_with_key_and_line() {
    let e = parse("version = 1\n\n[policy]\ndecision_interval_s = -5\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.toml:4:"), "{e}");
    assert!(e.contains("decision_interval_s") && e.contains("positive"), "{e}");
}

#[test]
fn a_requeue_run_time_limit_is_seconds_and_a_negative_one_is_refused_with_key_and_line() {
    let c = parse("version = 1\n[controller.central]\nrequeue_max_run_s = 60\n").unwrap();
    assert_eq!(c.controller.central.requeue_max_run_s, Some(60.0));
    assert_eq!(
        parse("version = 1\n")
            .unwrap()
            .controller
            .central
            .requeue_max_run_s,
        None
    );
    let e = parse("version = 1\n[controller.central]\nrequeue_max_run_s = -1\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("t.toml:3:") && e.contains("requeue_max_run_s"),
        "{e}"
    );
}

#[test]
fn requeued_jobs_restart_unless_the_site_says_they_resume_and_a_typo_is_named() {
    use super::Requeued;
    let requeued = |body: &str| parse(&format!("version = 1\n{body}")).map(|c| c.controller.central.requeued);
    assert_eq!(requeued("").unwrap(), Requeued::Restart);
    assert_eq!(
        requeued("[controller.central]\nrequeued = \"resume\"\n").unwrap(),
        Requeued::Resume
    );
    let e = requeued("[controller.central]\nrequeued = \"checkpoint\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("t.toml:3:") && e.contains("checkpoint") && e.contains("restart"),
        "{e}"
    );
}

#[test]
fn an_unknown_gpu_model_is_named_with_key_and_line() {
    let e = resolve("version = 1\n[gpu]\nmodels = [\"a100-40gb\",\n  \"v100\"]\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.toml:4:"), "{e}");
    assert!(
        e.contains("gpu.models") && e.contains("unknown GPU model `v100`"),
        "{e}"
    );
}

#[test]
fn a_static_layout_the_driver_forbids_is_refused() {
    let e =
        resolve("version = 1\n[gpu]\ndriver = \"pre-r510\"\n[policy]\nstatic_layout = [\"c1\", \"c2\"]\n")
            .unwrap_err()
            .to_string();
    assert!(e.starts_with("t.toml:5:"), "{e}");
    assert!(e.contains("policy.static_layout") && e.contains("R510"), "{e}");
}

#[test]
fn an_unknown_configuration_is_refused() {
    let e = resolve("version = 1\n[policy]\nstatic_layout = [\"c13\"]\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("t.toml:3") && e.contains("unknown configuration `c13`"),
        "{e}"
    );
}

#[test]
fn a_wrong_version_is_refused() {
    let e = parse("version = 2\n").unwrap_err().to_string();
    assert!(
        e.starts_with("t.toml:1:") && e.contains("version 2 is not supported"),
        "{e}"
    );
}

#[test]
fn a_missing_version_is_refused() {
    let e = parse("[gpu]\n").unwrap_err().to_string();
    assert!(e.contains("version"), "{e}");
}

#[test]
fn periodic_times_must_increase() {
    let text = "version = 1\n[policy]\nkind = \"periodic\"\n[[policy.periodic]]\nat = \"20:00\"\nlayout = [\"c1\"]\n[[policy.periodic]]\nat = \"08:00\"\nlayout = [\"c6\"]\n";
    let e = resolve(text).unwrap_err().to_string();
    assert!(e.starts_with("t.toml:8:") && e.contains("increase"), "{e}");
}

#[test]
fn a_missing_site_catalogue_names_the_path() {
    let e = resolve("version = 1\n[gpu]\ncatalogue = \"/nonexistent/models.toml\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("gpu.catalogue") && e.contains("/nonexistent/models.toml"),
        "{e}"
    );
}

#[test]
fn time_of_day_is_strict() {
    assert_eq!(parse_time_of_day("08:30"), Ok(510));
    assert!(parse_time_of_day("24:00").is_err());
    assert!(parse_time_of_day("8h").is_err());
}

#[test]
fn central_settings_are_checked_and_name_their_key() {
    let base = "version = 1\n[controller.central]\n";
    let c = Config::parse(&format!("{base}poll_interval_s = 2\nseed = 4\n"), "t.toml").unwrap();
    assert_eq!(c.controller.central.poll_interval_s, 2.0);
    assert_eq!(c.controller.central.seed, Some(4));
    let e = Config::parse(&format!("{base}restart_slurmctld = []\n"), "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("controller.central.restart_slurmctld") && e.contains("t.toml:3"),
        "{e}"
    );
    let e = Config::parse(&format!("{base}nodes_include = \"nodes.conf\"\n"), "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("nodes_include") && e.contains("absolute"), "{e}");
    let e = Config::parse(&format!("{base}report_timeout_s = 0\n"), "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("report_timeout_s") && e.contains("positive"), "{e}");
    let e = Config::parse(&format!("{base}relayout = \"dynamic-nodes\"\n"), "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("relayout") && e.contains("dynamic-nodes"), "{e}");
    let e = Config::parse(&format!("{base}typo = 1\n"), "t.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("typo"), "{e}");
}

#[test]
fn each_model_takes_the_static_layout_entries_that_fit_it() {
    let r = resolve(
        "version = 1\n[gpu]\nmodels = [\"a100-40gb\", \"a30-24gb\"]\n[policy]\nkind = \"static\"\n\
         static_layout = [\"c2\", \"q2\", \"2g.12gb+1g.6gb+1g.6gb\", \"3g.20gb+2g.10gb+1g.10gb\"]\n",
    )
    .unwrap();
    let (a100, a30) = (&r.models[0], &r.models[1]);
    // c2, then the instance list that is no configuration: a layout of its own.
    assert_eq!(a100.static_layout, [1, 12]);
    assert_eq!(a100.configurations[12].name, "3g.20gb+2g.10gb+1g.10gb");
    assert_eq!(
        a100.configurations[12].layout.display(&a100.model).to_string(),
        "3g.20gb@0 2g.10gb@4 1g.10gb@6"
    );
    // q2, and q3 written as instances.
    assert_eq!(a30.static_layout, [1, 2]);
    assert_eq!(a30.configurations.len(), 4);
}

#[test]
fn the_default_static_layout_is_each_models_whole_gpu() {
    let r = resolve("version = 1\n[gpu]\nmodels = [\"a30-24gb\", \"h100-80gb\"]\n").unwrap();
    assert_eq!(
        r.models[0].configurations[r.models[0].static_layout[0]].name,
        "q1"
    );
    assert_eq!(
        r.models[1].configurations[r.models[1].static_layout[0]].name,
        "c1"
    );
}

#[test]
fn a_model_no_entry_fits_and_an_entry_no_model_takes_are_refused() {
    let e = resolve(
        "version = 1\n[gpu]\nmodels = [\"a100-40gb\", \"a30-24gb\"]\n[policy]\nstatic_layout = [\"c2\"]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("names no layout for a30-24gb (its configurations: q1, q2, q3, q4"),
        "{e}"
    );
    let e = resolve("version = 1\n[policy]\nstatic_layout = [\"c2\",\n \"9g.90gb\"]\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("t.toml:4:") && e.contains("unknown configuration `9g.90gb`"),
        "{e}"
    );
    let e = resolve("version = 1\n[policy]\nstatic_layout = [\"3g.20gb@2\"]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not an allowed placement"), "{e}");
}

#[test]
fn the_mean_field_fallback_must_be_in_the_action_space() {
    let text =
        "version = 1\n[policy]\nkind = \"mean-field\"\nstatic_layout = [\"3g.20gb+2g.10gb+1g.10gb\"]\n";
    let e = resolve(text).unwrap_err().to_string();
    assert!(
        e.contains("none of a100-40gb's configurations") && e.contains("mig_parted"),
        "{e}"
    );
    // c7 written as instances is c7.
    let ok = resolve(
        "version = 1\n[policy]\nkind = \"mean-field\"\nstatic_layout = [\"3g.20gb+2g.10gb+1g.5gb+1g.5gb\"]\n",
    )
    .unwrap();
    assert_eq!(ok.models[0].static_layout, [6]);
    assert_eq!(ok.models[0].configurations.len(), 12);
}

#[test]
fn periodic_entries_resolve_per_model() {
    let r = resolve(
        "version = 1\n[gpu]\nmodels = [\"a100-40gb\", \"a30-24gb\"]\n[policy]\nkind = \"periodic\"\n\
         [[policy.periodic]]\nat = \"08:00\"\nlayout = [\"c6\", \"q4\"]\n\
         [[policy.periodic]]\nat = \"20:00\"\nlayout = [\"whole\", \"c1\", \"4g.24gb\"]\n",
    );
    let e = r.unwrap_err().to_string();
    assert!(e.contains("unknown configuration `whole`"), "{e}");
    let r = resolve(
        "version = 1\n[gpu]\nmodels = [\"a100-40gb\", \"a30-24gb\"]\n[policy]\nkind = \"periodic\"\n\
         [[policy.periodic]]\nat = \"08:00\"\nlayout = [\"c6\", \"q4\"]\n\
         [[policy.periodic]]\nat = \"20:00\"\nlayout = [\"c1\", \"4g.24gb\"]\n",
    )
    .unwrap();
    assert_eq!(r.models[0].periodic, [vec![5], vec![0]]);
    assert_eq!(r.models[1].periodic, [vec![3], vec![0]]);
}

#[test]
fn a_mig_parted_file_is_the_action_space_and_names_the_static_layout() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mig.yaml"),
        "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n  \
         whole:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"7g.40gb\": 1\n  \
         balanced:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n        \"1g.5gb\": 2\n        \"2g.10gb\": 1\n        \"3g.20gb\": 1\n",
    )
    .unwrap();
    let text = "version = 1\n[gpu]\nmig_parted = \"mig.yaml\"\n[policy]\nkind = \"mean-field\"\nstatic_layout = [\"balanced\"]\n";
    let r = parse(text).unwrap().resolve(Some(dir.path())).unwrap();
    let names: Vec<&str> = r.models[0]
        .configurations
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["whole", "balanced"]);
    assert_eq!(r.models[0].static_layout, [1]);
    let e = parse("version = 1\n[gpu]\nmodels = [\"a30-24gb\"]\nmig_parted = \"mig.yaml\"\n")
        .unwrap()
        .resolve(Some(dir.path()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("gpu.mig_parted") && e.contains("no mig-config gives a30-24gb a layout"),
        "{e}"
    );
}
