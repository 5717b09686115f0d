//! The `smartmig` binary as a user runs it: outputs, exit codes and error lines.

use std::process::{Command, Output};

fn smartmig(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smartmig"))
        .args(args)
        .output()
        .expect("run smartmig")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

#[test]
fn mig_layouts_lists_19_maximal_layouts_18_before_r510_with_model_names() {
    let v = json(&smartmig(&[
        "mig",
        "layouts",
        "--gpu",
        "a100-40gb",
        "--format",
        "json",
    ]));
    let layouts = v.as_array().unwrap();
    assert_eq!(layouts.len(), 19);
    for l in layouts {
        for i in l["instances"].as_array().unwrap() {
            assert!(i["profile"].is_string() && i["start"].is_u64(), "{i}");
        }
    }
    assert!(layouts
        .iter()
        .any(|l| l["instances"] == serde_json::json!([{"profile": "7g.40gb", "start": 0}])));
    let pre = json(&smartmig(&[
        "mig",
        "layouts",
        "--gpu",
        "a100-40gb",
        "--pre-r510",
        "--format",
        "json",
    ]));
    assert_eq!(pre.as_array().unwrap().len(), 18);
    let h200 = json(&smartmig(&[
        "mig",
        "layouts",
        "--gpu",
        "h200-141gb",
        "--format",
        "json",
    ]));
    assert_eq!(h200.as_array().unwrap().len(), 19);
    assert!(h200.to_string().contains("3g.71gb"));
}

#[test]
fn an_unknown_gpu_model_exits_3_with_one_line_naming_it() {
    let o = smartmig(&["mig", "layouts", "--gpu", "v100"]);
    assert_eq!(o.status.code(), Some(3));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("unknown GPU model `v100`"), "{e}");
}

