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
    // Issue 17: a plan that destroys a busy instance cannot run; it used to exit 0.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("keep:    3g.20gb@4"), "{out}");
    let e = stderr(&o);
    assert!(e.contains("destroys busy instance(s) 4g.20gb@0"), "{e}");
    let idle = smartmig(&[
        "mig",
        "plan",
        "--gpu",
        "a100-40gb",
        "--from",
        "c2",
        "--to",
        "c6",
        "--busy",
        "3g.20gb@4",
    ]);
    assert!(idle.status.success(), "{}", stderr(&idle));
    assert!(stdout(&idle).contains("busy instances untouched"));
}

/// Issue 17: `--from c13` was read as an instance list and got a misleading error.
#[test]
fn an_unknown_configuration_in_mig_plan_is_named_with_the_known_ones() {
    let o = smartmig(&["mig", "plan", "--gpu", "a100-40gb", "--from", "c13", "--to", "c1"]);
    assert_eq!(o.status.code(), Some(3));
    let e = stderr(&o);
    assert!(
        e.contains("--from c13: unknown configuration `c13`") && e.contains("c12"),
        "{e}"
    );
}

/// Issue 17: `mig layouts | head -1` panicked on the closed pipe (exit 101).
#[test]
fn no_command_panics_when_its_reader_closes_the_pipe() {
    use std::io::Read;
    use std::process::Stdio;
    for args in [
        &["mig", "layouts", "--gpu", "a100-40gb"][..],
        &["mig", "models"],
        &["mig", "configs"],
        &["mig", "plan", "--gpu", "a100-40gb", "--from", "c12", "--to", "c1"],
    ] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_smartmig"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read nothing: close our end at once, as `head -0` would.
        drop(child.stdout.take());
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = child.wait().unwrap();
        assert_ne!(status.code(), Some(101), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn mig_configs_lists_every_named_configuration_with_its_placement() {
    let o = smartmig(&["mig", "configs", "--gpu", "a100-40gb"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("c3") && out.contains("4g.20gb@0 2g.10gb@4 1g.10gb@6"),
        "{out}"
    );
    let v = json(&smartmig(&["mig", "configs", "--format", "json", "--pre-r510"]));
    let all = v.as_array().unwrap();
    // Every catalogue model, and c2 (4g with 3g) unavailable before R510.
    let c2: Vec<&serde_json::Value> = all.iter().filter(|c| c["name"] == "c2").collect();
    assert!(c2.len() >= 4 && c2.iter().all(|c| c["available"] == false), "{v}");
}

/// Issue 17: `config check` printed `MeanField` and `Drain`, not the file's spellings.
#[test]
fn config_check_prints_the_configs_own_spellings() {
    let o = smartmig(&[
        "config",
        "check",
        concat!(env!("CARGO_MANIFEST_DIR"), "/etc/smartmig.toml"),
    ]);
    let out = stdout(&o);
    assert!(out.contains("policy: mean-field, mode: dry-run"), "{out}");
}

/// Issue 17: same codes as `smartmigd status` (controller/tests/cli.rs).
#[test]
fn status_exits_3_for_a_missing_config_and_1_for_a_missing_status_file() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("nope.toml");
    let o = smartmig(&["status", "--config", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let cfg = d.path().join("smartmig.toml");
    std::fs::write(
        &cfg,
        format!(
            "version = 1\n[controller]\nstate_dir = \"{}\"\n",
            d.path().display()
        ),
    )
    .unwrap();
    let o = smartmig(&["status", "--config", cfg.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
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
fn mig_layouts_of_the_a30_follow_its_four_slice_table() {
    let v = json(&smartmig(&[
        "mig", "layouts", "--gpu", "a30-24gb", "--format", "json",
    ]));
    let got: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            l["instances"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| format!("{}@{}", i["profile"].as_str().unwrap(), i["start"]))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(
        got,
        [
            "1g.6gb@0 1g.6gb@1 1g.6gb@2 1g.6gb@3",
            "1g.6gb@0 1g.6gb@1 2g.12gb@2",
            "2g.12gb@0 1g.6gb@2 1g.6gb@3",
            "2g.12gb@0 2g.12gb@2",
            "4g.24gb@0",
        ]
    );
    for gpu in [
        "h100-pcie-80gb",
        "h100-nvl-94gb",
        "h200-nvl-141gb",
        "gh200-96gb",
        "gh200-144gb",
        "b200-180gb",
    ] {
        let v = json(&smartmig(&["mig", "layouts", "--gpu", gpu, "--format", "json"]));
        assert_eq!(v.as_array().unwrap().len(), 19, "{gpu}");
    }
}

/// A file written the way mig-parted's examples are, read as smartmig's action space and
/// written back: the same mig-configs, profiles and counts.
#[test]
fn a_mig_parted_file_imports_and_exports_back_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "version: v1\nmig-configs:\n  all-disabled:\n  - devices: all\n    mig-enabled: false\n  all-balanced:\n  - device-filter:\n    - '0x20B010DE'\n    - '0x20F110DE'\n    devices: all\n    mig-enabled: true\n    mig-devices:\n      1g.5gb: 2\n      2g.10gb: 1\n      3g.20gb: 1\n  - device-filter:\n    - '0x20B710DE'\n    devices: all\n    mig-enabled: true\n    mig-devices:\n      1g.6gb: 2\n      2g.12gb: 1\n  all-3g.20gb:\n  - device-filter:\n    - '0x20B010DE'\n    - '0x20F110DE'\n    devices: all\n    mig-enabled: true\n    mig-devices:\n      3g.20gb: 2\n";
    std::fs::write(dir.path().join("mig.yaml"), yaml).unwrap();
    let v = json(&smartmig(&[
        "mig",
        "import",
        dir.path().join("mig.yaml").to_str().unwrap(),
        "--format",
        "json",
    ]));
    let got: Vec<(String, String)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["config"].as_str().unwrap().into(),
                i["gpu"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("all-balanced", "a100-40gb"),
        ("all-3g.20gb", "a100-40gb"),
        ("all-balanced", "a30-24gb"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(got, want);
    let config = dir.path().join("smartmig.toml");
    std::fs::write(
        &config,
        "version = 1\n[gpu]\nmodels = [\"a100-40gb\", \"a30-24gb\"]\nmig_parted = \"mig.yaml\"\n[policy]\nkind = \"static\"\nstatic_layout = [\"all-balanced\"]\n",
    )
    .unwrap();
    let o = smartmig(&[
        "mig",
        "export",
        "--action-space",
        "--config",
        config.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let back = stdout(&o);
    // all-disabled gives no layout, so it does not come back; the rest does, unchanged.
    let expected = yaml.replace("  all-disabled:\n  - devices: all\n    mig-enabled: false\n", "");
    let reorder = |t: &str| {
        let mut v: Vec<String> = t.split("\n  all-").map(String::from).collect();
        v.sort();
        v
    };
    assert_eq!(reorder(&back), reorder(&expected), "{back}");
}

#[test]
fn a_mixed_a100_h100_a30_cluster_runs_in_compare_with_both_baselines_tuned_for_every_model() {
    // --tune: static-best and periodic-best are searched over the three models.
    let v = json(&smartmig(&[
        "compare",
        "--tune",
        "--tune-seeds",
        "2",
        "--scenario",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/etc/scenarios/mixed-a100-h100-a30.toml"
        ),
        "--set",
        "workload.days=0.5",
        "--seeds",
        "1",
        "--no-model",
        "--format",
        "json",
    ]));
    assert_eq!(v["gpus"], 8);
    let policies = v["policies"].as_array().unwrap();
    let names: Vec<&str> = policies.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "none",
            "static-cedf",
            "static-edf",
            "static-met",
            "static-random",
            "static-best",
            "periodic",
            "periodic-best"
        ]
    );
    for p in policies {
        assert!(p["energy_wmin"].as_f64().unwrap() > 0.0, "{p}");
    }
    // The 08:00 entry changes layouts on every model, the A30s' to q3 and q4.
    let periodic = policies.iter().find(|p| p["name"] == "periodic").unwrap();
    assert!(periodic["repartitions"].as_f64().unwrap() >= 6.0, "{periodic}");
    let share = |name: &str| {
        periodic["config_share"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s[0] == name)
            .and_then(|s| s[1].as_f64())
            .unwrap()
    };
    assert!(
        share("a30-24gb/q3") > 0.0 && share("a30-24gb/q4") > 0.0,
        "{periodic}"
    );
}

/// Issue 17: outside the repository `compare` left the smart-mig row out without a word.
#[test]
fn compare_says_in_one_line_why_the_smart_mig_row_is_missing() {
    let d = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_smartmig"))
        .args([
            "compare",
            "--seeds",
            "1",
            "--set",
            "workload.multiplier=1",
            "--format",
            "json",
        ])
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    let why: Vec<&str> = e.lines().filter(|l| l.contains("no smart-mig row")).collect();
    assert_eq!(why.len(), 1, "{e}");
    assert!(
        why[0].contains("a100-40gb-preempt.onnx") && why[0].contains("--model"),
        "{e}"
    );
    // The JSON on standard output is untouched by the notice.
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["policies"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["name"] != "smart-mig"));
}

/// Issue 17: ONNX Runtime wrote ~/.cache/Microsoft/DeveloperTools/.onnxruntime/deviceid.
#[test]
fn onnx_runtime_leaves_no_telemetry_files_behind() {
    let lib = smartmig::policy::provision::fetch_runtime().expect("ONNX Runtime for the tests");
    let home = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_smartmig"))
        .args([
            "policy",
            "inspect",
            concat!(env!("CARGO_MANIFEST_DIR"), "/onnx/a100-40gb-drain.onnx"),
        ])
        .env("HOME", home.path())
        .env_remove("XDG_CACHE_HOME")
        .env_remove("ORT_DISABLE_TELEMETRY")
        .env("ORT_DYLIB_PATH", &lib)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !home.path().join(".cache/Microsoft").exists(),
        "ONNX Runtime wrote under {}",
        home.path().display()
    );
}

/// `policy inspect --format json` gives the trainings an average holds as the file stores
/// them (scenario and seed each), so a script need not parse the table's text.
#[test]
fn inspect_json_lists_the_trainings_of_an_average_and_none_for_one_training() {
    let file = |name: &str| format!("{}/onnx/{name}", env!("CARGO_MANIFEST_DIR"));
    let average = json(&smartmig(&[
        "policy",
        "inspect",
        &file("energy-capped/a100-40gb-preempt.onnx"),
        "--format",
        "json",
    ]));
    let held = average["averaged_from"]
        .as_array()
        .expect("the shipped energy-capped file is an average: a list of its trainings");
    assert!(held.len() >= 2, "{held:?}");
    for t in held {
        assert!(
            t["scenario"]
                .as_str()
                .is_some_and(|s| s.ends_with("paper-a100x8.toml")),
            "{t}"
        );
        assert!(t["seed"].is_u64(), "{t}");
    }
    let single = json(&smartmig(&[
        "policy",
        "inspect",
        &file("a100-40gb-drain.onnx"),
        "--format",
        "json",
    ]));
    assert!(single.get("averaged_from").is_none(), "{single}");
    assert!(single["training_seed"].is_u64(), "{single}");
}

/// The shipped policies for padded sites say so in their contract (smartmigd runs them
/// only with `padding = true`), and their guards passed; the preempt one was validated
/// where requeued jobs start over, requeueing only jobs younger than 60 s; the other
/// shipped files were validated without padding.
#[test]
fn only_the_padded_familys_policies_are_marked_as_validated_with_padding() {
    let inspect = |name: &str| {
        json(&smartmig(&[
            "policy",
            "inspect",
            &format!("{}/onnx/{name}", env!("CARGO_MANIFEST_DIR")),
            "--format",
            "json",
        ]))
    };
    for (name, semantics) in [
        ("padded/a100-40gb-drain.onnx", "drain"),
        ("padded/a100-40gb-preempt.onnx", "preempt"),
    ] {
        let padded = inspect(name);
        assert_eq!(padded["padding"], true, "{padded}");
        assert_eq!(padded["semantics"], semantics, "{padded}");
        assert!(
            padded["guard"].as_str().is_some_and(|g| g.starts_with("passed")),
            "{padded}"
        );
    }
    let restart = inspect("padded/a100-40gb-preempt.onnx");
    assert_eq!(
        (&restart["requeued"], &restart["requeue_max_run_s"]),
        (&serde_json::json!("restart"), &serde_json::json!(60.0)),
        "{restart}"
    );
    assert!(inspect("padded/a100-40gb-drain.onnx")
        .get("requeue_max_run_s")
        .is_none());
    for name in [
        "a100-40gb-drain.onnx",
        "a100-40gb-preempt.onnx",
        "moving-mix/a100-40gb-preempt.onnx",
        "energy-capped/a100-40gb-preempt.onnx",
    ] {
        assert_eq!(inspect(name)["padding"], false, "{name}");
    }
}

/// `policy average` guards on a scenario that makes its members' assumptions (semantics,
/// padding, what a requeued job keeps), or says which `--set` would: the verdict goes into a contract that records them.
#[test]
fn policy_average_refuses_a_scenario_other_than_its_members_were_validated_on() {
    let file = |name: &str| format!("{}/onnx/{name}", env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("average.onnx");
    let out_arg = out.display().to_string();
    let (drain, padded) = (file("a100-40gb-drain.onnx"), file("padded/a100-40gb-drain.onnx"));
    let preempt = file("a100-40gb-preempt.onnx");
    for (members, args, want) in [
        ([&drain, &drain], vec![], "repartition.semantics=\"drain\""),
        (
            [&padded, &padded],
            vec!["--semantics", "drain"],
            "validated with padding records, the scenario has none",
        ),
        (
            [&preempt, &preempt],
            vec!["--set", "repartition.requeued=\"restart\""],
            "validated where requeued jobs resume, the scenario's restart",
        ),
    ] {
        let mut argv = vec!["policy", "average", members[0], members[1], "--out", &out_arg];
        argv.extend(args);
        let o = smartmig(&argv);
        assert!(!o.status.success(), "{}", stdout(&o));
        assert!(stderr(&o).contains(want), "{}", stderr(&o));
        assert!(!out.exists(), "nothing written");
    }
}

/// docs/model.md's table of configurations is the catalogue's, placement by placement.
#[test]
fn the_configurations_table_in_docs_model_md_matches_the_catalogue() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/model.md")).unwrap();
    let rows: Vec<(String, String)> = doc
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?;
            let placement = cells.get(3)?;
            (name.starts_with('c') && name[1..].parse::<u32>().is_ok())
                .then(|| (name.to_string(), placement.to_string()))
        })
        .collect();
    let v = json(&smartmig(&[
        "mig",
        "configs",
        "--gpu",
        "a100-40gb",
        "--format",
        "json",
    ]));
    let catalogue: Vec<(String, String)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let placement: Vec<String> = c["instances"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| format!("{}@{}", i["profile"].as_str().unwrap(), i["start"]))
                .collect();
            (c["name"].as_str().unwrap().to_string(), placement.join(" "))
        })
        .collect();
    assert_eq!(rows, catalogue);
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

/// `simulate --policy none` schedules as compare's `none` row does (EDF), and a policy file
/// trained under other semantics than the run's is named.
#[test]
fn simulate_none_runs_edf_and_a_policy_of_other_semantics_is_warned_of() {
    let sim = |extra: &[&str]| {
        let mut args = vec![
            "simulate",
            "--policy",
            "none",
            "--set",
            "workload.days=0.05",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        json(&smartmig(&args))["scheduler"].clone()
    };
    assert_eq!(sim(&[]), "edf");
    assert_eq!(sim(&["--scheduler", "cedf"]), "cedf");
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/onnx/a100-40gb-preempt.onnx");
    let o = smartmig(&[
        "simulate",
        "--policy",
        "mean-field",
        "--model",
        model,
        "--semantics",
        "drain",
        "--set",
        "workload.days=0.05",
    ]);
    assert!(
        stderr(&o).contains("was trained under preempt semantics and runs here under drain"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_stay_threshold_holds_back_the_learned_policys_moves_and_a_bad_one_is_refused() {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/onnx/a100-40gb-preempt.onnx");
    let repartitions = |threshold: &str| {
        let o = smartmig(&[
            "simulate",
            "--policy",
            "mean-field",
            "--model",
            model,
            "--stay-threshold",
            threshold,
            "--set",
            "workload.days=0.25",
            "--format",
            "json",
        ]);
        json(&o)["repartitions"].as_u64().unwrap()
    };
    let (free, held) = (repartitions("0"), repartitions("0.2"));
    assert!(held < free, "{held} with a margin of 0.2, {free} without");
    let e = stderr(&smartmig(&["simulate", "--stay-threshold", "1.5"]));
    assert!(e.contains("1.5 is not between 0 and 1"), "{e}");
    let e = stderr(&smartmig(&[
        "simulate",
        "--stay-threshold",
        "0.1",
        "--set",
        "workload.days=0.01",
    ]));
    assert!(
        e.contains("warning: --stay-threshold is ignored with --policy static"),
        "{e}"
    );
}

/// `dir/s.toml`: the reference scenario file over a tenth of a day, with `edits` (text
/// replaced) applied.
fn reference_copy(dir: &std::path::Path, edits: &[(&str, &str)]) -> std::path::PathBuf {
    let mut text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/etc/scenarios/paper-a100x8.toml"
    ))
    .unwrap()
    .replace("days = 1\n", "days = 0.1\n");
    for (from, to) in edits {
        assert!(text.contains(from), "{from}");
        text = text.replace(from, to);
    }
    let path = dir.join("s.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A small site for the tests that write into a smartmig.toml: the reference scenario on
/// 2 GPUs at a quarter of its load, in `dir`.
fn small_site(dir: &std::path::Path) -> std::path::PathBuf {
    reference_copy(
        dir,
        &[
            ("count = 8 }", "count = 2 }"),
            ("multiplier = 20", "multiplier = 5"),
        ],
    )
}

#[test]
fn a_refused_schedule_falls_back_to_static_best_itself_where_one_node_cannot_hold_its_mix() {
    // Seven GPUs to a node: one node cannot hold static-best's c2×6 c6×2, so the search
    // starts from its nearest share, c2×5 c6×2; cycled over the 8 GPUs that is
    // static-best's mix again, no better, so with no pass the guard refuses it.
    let dir = tempfile::tempdir().unwrap();
    let scenario = reference_copy(
        dir.path(),
        &[
            ("gpus_per_node = 8", "gpus_per_node = 7"),
            ("multiplier = 20", "multiplier = 10"),
        ],
    );
    let v = json(&small_tune_periodic(&scenario, "1", "0", &["--format", "json"]));
    let layout = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(v["search"]["start_exact"], false, "{v}");
    assert_eq!(layout(&v["search"]["start"]).len(), 7, "{v}");
    assert_eq!(v["guard"]["passed"], false, "{v}");
    let static_best = layout(&v["static_best"]);
    assert_eq!(static_best, ["c2", "c2", "c2", "c2", "c2", "c2", "c6", "c6"]);
    let schedule = v["schedule"].as_array().unwrap();
    assert_eq!(schedule.len(), 1, "{v}");
    assert_eq!(layout(&schedule[0]["layout"]), static_best, "{v}");
    // The search's own result stays as found, beside what is written.
    assert_eq!(layout(&v["search"]["schedule"][0]["layout"]).len(), 7, "{v}");
    // What is reported as periodic-best is then static-best, day by day.
    assert_eq!(v["periodic_best_et"], v["static_best_et"], "{v}");
}

/// `tune-periodic` on `scenario` over 2 training, validation and evaluation days, with
/// `blocks` blocks, `passes` passes and `extra` arguments.
fn small_tune_periodic(scenario: &std::path::Path, blocks: &str, passes: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "tune-periodic",
        "--scenario",
        scenario.to_str().unwrap(),
        "--seeds",
        "2",
        "--blocks",
        blocks,
        "--passes",
        passes,
        "--validation-seeds",
        "2",
        "--eval-seeds",
        "2",
    ];
    args.extend_from_slice(extra);
    smartmig(&args)
}

/// On a site's history the schedule is searched on the earlier half of its days and judged
/// (guard and report) on the later half, never on generated days.
#[test]
fn tune_periodic_on_a_trace_is_judged_on_the_trace_days_it_did_not_search() {
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/alibaba/openb_pod_list_default.csv"
    );
    let v = json(&smartmig(&[
        "tune-periodic",
        "--trace",
        trace,
        "--trace-format",
        "alibaba",
        "--blocks",
        "2",
        "--passes",
        "0",
        "--format",
        "json",
    ]));
    // The trace's 44 days: 22 searched, 22 held out for the guard and the report.
    assert_eq!(v["search"]["seeds"].as_array().unwrap().len(), 22, "{v}");
    assert_eq!(v["guard"]["vs_static_best"]["days"], 22, "{v}");
    let eval = v["evaluation_days"].as_str().unwrap();
    assert!(
        eval.contains("22 days of trace") && eval.contains("(days 23..=44 of 44, held out)"),
        "{eval}"
    );
}

/// A site whose layouts come from a mig-parted file: the schedule is searched among its
/// mig-configs and written in their names, and the file still loads.
#[test]
fn tune_periodic_on_a_mig_parted_site_writes_its_mig_configs() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = small_site(dir.path());
    std::fs::write(
        dir.path().join("mig.yaml"),
        "version: v1\nmig-configs:\n  whole:\n    - devices: all\n      mig-enabled: true\n      \
         mig-devices:\n        \"7g.40gb\": 1\n  balanced:\n    - devices: all\n      mig-enabled: true\n      \
         mig-devices:\n        \"1g.5gb\": 2\n        \"2g.10gb\": 1\n        \"3g.20gb\": 1\n",
    )
    .unwrap();
    let conf = dir.path().join("smartmig.toml");
    let site = "version = 1\n[gpu]\nmig_parted = \"mig.yaml\"\n[policy]\nstatic_layout = [\"whole\"]\n";
    std::fs::write(&conf, site).unwrap();
    let o = small_tune_periodic(&scenario, "2", "1", &["--smartmig-toml", conf.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--set cluster.configurations=[\"c1\", \"c"),
        "{}",
        stderr(&o)
    );
    assert!(
        stdout(&o).contains("in its mig-configs' names (from 00:00 "),
        "{}",
        stdout(&o)
    );
    let written = std::fs::read_to_string(&conf).unwrap();
    let v: toml::Table = written.parse().unwrap();
    let layouts: Vec<&str> = v["policy"]["periodic"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["layout"].as_array().unwrap())
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        !layouts.is_empty() && layouts.iter().all(|l| ["whole", "balanced"].contains(l)),
        "{written}"
    );
    let o = smartmig(&["config", "check", conf.to_str().unwrap()]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    // tune-static names its layout by the mig-configs too; a learned policy, whose action
    // space is the catalogue's, is refused before training.
    let o = smartmig(&[
        "tune-static",
        "--scenario",
        scenario.to_str().unwrap(),
        "--seeds",
        "1",
        "--smartmig-toml",
        conf.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("'s mig-configs: static_layout = [\"")
            && stdout(&o).contains("\"]  # under [policy]"),
        "{}",
        stdout(&o)
    );
    let out = dir.path().join("p.onnx");
    let o = smartmig(&[
        "train",
        "--scenario",
        scenario.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--smartmig-toml",
        conf.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("a learned policy chooses among every configuration") && !out.exists(),
        "{}",
        stderr(&o)
    );
}

/// A cluster of three GPU models: the schedule covers each model's GPUs, and the
/// smartmig.toml written gives smartmigd, which reads a layout list model by model, every
/// model's layouts of each block.
#[test]
fn tune_periodic_on_a_mixed_cluster_writes_each_models_layouts_as_smartmigd_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("smartmig.toml");
    std::fs::write(
        &conf,
        "version = 1\n[gpu]\nmodels = [\"a100-40gb\", \"h100-80gb\", \"a30-24gb\"]\ndriver = \"r510\"\n",
    )
    .unwrap();
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/etc/scenarios/mixed-a100-h100-a30.toml"
    );
    let o = small_tune_periodic(
        std::path::Path::new(scenario),
        "2",
        "1",
        &[
            "--set",
            "workload.days=0.25",
            "--smartmig-toml",
            conf.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    let v = json(&o);
    let schedule = v["schedule"].as_array().unwrap();
    // `config check` shows what each model reads.
    let o = smartmig(&["config", "check", conf.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("\n  h100-80gb: static_layout c1; from 00:00 "),
        "{}",
        stdout(&o)
    );
    let written = smartmig_core::config::Config::from_file(&conf)
        .unwrap()
        .resolve(Some(dir.path()))
        .unwrap();
    assert_eq!(written.config.policy.periodic.len(), schedule.len());
    // GPUs in cluster order: 4 A100s, 2 H100s, 2 A30s.
    let first_gpu = [0, 4, 6];
    let count = [4, 2, 2];
    for (e, entry) in schedule.iter().enumerate() {
        let searched: Vec<&str> = entry["layout"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert_eq!(searched.len(), 8, "{searched:?}");
        for (m, model) in written.models.iter().enumerate() {
            let read = &model.periodic[e];
            let read: Vec<&str> = (0..count[m])
                .map(|i| model.configurations[read[i % read.len()]].name.as_str())
                .collect();
            assert_eq!(
                read,
                searched[first_gpu[m]..first_gpu[m] + count[m]],
                "{} at {}",
                model.model.key,
                entry["at"]
            );
        }
    }
}

/// A site with GPU models the scenario does not have: a schedule of the scenario's layouts
/// names none for them and would not load there, so none is written and the file stays.
#[test]
fn tune_periodic_writes_nothing_into_a_smartmig_toml_the_schedule_would_break() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = small_site(dir.path());
    let conf = dir.path().join("smartmig.toml");
    let site = "version = 1\n[gpu]\nmodels = [\"a100-40gb\", \"a30-24gb\"]\n[policy]\nstatic_layout = [\"c1\", \"q1\"]\n";
    std::fs::write(&conf, site).unwrap();
    let o = small_tune_periodic(&scenario, "2", "1", &["--smartmig-toml", conf.to_str().unwrap()]);
    assert!(!o.status.success(), "{}", stdout(&o));
    let e = stderr(&o);
    assert!(
        e.contains("the schedule found does not load there, nothing written")
            && e.contains("names no layout for a30-24gb"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), site);
}

#[test]
fn tune_periodic_writes_the_scenario_and_a_smartmig_toml_smartmigd_accepts_tuned_under_its_limits() {
    let dir = std::env::temp_dir().join(format!("smartmig-periodic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = small_site(&dir);
    let conf = dir.join("smartmig.toml");
    std::fs::write(&conf, "version = 1\n# site\n[policy]\nkind = \"periodic\"\n").unwrap();
    // A small search, writing its schedule into smartmig.toml `conf` when there is one.
    let search = |conf: Option<&std::path::Path>, extra: &[&str]| {
        let mut args = Vec::new();
        if let Some(conf) = conf {
            args.extend(["--smartmig-toml", conf.to_str().unwrap()]);
        }
        args.extend_from_slice(extra);
        small_tune_periodic(&scenario, "2", "1", &args)
    };
    let tune = |conf: &std::path::Path, extra: &[&str]| search(Some(conf), extra);
    let o = tune(&conf, &["--write"]);
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
    // A dry-run file: the rules recorded are the scenario's mode and requeued jobs.
    assert!(
        toml.contains("periodic_tuned_under = \"mode = preempt, padding = false, requeued = resume,"),
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
    // A site whose smartmigd drains with padding: the search runs under its limits, and
    // the scenario file, which says preempt, is not written with such a schedule.
    let drain = dir.join("drain.toml");
    std::fs::write(
        &drain,
        "version = 1\n[controller]\nmode = \"drain\"\n[controller.central]\npadding = true\n",
    )
    .unwrap();
    let refused = tune(&drain, &["--write"]);
    assert!(!refused.status.success());
    let e = stderr(&refused);
    assert!(
        e.contains("drain.toml runs smartmigd under other limits")
            && e.contains("repartition.semantics=\"drain\"")
            && e.contains("repartition.index_rule=\"padded-assigned\""),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(&scenario).unwrap(),
        written,
        "scenario untouched"
    );
    let o = tune(&drain, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("running under"), "{}", stderr(&o));
    assert!(stdout(&o).contains("drain semantics"), "{}", stdout(&o));
    let cfg = std::fs::read_to_string(&drain).unwrap();
    assert!(
        cfg.contains("[[policy.periodic]]")
            && cfg.contains(
                "periodic_tuned_under = \"mode = drain, padding = true, min_relayout_interval_s = "
            ),
        "{cfg}"
    );
    // Run as the policy, the schedule runs under the rules it was searched under; once the
    // site turns padding off, `config check` says smartmigd runs the static layout instead.
    let periodic = cfg.replace("[policy]\n", "[policy]\nkind = \"periodic\"\n");
    let unpadded = periodic.replace(
        "[controller.central]\npadding = true\n",
        "[controller.central]\npadding = false\n",
    );
    assert!(periodic != cfg && unpadded != periodic, "{cfg}");
    let check_with = |text: &str| {
        std::fs::write(&drain, text).unwrap();
        let o = smartmig(&["config", "check", drain.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        stderr(&o)
    };
    let e = check_with(&periodic);
    assert!(!e.contains("warning"), "{e}");
    let e = check_with(&unpadded);
    assert!(
        e.contains("warning: smartmigd runs policy.static_layout instead of the schedule")
            && e.contains("padding = true"),
        "{e}"
    );
    // A preempt site whose jobs start over when requeued (smartmigd's default): the
    // search runs where they do.
    let preempt = dir.join("preempt.toml");
    std::fs::write(&preempt, "version = 1\n[controller]\nmode = \"preempt\"\n").unwrap();
    let o = tune(&preempt, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("repartition.requeued=\"restart\""),
        "{}",
        stderr(&o)
    );
    // Without a smartmig.toml, the printed schedule says which rules it was searched under.
    let o = search(None, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("searched under this scenario's rules")
            && stdout(&o).contains(
                "periodic_tuned_under = \"mode = preempt, padding = false, requeued = resume, requeue_max_run_s = none,"
            ),
        "{}",
        stdout(&o)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// On a cluster of several GPU models a policy file drives its own model's GPUs: the run
/// says which keep their layout and which files smartmigd would look for.
#[test]
fn a_policy_on_a_mixed_cluster_names_the_models_it_does_not_drive() {
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/etc/scenarios/mixed-a100-h100-a30.toml"
    );
    let o = smartmig(&["simulate", "--scenario", scenario, "--policy", "mean-field"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("drives the a100-40gb GPUs only; the h100-80gb, a30-24gb GPUs keep")
            && stderr(&o).contains("h100-80gb-preempt.onnx, a30-24gb-preempt.onnx"),
        "{}",
        stderr(&o)
    );
}

/// `simulate` does not tune: a file baseline run in a world `--set` changes is marked, as
/// `compare` marks its row, and one run as tuned is not.
#[test]
fn simulate_warns_when_set_changes_the_world_a_file_baseline_was_tuned_for() {
    let o = smartmig(&[
        "simulate",
        "--policy",
        "static-best",
        "--set",
        "workload.multiplier=10",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "warning: static-best: tuned for the scenario file, not for --set workload.multiplier=10"
        ),
        "{}",
        stderr(&o)
    );
    let o = smartmig(&["simulate", "--policy", "periodic-best", "--set", "name=renamed"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("tuned for"), "{}", stderr(&o));
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
    assert!(
        out.contains("static-best*"),
        "tuned on the generator, not the trace: {out}"
    );
    // The learned policy's guard runs on the trace's 2 days too, not on 16 generated ones.
    let v = json(&smartmig(&[
        "compare",
        "--trace",
        csv.to_str().unwrap(),
        "--trace-format",
        "jobs",
        "--no-bounds",
        "--no-tune",
        "--format",
        "json",
    ]));
    let note = v["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "smart-mig")
        .and_then(|p| p["note"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        note.contains("/2 days better") && note.contains("in-sample"),
        "{note}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
