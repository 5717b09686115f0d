//! The shipped systemd units: sandboxed, and accepted by `systemd-analyze verify`.

use std::path::Path;
use std::process::Command;

const UNITS: [&str; 3] = [
    "smartmigd-node.service",
    "smartmigd-node-restore.service",
    "smartmigd-central.service",
];

fn unit_text(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../etc/systemd")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn the_units_carry_the_sandboxing_options() {
    for name in UNITS {
        let text = unit_text(name);
        for opt in [
            "ProtectSystem=strict",
            "ProtectHome=yes",
            "PrivateTmp=yes",
            "NoNewPrivileges=yes",
            "StateDirectory=smartmig",
        ] {
            assert!(text.lines().any(|l| l == opt), "{name} lacks {opt}");
        }
    }
    let node = unit_text("smartmigd-node.service");
    assert!(node.contains("ExecStart=/usr/bin/smartmigd node --config /etc/smartmig/smartmig.toml"));
    for name in ["smartmigd-node.service", "smartmigd-node-restore.service"] {
        // Padding records are character devices of major 120, which no device allow-list
        // can let the agent make (mknod): a closed policy would fail every padded re-layout.
        assert!(
            !unit_text(name).contains("DevicePolicy=closed"),
            "{name}: padding records need mknod of major 120"
        );
    }
    assert!(
        node.contains("ReadWritePaths=/etc/slurm\n"),
        "gres.conf is replaced through its directory"
    );
    let restore = unit_text("smartmigd-node-restore.service");
    for line in [
        "Type=oneshot",
        "ExecStart=/usr/bin/smartmigd node --restore --config /etc/smartmig/smartmig.toml",
        "Before=slurmd.service smartmigd-node.service",
        "RequiredBy=slurmd.service",
    ] {
        assert!(
            restore.lines().any(|l| l == line),
            "the restore unit lacks {line}"
        );
    }
    let central = unit_text("smartmigd-central.service");
    assert!(central.contains("ExecStart=/usr/bin/smartmigd central --config /etc/smartmig/smartmig.toml"));
}

#[test]
fn systemd_analyze_verify_accepts_the_units() {
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    };
    assert!(version.status.success());
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for name in UNITS {
        // verify insists that ExecStart names an existing executable: use the built one.
        let text = unit_text(name).replace("/usr/bin/smartmigd", env!("CARGO_BIN_EXE_smartmigd"));
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        paths.push(p);
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .args(&paths)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // verify exits 0 on unknown keys and bad values, only warning: any line about our
    // files is a failure.
    let ours: Vec<&str> = err.lines().filter(|l| l.contains("smartmigd-")).collect();
    assert!(
        out.status.success() && ours.is_empty(),
        "systemd-analyze verify:\n{err}"
    );
}
