//! `smartmig doctor` against the Slurm harness (root and Slurm needed; skipped
//! otherwise): a good installation passes, and each fault doctor checks, injected into
//! the harness's own files one at a time, is found with its fix and the exit code.

mod slurm;

use std::path::Path;
use std::process::Command;

use object::{Object, ObjectSection, ObjectSymbol};
use slurm::{Cluster, Options};

/// Doctor's exit codes: warning, failure.
const WARN: i32 = 4;
const FAIL: i32 = 5;

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn snapshot(generated_at: f64) -> String {
    format!(
        r#"{{"version": 1, "generated_at": {generated_at}, "soon_free_within_s": 300,
            "queue_pressure": 0.1, "types": {{"3g.20gb": {{"free": 1, "soon_free": 0}}}}}}"#
    )
}

/// Runs doctor on the harness's slurm.conf; returns the exit code and the findings by check.
fn doctor(c: &Cluster, extra: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_smartmig"))
        .args([
            "doctor",
            "--slurm-conf",
            c.conf.to_str().unwrap(),
            "--format",
            "json",
        ])
        .args(extra)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let mut by = serde_json::Map::new();
    for f in v["findings"].as_array().unwrap() {
        by.insert(f["check"].as_str().unwrap().to_string(), f.clone());
    }
    (out.status.code().unwrap(), serde_json::Value::Object(by))
}

fn status(v: &serde_json::Value, check: &str) -> String {
    v[check]["status"].as_str().unwrap_or("absent").to_string()
}

/// Writes a copy of a plugin with another `plugin_version`.
fn patch_version(from: &Path, to: &Path, version: u32) {
    let mut data = std::fs::read(from).unwrap();
    let offset = {
        let file = object::File::parse(&*data).unwrap();
        let sym = file
            .dynamic_symbols()
            .find(|s| s.name() == Ok("plugin_version"))
            .unwrap();
        let section = file.section_by_index(sym.section_index().unwrap()).unwrap();
        let (start, _) = section.file_range().unwrap();
        (start + sym.address() - section.address()) as usize
    };
    data[offset..offset + 4].copy_from_slice(&version.to_le_bytes());
    std::fs::write(to, data).unwrap();
}

