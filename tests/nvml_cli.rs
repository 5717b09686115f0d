//! `smartmig mig probe` and `smartmig doctor` reading GPUs through NVML: the NVML test
//! library, dlopened in place of libnvidia-ml.so.1 (`--nvml-library`, `[node]
//! nvml_library`), over fake GPUs whose state lives under `$SMARTMIG_NVML_TEST_ROOT`.

use std::path::Path;
use std::process::{Command, Output};

use smartmig_nvml_testlib::{GpuSetup, TestNode, ROOT_ENV};

fn smartmig(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smartmig"))
        .args(args)
        .env(ROOT_ENV, root)
        .output()
        .expect("run smartmig")
}

fn gpu(product: &str, instances: &[(&str, u32)]) -> GpuSetup {
    GpuSetup {
        product: product.into(),
        instances: instances.iter().map(|(n, s)| (n.to_string(), *s)).collect(),
    }
}

fn probe(root: &Path) -> Output {
    let lib = smartmig_nvml_testlib::library();
    smartmig(
        root,
        &[
            "mig",
            "probe",
            "--nvml-library",
            lib.to_str().unwrap(),
            "--nvidia-root",
            root.to_str().unwrap(),
            "--format",
            "json",
        ],
    )
}

#[test]
fn mig_probe_reads_nvml_matches_the_catalogue_and_lists_a_drift() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::create(
        dir.path(),
        &[gpu("a30-24gb", &[("2g.12gb", 0)]), gpu("h100-nvl-94gb", &[])],
    )
    .unwrap();
    let o = probe(dir.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let gpus = v.as_array().unwrap();
    assert_eq!(gpus[0]["model"], "a30-24gb");
    assert_eq!(gpus[1]["model"], "h100-nvl-94gb");
    let two = gpus[0]["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "2g.12gb+me")
        .unwrap();
    assert_eq!(
        (two["nvml_id"].as_u64(), two["starts"].clone()),
        (Some(6), serde_json::json!([0, 2]))
    );
    assert!(
        gpus.iter().all(|g| g["differences"] == serde_json::json!([])),
        "{v:#}"
    );

    // A driver that offers 2g.12gb only at slice 0, and MIG off after the next reset.
    node.update(|s| {
        let p = s.gpus[0]
            .profiles
            .iter_mut()
            .find(|p| p.name == "2g.12gb")
            .unwrap();
        p.starts = vec![0];
        s.gpus[0].mig_pending = false;
    })
    .unwrap();
    let o = probe(dir.path());
    assert!(!o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v[0]["differences"],
        serde_json::json!(["2g.12gb: placements [0, 2] in the catalogue, [0] on the device"])
    );
    assert_eq!(
        (v[0]["mig_enabled"].as_bool(), v[0]["mig_pending"].as_bool()),
        (Some(true), Some(false))
    );
}

/// doctor with `[node] nvml_library` on the test library: the nvml check reads MIG
/// modes, the gres check compares gres.conf with the instances NVML lists, and a node
/// whose driver lists no mig-minors fails the gres check naming the file.
#[test]
fn doctor_reads_nvml_and_checks_gres_conf_against_its_instances() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("nvidia");
    TestNode::create(
        &root,
        &[
            gpu("a100-40gb", &[("4g.20gb", 0), ("3g.20gb", 4)]),
            gpu("l40s", &[]),
        ],
    )
    .unwrap();
    let config = dir.path().join("smartmig.toml");
    std::fs::write(
        &config,
        format!(
            "version = 1\n[node]\nnvml_library = \"{}\"\nnvidia_root = \"{}\"\n",
            smartmig_nvml_testlib::library().display(),
            root.display()
        ),
    )
    .unwrap();
    let conf = dir.path().join("slurm.conf");
    std::fs::write(&conf, "ClusterName=t\n").unwrap();
    // As the agent writes them: the GPU, then the GPU- and compute-instance capabilities
    // (the 4g is GPU instance 1, the 3g 2).
    let line = |ty: &str, gi: u32| {
        let cap = |ci: Option<u32>| {
            format!(
                "{}/dev/nvidia-caps/nvidia-cap{}",
                root.display(),
                TestNode::cap_minor(0, gi, ci)
            )
        };
        format!(
            "NodeName=gpu01 Name=gpu Type={ty} MultipleFiles={}/dev/nvidia0,{},{}\n",
            root.display(),
            cap(None),
            cap(Some(0))
        )
    };
    std::fs::write(
        dir.path().join("gres.conf"),
        [line("4g.20gb", 1), line("3g.20gb", 2)].concat(),
    )
    .unwrap();
    let doctor = || {
        let o = smartmig(
            &root,
            &[
                "doctor",
                "--slurm-conf",
                conf.to_str().unwrap(),
                "--config",
                config.to_str().unwrap(),
                "--node",
                "gpu01",
                "--skip",
                "slurm",
                "--skip",
                "plugin",
                "--skip",
                "snapshot",
                "--skip",
                "onnx",
                "--format",
                "json",
            ],
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
        let by = |check: &str| {
            v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["check"] == check)
                .unwrap()
                .clone()
        };
        (by("nvml"), by("gres"))
    };
    let (nvml, gres) = doctor();
    assert_eq!(nvml["status"], "warn", "{nvml:#}");
    assert_eq!(
        nvml["message"], "2 GPUs; GPU 0: MIG on, GPU 1: MIG off",
        "{nvml:#}"
    );
    assert_eq!(gres["status"], "ok", "{gres:#}");
    assert!(
        gres["message"].as_str().unwrap().contains("(source: NVML)"),
        "{gres:#}"
    );

    std::fs::remove_file(root.join("proc/driver/nvidia-caps/mig-minors")).unwrap();
    let (_, gres) = doctor();
    assert_eq!(gres["status"], "fail", "{gres:#}");
    assert!(
        gres["message"].as_str().unwrap().contains("mig-minors"),
        "{gres:#}"
    );
}
