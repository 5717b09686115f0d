//! smartmigd's command line as an admin meets it: exit codes shared with `smartmig`.

use std::process::Command;

fn status_code(args: &[&str]) -> Option<i32> {
    Command::new(env!("CARGO_BIN_EXE_smartmigd"))
        .args(args)
        .output()
        .expect("smartmigd runs")
        .status
        .code()
}

/// Issue 17: `smartmig status` and `smartmigd status` exited with different codes for the
/// same missing file. Both now say 3 for a missing or bad smartmig.toml and 1 when the
/// central role has written no status yet (`tests/cli.rs` checks `smartmig status`).
#[test]
fn status_exits_3_for_a_missing_config_and_1_for_a_missing_status_file() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("nope.toml");
    assert_eq!(
        status_code(&["status", "--config", missing.to_str().unwrap()]),
        Some(3)
    );
    let cfg = d.path().join("smartmig.toml");
    std::fs::write(
        &cfg,
        format!(
            "version = 1\n[controller]\nstate_dir = \"{}\"\n",
            d.path().display()
        ),
    )
    .unwrap();
    assert_eq!(
        status_code(&["status", "--config", cfg.to_str().unwrap()]),
        Some(1)
    );
}
