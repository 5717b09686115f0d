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
