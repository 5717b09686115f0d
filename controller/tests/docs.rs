//! smartmigd's generated man pages (section 8) and completions.

use std::process::Command;

fn smartmigd(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_smartmigd"))
        .args(args)
        .output()
        .expect("smartmigd runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn manpages_writes_section_8_pages_for_every_role() {
    let dir = tempfile::tempdir().unwrap();
    smartmigd(&["manpages", dir.path().to_str().unwrap()]);
    let main = std::fs::read_to_string(dir.path().join("smartmigd.8")).unwrap();
    assert!(main.contains(".TH smartmigd 8"), "{main}");
    for role in ["node", "central", "status", "bench"] {
        assert!(
            main.contains(&format!("smartmigd\\-{role}(8)")),
            "smartmigd(8) lacks {role}"
        );
        assert!(
            dir.path().join(format!("smartmigd-{role}.8")).is_file(),
            "no page for {role}"
        );
    }
    // The packaging helpers stay out of the manual.
    assert!(!main.contains("manpages"));
    assert!(!dir.path().join("smartmigd-manpages.8").exists());
}

/// Issue 17: the pages were bare option lists; smartmigd-central(8) now explains the cycle.
#[test]
fn every_page_has_its_sections_and_the_central_page_explains_the_cycle() {
    let dir = tempfile::tempdir().unwrap();
    smartmigd(&["manpages", dir.path().to_str().unwrap()]);
    for role in ["", "-central", "-node", "-status"] {
        let page = std::fs::read_to_string(dir.path().join(format!("smartmigd{role}.8"))).unwrap();
        for want in [
            ".SH DESCRIPTION",
            ".SH \"EXIT STATUS\"",
            ".SH FILES",
            ".SH \"SEE ALSO\"",
        ] {
            assert!(page.contains(want), "smartmigd{role}(8) lacks {want}");
        }
    }
    let central = std::fs::read_to_string(dir.path().join("smartmigd-central.8")).unwrap();
    for want in ["reconcile loop", "nodes_include", ".SH EXAMPLES", "dry\\-run"] {
        assert!(central.contains(want), "smartmigd-central(8) lacks {want}");
    }
}

#[test]
fn bash_completion_offers_every_role() {
    let script = smartmigd(&["completions", "bash"]);
    for role in ["node", "central", "status", "bench"] {
        assert!(
            script.contains(&format!("smartmigd,{role})")),
            "no completion for {role}"
        );
    }
}