#[test]
fn doctor_passes_a_good_installation_and_names_each_injected_fault_with_its_fix() {
    skip_unless_slurm!();
    let c = Cluster::start(&Options::two_nodes());
    let snap = c.snapshot_path();
    std::fs::write(&snap, snapshot(now())).unwrap();
    let conf_text = std::fs::read_to_string(&c.conf).unwrap();

    // Good state: every check passes (no GPU here, so NVML is skipped; the static policy
    // loads no model).
    let (code, v) = doctor(&c, &["--skip", "nvml"]);
    assert_eq!(code, 0, "{v:#}");
    for check in ["slurm", "plugin", "config", "snapshot", "gres"] {
        assert_eq!(status(&v, check), "ok", "{check}: {v:#}");
    }
    assert!(v["plugin"]["message"]
        .as_str()
        .unwrap()
        .contains("matches slurmctld"));
    assert!(
        v["gres"]["message"].as_str().unwrap().contains("6 MIG devices"),
        "{v:#}"
    );
    assert_eq!(status(&v, "onnx"), "skip");
    assert_eq!(status(&v, "requeue"), "skip", "dry-run requeues nothing: {v:#}");
    assert_eq!(status(&v, "nvml"), "absent");
    // Without --skip, a host without NVIDIA driver gets a warning, and exit code 4.
    let (code, v) = doctor(&c, &[]);
    if status(&v, "nvml") == "warn" {
        assert_eq!(code, WARN, "{v:#}");
        assert!(v["nvml"]["message"].as_str().unwrap().contains("NVML not found"));
    }

    // JobSubmitPlugins without smartmig.
    std::fs::write(&c.conf, conf_text.replace("JobSubmitPlugins=smartmig\n", "")).unwrap();
    let (code, v) = doctor(&c, &["--skip", "nvml"]);
    assert_eq!((code, status(&v, "slurm")), (FAIL, "fail".into()), "{v:#}");
    assert!(v["slurm"]["fix"].as_str().unwrap().contains("JobSubmitPlugins"));
    assert_eq!(status(&v, "config"), "ok", "only the injected fault shows");

    // The plugin missing from PluginDir.
    let empty = c.dir.join("no-plugins");
    std::fs::create_dir_all(&empty).unwrap();
    let plugin_dir = conf_text
        .lines()
        .find(|l| l.starts_with("PluginDir="))
        .unwrap()
        .to_string();
    std::fs::write(
        &c.conf,
        conf_text.replace(&plugin_dir, &format!("PluginDir={}", empty.display())),
    )
    .unwrap();
    let (code, v) = doctor(&c, &["--skip", "nvml"]);
    assert_eq!((code, status(&v, "plugin")), (FAIL, "fail".into()), "{v:#}");
    assert!(v["plugin"]["message"]
        .as_str()
        .unwrap()
        .contains("is in none of PluginDir"));
    assert!(v["plugin"]["fix"].as_str().unwrap().contains("install"));

    // A plugin built for another Slurm release.
    let other = c.dir.join("other-plugins");
    std::fs::create_dir_all(&other).unwrap();
    patch_version(
        &c.dir.join("plugins/job_submit_smartmig.so"),
        &other.join("job_submit_smartmig.so"),
        0x15_08_03,
    );
    std::fs::write(
        &c.conf,
        conf_text.replace(&plugin_dir, &format!("PluginDir={}", other.display())),
    )
    .unwrap();
    let (code, v) = doctor(&c, &["--skip", "nvml"]);
    assert_eq!((code, status(&v, "plugin")), (FAIL, "fail".into()), "{v:#}");
    assert!(
        v["plugin"]["message"]
            .as_str()
            .unwrap()
            .contains("built for Slurm 21.08.3"),
        "{v:#}"
    );
    assert!(v["plugin"]["fix"].as_str().unwrap().contains("rebuild"));
    std::fs::write(&c.conf, &conf_text).unwrap();

    // An invalid smartmig.toml: the error names the key; checks that need it are skipped.
    c.write_smartmig_toml("version = 1\n[gpu]\nmodels = [\"a100-40gb\"]\nbogus_key = 1\n");
    let (code, v) = doctor(&c, &["--skip", "nvml"]);
    assert_eq!((code, status(&v, "config")), (FAIL, "fail".into()), "{v:#}");
    assert!(
        v["config"]["message"].as_str().unwrap().contains("bogus_key"),
        "{v:#}"
    );
    assert_eq!(status(&v, "snapshot"), "skip");
    c.write_smartmig_toml(slurm::SMARTMIG_TOML);

    // A stale snapshot: a warning (routing falls back to the static rule).
    std::fs::write(&snap, snapshot(now() - 3600.0)).unwrap();
    let (code, v) = doctor(&c, &["--skip", "nvml"]);
    assert_eq!((code, status(&v, "snapshot")), (WARN, "warn".into()), "{v:#}");
    assert!(v["snapshot"]["message"].as_str().unwrap().contains("s old"));
    std::fs::write(&snap, snapshot(now())).unwrap();

    // Preempt mode under JobRequeue=0: a warning (most jobs could not be requeued).
    c.write_smartmig_toml(
        &slurm::SMARTMIG_TOML.replace("[controller]\n", "[controller]\nmode = \"preempt\"\n"),
    );
    std::fs::write(&c.conf, format!("{conf_text}JobRequeue=0\n")).unwrap();
    let (code, v) = doctor(&c, &["--skip", "nvml"]);
    assert_eq!((code, status(&v, "requeue")), (WARN, "warn".into()), "{v:#}");
    assert!(v["requeue"]["message"].as_str().unwrap().contains("JobRequeue=0"));
    std::fs::write(&c.conf, &conf_text).unwrap();
    let (code, v) = doctor(&c, &["--skip", "nvml"]);
    assert_eq!((code, status(&v, "requeue")), (0, "ok".into()), "{v:#}");
    c.write_smartmig_toml(slurm::SMARTMIG_TOML);

    // The learned policy configured but its model missing.
    let models = c.dir.join("models");
    std::fs::create_dir_all(&models).unwrap();
    c.write_smartmig_toml(&slurm::SMARTMIG_TOML.replace(
        "kind = \"static\"",
        &format!("kind = \"mean-field\"\nmodels_dir = \"{}\"", models.display()),
    ));
    let (code, v) = doctor(&c, &["--skip", "nvml"]);
    assert_eq!((code, status(&v, "onnx")), (FAIL, "fail".into()), "{v:#}");
    let msg = v["onnx"]["message"].as_str().unwrap();
    assert!(
        msg.contains("a100-40gb-drain.onnx") || msg.contains("ONNX Runtime"),
        "names the missing model (or runtime): {msg}"
    );
    c.write_smartmig_toml(slurm::SMARTMIG_TOML);

    // gres.conf naming a device that does not exist, and a type no model has.
    let gres = c.conf.with_file_name("gres.conf");
    let gres_text = std::fs::read_to_string(&gres).unwrap();
    std::fs::write(
        &gres,
        format!(
            "{gres_text}NodeName={} Name=gpu Type=9g.99gb File={}/dev-missing/nvidia[7-8]\n",
            c.node,
            c.dir.display()
        ),
    )
    .unwrap();
    let (code, v) = doctor(&c, &["--skip", "nvml"]);
    assert_eq!((code, status(&v, "gres")), (FAIL, "fail".into()), "{v:#}");
    let msg = v["gres"]["message"].as_str().unwrap();
    assert!(msg.contains("dev-missing/nvidia7 does not exist"), "{msg}");
    assert!(msg.contains("Type=9g.99gb is no MIG profile"), "{msg}");
    std::fs::write(&gres, gres_text).unwrap();

    // Repaired: good again.
    let (code, v) = doctor(&c, &["--skip", "nvml"]);
    assert_eq!(code, 0, "{v:#}");
}