#[test]
fn mig_plan_reports_the_busy_instances_it_would_destroy() {
    let o = smartmig(&[
        "mig",
        "plan",
        "--gpu",
        "a100-40gb",
        "--from",
        "c2",
        "--to",
        "c6",
        "--busy",
        "3g.20gb@4,4g.20gb@0",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("keep:    3g.20gb@4"), "{out}");
    assert!(out.contains("touches busy: 4g.20gb@0"), "{out}");
}

#[test]
fn config_check_names_file_line_and_key_of_each_mistake() {
    let dir = std::env::temp_dir().join(format!("smartmig-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            "version = 1\n[policy]\ndecision_intervl_s = 5\n",
            ":3:",
            "decision_intervl_s",
        ),
        (
            "version = 1\n[policy]\ndecision_interval_s = -5\n",
            ":3:",
            "decision_interval_s",
        ),
        ("version = 1\n[gpu]\nmodels = [\"v100\"]\n", ":3:", "gpu.models"),
    ];
    for (i, (text, line, key)) in cases.iter().enumerate() {
        let f = dir.join(format!("bad{i}.toml"));
        std::fs::write(&f, text).unwrap();
        let o = smartmig(&["config", "check", f.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(3), "{text}");
        let e = stderr(&o);
        assert!(
            e.contains(&format!("bad{i}.toml{line}")) && e.contains(key),
            "{e}"
        );
    }
    let good = smartmig(&[
        "config",
        "check",
        concat!(env!("CARGO_MANIFEST_DIR"), "/etc/smartmig.toml"),
    ]);
    assert!(good.status.success(), "{}", stderr(&good));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_dumped_day_replays_to_the_same_result() {
    let dir = std::env::temp_dir().join(format!("smartmig-dump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("day.csv");
    let csv_s = csv.to_str().unwrap();
    let first = json(&smartmig(&[
        "simulate",
        "--seed",
        "7",
        "--format",
        "json",
        "--dump-jobs",
        csv_s,
    ]));
    let replay = json(&smartmig(&[
        "simulate",
        "--seed",
        "7",
        "--format",
        "json",
        "--trace",
        csv_s,
        "--trace-format",
        "jobs",
    ]));
    for key in ["jobs", "energy_wmin", "avg_tardiness_min", "makespan_min"] {
        assert_eq!(first[key], replay[key], "{key}");
    }
    assert!(first["jobs"].as_u64().unwrap() > 3000);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn compare_json_has_the_stable_keys() {
    let v = json(&smartmig(&[
        "compare",
        "--seeds",
        "2",
        "--format",
        "json",
        "--no-model",
    ]));
    for key in [
        "scenario",
        "gpus",
        "jobs",
        "seeds",
        "reference",
        "policies",
        "bounds",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(v["reference"], "static-cedf");
    let policies = v["policies"].as_array().unwrap();
    let names: Vec<&str> = policies.iter().map(|p| p["name"].as_str().unwrap()).collect();
    for n in [
        "none",
        "static-cedf",
        "static-edf",
        "static-met",
        "static-best",
        "periodic",
    ] {
        assert!(names.contains(&n), "{names:?}");
    }
    for p in policies {
        for key in [
            "name",
            "scheduler",
            "energy_wmin",
            "energy_kwh",
            "avg_tardiness_min",
            "et",
            "et_gain",
            "repartitions",
        ] {
            assert!(p.get(key).is_some(), "policy lacks {key}: {p}");
        }
    }
    let reference = policies.iter().find(|p| p["name"] == "static-cedf").unwrap();
    assert!((reference["et"].as_f64().unwrap() - 1.0).abs() < 1e-12);
}

#[test]
fn a_bad_set_override_is_refused_naming_the_key() {
    let o = smartmig(&["simulate", "--set", "workload.multipler=3"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("multipler"), "{}", stderr(&o));
}

#[test]
fn a_static_layout_with_an_unknown_configuration_is_refused() {
    let o = smartmig(&["simulate", "--layout", "c6,c13"]);
    assert_eq!(o.status.code(), Some(3));
    let e = stderr(&o);
    assert!(
        e.contains("--layout c6,c13") && e.contains("unknown configuration `c13`"),
        "{e}"
    );
}

fn simulated_node(dir: &std::path::Path) -> smartmig_gpu::simulated::Simulated {
    use smartmig_core::mig::Catalogue;
    use smartmig_gpu::simulated::Simulated;
    let m = Catalogue::embedded().model("a100-40gb").unwrap().clone();
    Simulated::create_layouts(dir, &m, &["7g@0", "4g@0 3g@4"]).unwrap()
}

#[test]
fn mig_probe_of_a_simulated_node_matches_the_catalogue_and_lists_a_drift() {
    let dir = tempfile::tempdir().unwrap();
    let sim = simulated_node(dir.path());
    let path = dir.path().to_str().unwrap();
    let v = json(&smartmig(&[
        "mig",
        "probe",
        "--simulated",
        path,
        "--format",
        "json",
    ]));
    let gpus = v.as_array().unwrap();
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[1]["model"], "a100-40gb");
    assert_eq!(gpus[1]["mig_enabled"], true);
    let three = gpus[1]["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "3g.20gb")
        .unwrap();
    assert_eq!(three["starts"], serde_json::json!([0, 4]));
    assert_eq!(gpus[1]["differences"], serde_json::json!([]));

    // A driver that no longer offers 3g.20gb at slice 4.
    let mut node = sim.load().unwrap();
    let m = smartmig_core::mig::Catalogue::embedded()
        .model("a100-40gb")
        .unwrap()
        .clone();
    node.gpus[1].profiles = Some(
        m.profiles
            .iter()
            .map(|p| smartmig_gpu::simulated::SimProfile {
                nvml_id: p.nvml_id,
                compute: u32::from(p.compute),
                max_count: u32::from(p.max_count),
                memory_mb: 1000,
                memory_slices: p.memory_slices,
                starts: if p.name == "3g.20gb" {
                    vec![0]
                } else {
                    p.starts.clone()
                },
            })
            .collect(),
    );
    sim.save(&node).unwrap();
    let o = smartmig(&["mig", "probe", "--simulated", path]);
    assert!(!o.status.success());
    let out = stdout(&o);
    assert!(
        out.contains("differs: 3g.20gb: placements [0, 4] in the catalogue, [0] on the device"),
        "{out}"
    );
    assert!(
        stderr(&o).contains("1 GPU(s) differ from the catalogue"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn mig_probe_without_nvml_is_a_clean_error_naming_the_library() {
    if std::path::Path::new("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").exists() {
        eprintln!("skipped: this machine has NVML");
        return;
    }
    let o = smartmig(&["mig", "probe"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("cannot use NVML (libnvidia-ml.so.1)"), "{e}");
}

#[test]
fn doctor_compares_gres_conf_with_a_simulated_nodes_instances_and_names_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    simulated_node(&sim);
    let conf = dir.path().join("slurm.conf");
    std::fs::write(&conf, "ClusterName=t\n").unwrap();
    // GPU 0: 7g@0 (nvidia0); GPU 1: 4g@0 (nvidia8), 3g@4 (nvidia12).
    let line = |ty: &str, n: u32| {
        format!(
            "NodeName=gpu01 Name=gpu Type={ty} File={}/dev/nvidia{n}\n",
            sim.display()
        )
    };
    let all = [line("7g.40gb", 0), line("4g.20gb", 8), line("3g.20gb", 12)];
    let doctor = || {
        smartmig(&[
            "doctor",
            "--slurm-conf",
            conf.to_str().unwrap(),
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/etc/smartmig.toml"),
            "--simulated",
            sim.to_str().unwrap(),
            "--node",
            "gpu01",
            "--skip",
            "slurm",
            "--skip",
            "plugin",
            "--skip",
            "snapshot",
            "--skip",
            "nvml",
            "--format",
            "json",
        ])
    };
    let gres = |o: &Output| {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["check"] == "gres")
            .unwrap()
            .clone()
    };

    std::fs::write(dir.path().join("gres.conf"), all.concat()).unwrap();
    let o = doctor();
    let f = gres(&o);
    assert_eq!(f["status"], "ok", "{f:#}");
    let msg = f["message"].as_str().unwrap();
    assert!(
        msg.contains("3 lines for node gpu01 match the 3 MIG instances"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("(source: simulated node {})", sim.display())),
        "{msg}"
    );

    // The 3g line gone: the instance is named, the exit code is a failure's.
    std::fs::write(dir.path().join("gres.conf"), all[..2].concat()).unwrap();
    let o = doctor();
    assert_eq!(o.status.code(), Some(5), "{}", stdout(&o));
    let msg = gres(&o)["message"].as_str().unwrap().to_string();
    assert!(msg.contains("reports GPU 1 3g.20gb@4"), "{msg}");
    assert!(msg.contains("gres.conf has no line for it"), "{msg}");
}

#[test]
fn compare_takes_a_seed_range_and_skips_the_bounds() {
    let v = json(&smartmig(&[
        "compare",
        "--seeds",
        "1000003..=1000004",
        "--no-bounds",
        "--no-model",
        "--set",
        "workload.days=0.05",
        "--format",
        "json",
    ]));
    assert_eq!(v["seeds"], serde_json::json!([1000003, 1000004]));
    assert_eq!(v["days_from"], "seeds 1000003..=1000004");
    assert!(v["bounds"].is_null());
    let policies = v["policies"].as_array().unwrap();
    let names: Vec<&str> = policies.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"periodic-best"), "{names:?}");
    let none = policies.iter().find(|p| p["name"] == "none").unwrap();
    assert_eq!(none["scheduler"], "edf", "no partitioning runs EDF");
    let best = policies.iter().find(|p| p["name"] == "static-best").unwrap();
    assert!(best.get("vs_static_best").is_none() && best.get("note").is_none());
    let periodic = policies.iter().find(|p| p["name"] == "periodic-best").unwrap();
    assert_eq!(periodic["vs_static_best"]["days"], 2);
}

#[test]
fn a_tuned_baseline_under_overrides_is_marked_or_retuned() {
    let args = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut a = vec![
            "compare",
            "--seeds",
            "1",
            "--no-bounds",
            "--no-model",
            "--set",
            "workload.multiplier=3",
            "--set",
            "workload.days=0.05",
            "--tune-seeds",
            "1..=2",
        ];
        a.extend_from_slice(extra);
        a
    };
    let o = smartmig(&args(&["--no-tune"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("static-best*") && out.contains("periodic-best*"),
        "{out}"
    );
    assert!(
        out.contains("* static-best: tuned for the scenario file, not for --set workload.multiplier=3"),
        "{out}"
    );
    let o = smartmig(&args(&[]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("static-best: tuning on training seeds 1..=2"),
        "{}",
        stderr(&o)
    );
    assert!(!stdout(&o).contains("static-best*"), "{}", stdout(&o));
}

#[test]
fn writing_a_tuned_layout_under_overrides_is_refused() {
    let dir = std::env::temp_dir().join(format!("smartmig-write-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.toml");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/etc/scenarios/paper-a100x8.toml"),
        &file,
    )
    .unwrap();
    let o = smartmig(&[
        "tune-static",
        "--scenario",
        file.to_str().unwrap(),
        "--write",
        "--set",
        "workload.multiplier=3",
    ]);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stderr(&o).contains("--write: --set workload.multiplier=3 changes the scenario the file describes"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn simulate_over_several_days_reports_et_per_day_and_warns_of_ignored_flags() {
    let o = smartmig(&[
        "simulate",
        "--policy",
        "periodic",
        "--layout",
        "c1",
        "--seeds",
        "2",
        "--set",
        "workload.days=0.05",
        "--format",
        "json",
    ]);
    assert!(
        stderr(&o).contains("warning: --layout is ignored with --policy periodic"),
        "{}",
        stderr(&o)
    );
    let v = json(&o);
    let days = v["days"].as_array().unwrap();
    assert_eq!(days.len(), 2);
    assert_eq!(days[1]["seed"], 1000001);
    assert!(days.iter().all(|d| d["et"].as_f64().is_some_and(|e| e > 0.0)));
    assert!(v["mean"]["et_se"].as_f64().is_some());
    let e = stderr(&smartmig(&["simulate", "--seeds", "5..3"]));
    assert!(e.contains("`5..3` is empty"), "{e}");
}

#[test]
fn tune_periodic_writes_the_scenario_and_a_smartmig_toml_smartmigd_accepts() {
    let dir = std::env::temp_dir().join(format!("smartmig-periodic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("s.toml");
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/etc/scenarios/paper-a100x8.toml"
    ))
    .unwrap()
    .replace("count = 8 }", "count = 2 }")
    .replace("multiplier = 20", "multiplier = 5")
    .replace("days = 1\n", "days = 0.1\n");
    std::fs::write(&scenario, text).unwrap();
    let conf = dir.join("smartmig.toml");
    std::fs::write(&conf, "version = 1\n# site\n[policy]\nkind = \"periodic\"\n").unwrap();
    let o = smartmig(&[
        "tune-periodic",
        "--scenario",
        scenario.to_str().unwrap(),
        "--seeds",
        "2",
        "--blocks",
        "2",
        "--passes",
        "1",
        "--validation-seeds",
        "2",
        "--eval-seeds",
        "2",
        "--write",
        "--smartmig-toml",
        conf.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("guard:") && out.contains("written to baselines.periodic_best"),
        "{out}"
    );
    let written = std::fs::read_to_string(&scenario).unwrap();
    assert!(written.contains("periodic_best = ["), "{written}");
    let check = smartmig(&["config", "check", conf.to_str().unwrap()]);
    assert!(check.status.success(), "{}", stderr(&check));
    let toml = std::fs::read_to_string(&conf).unwrap();
    assert!(
        toml.contains("[[policy.periodic]]") && toml.contains("# site"),
        "{toml}"
    );
    // The written schedule runs: simulate --policy periodic-best reads it back.
    let v = json(&smartmig(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--policy",
        "periodic-best",
        "--format",
        "json",
    ]));
    assert!(v["et"].as_f64().is_some());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn compare_on_a_trace_runs_its_days_and_says_so() {
    let dir = std::env::temp_dir().join(format!("smartmig-trace-days-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("two-days.csv");
    let o = smartmig(&[
        "simulate",
        "--days",
        "2",
        "--set",
        "workload.multiplier=1",
        "--dump-jobs",
        csv.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = smartmig(&[
        "compare",
        "--trace",
        csv.to_str().unwrap(),
        "--trace-format",
        "jobs",
        "--seeds",
        "5",
        "--no-model",
        "--no-bounds",
        "--no-tune",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--seeds is ignored: the days are the trace's"),
        "{}",
        stderr(&o)
    );
    let out = stdout(&o);
    assert!(
        out.contains(&format!("2 evaluation days (2 days of trace {})", csv.display())),
        "{out}"
    );
    assert!(out.contains("static-best*"), "tuned on the generator, not the trace: {out}");
    std::fs::remove_dir_all(&dir).ok();
}
