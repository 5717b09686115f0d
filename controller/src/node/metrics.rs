//! Prometheus metrics of the node agent on `[node] metrics_listen` (loopback by default):
//! each scrape reads the GPUs afresh through the backend (NVML or simulated) — power
//! draw, energy counter and MIG instances per profile — so the endpoint shares no state
//! with the agent loop.

use std::fmt::Write as _;

use smartmig_core::mig::Catalogue;
use smartmig_gpu::GpuBackend;

/// Renders the node's GPUs as Prometheus text exposition; a GPU that cannot be read
/// is counted in `smartmig_node_read_errors` and logged, the others are still shown.
pub fn render(backend: &dyn GpuBackend, catalogue: &Catalogue) -> String {
    let mut power = String::new();
    let mut energy = String::new();
    let mut instances = String::new();
    let mut busy_instances = String::new();
    let mut errors = 0u32;
    let gpus = match backend.gpus() {
        Ok(g) => g,
        Err(e) => {
            log::warn!("metrics: cannot list the GPUs: {e}");
            let h = header(
                "node_read_errors",
                "gauge",
                "GPU reads that failed in this scrape.",
            );
            return format!("{h}smartmig_node_read_errors 1\n");
        }
    };
    for g in &gpus {
        let labels = format!("gpu=\"{}\",uuid=\"{}\"", g.index, crate::metrics::label(&g.uuid));
        match backend.power(g.index) {
            Ok(Some(r)) => {
                let _ = writeln!(power, "smartmig_gpu_power_watts{{{labels}}} {}", r.watts);
                if let Some(j) = r.energy_joules {
                    let _ = writeln!(energy, "smartmig_gpu_energy_joules_total{{{labels}}} {j}");
                }
            }
            Ok(None) => {}
            Err(e) => {
                log::warn!("metrics: {e}");
                errors += 1;
            }
        }
        let Some(model) = g.model.as_deref().and_then(|k| catalogue.model(k).ok()) else {
            continue;
        };
        if !g.mig_enabled {
            continue;
        }
        match backend.state(g.index, model) {
            Ok(state) => {
                let mut per_profile = std::collections::BTreeMap::<&str, (u32, u32)>::new();
                for i in state.layout.instances() {
                    let e = per_profile
                        .entry(model.profiles[i.profile].name.as_str())
                        .or_default();
                    e.0 += 1;
                    if state.busy.contains(i) {
                        e.1 += 1;
                    }
                }
                for (profile, (n, busy)) in per_profile {
                    let labels = format!("{labels},profile=\"{}\"", crate::metrics::label(profile));
                    let _ = writeln!(instances, "smartmig_gpu_instances{{{labels}}} {n}");
                    let _ = writeln!(busy_instances, "smartmig_gpu_busy_instances{{{labels}}} {busy}");
                }
            }
            Err(e) => {
                log::warn!("metrics: {e}");
                errors += 1;
            }
        }
    }
    // Each family's samples follow its own HELP/TYPE lines, as the format requires.
    [
        (
            "gpu_power_watts",
            "gauge",
            "Power draw of each GPU, watts.",
            power,
        ),
        (
            "gpu_energy_joules_total",
            "counter",
            "Energy each GPU used since its driver loaded, joules.",
            energy,
        ),
        (
            "gpu_instances",
            "gauge",
            "MIG instances of each profile on each GPU.",
            instances,
        ),
        (
            "gpu_busy_instances",
            "gauge",
            "MIG instances of each profile with processes on them.",
            busy_instances,
        ),
        (
            "node_read_errors",
            "gauge",
            "GPU reads that failed in this scrape.",
            format!("smartmig_node_read_errors {errors}\n"),
        ),
    ]
    .iter()
    .map(|(name, kind, help, samples)| format!("{}{samples}", header(name, kind, help)))
    .collect()
}

fn header(name: &str, kind: &str, help: &str) -> String {
    format!("# HELP smartmig_{name} {help}\n# TYPE smartmig_{name} {kind}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartmig_gpu::simulated::Simulated;

    #[test]
    fn a_scrape_shows_power_energy_and_instances_per_profile_of_each_gpu() {
        let dir = tempfile::tempdir().unwrap();
        let catalogue = Catalogue::embedded();
        let model = catalogue.model("a100-40gb").unwrap();
        let sim =
            Simulated::create_layouts(dir.path(), model, &["3g.20gb@0 3g.20gb@4", "7g.40gb@0"]).unwrap();
        sim.mark_busy(0, "3g.20gb@4").unwrap();
        let mut f = sim.load().unwrap();
        f.gpus[0].power_w = Some(180.5);
        f.gpus[0].energy_j = Some(7200.0);
        sim.save(&f).unwrap();
        let text = render(&sim, &catalogue);
        let uuid0 = &f.gpus[0].uuid;
        for line in [
            format!("smartmig_gpu_power_watts{{gpu=\"0\",uuid=\"{uuid0}\"}} 180.5"),
            format!("smartmig_gpu_energy_joules_total{{gpu=\"0\",uuid=\"{uuid0}\"}} 7200"),
            format!("smartmig_gpu_instances{{gpu=\"0\",uuid=\"{uuid0}\",profile=\"3g.20gb\"}} 2"),
            format!("smartmig_gpu_busy_instances{{gpu=\"0\",uuid=\"{uuid0}\",profile=\"3g.20gb\"}} 1"),
            "smartmig_node_read_errors 0".to_string(),
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
        // GPU 1 reports no power: no power sample for it, but its instances.
        assert!(!text.contains("smartmig_gpu_power_watts{gpu=\"1\""), "{text}");
        assert!(text.contains("smartmig_gpu_instances{gpu=\"1\""), "{text}");
        assert!(text.contains("profile=\"7g.40gb\"} 1"), "{text}");
    }

    #[test]
    fn a_broken_device_state_is_a_read_error_not_a_failed_scrape() {
        let dir = tempfile::tempdir().unwrap();
        let catalogue = Catalogue::embedded();
        let model = catalogue.model("a100-40gb").unwrap();
        let sim = Simulated::create_layouts(dir.path(), model, &["7g.40gb@0"]).unwrap();
        std::fs::write(dir.path().join("node.json"), "not json").unwrap();
        let text = render(&sim, &catalogue);
        assert!(text.lines().any(|l| l == "smartmig_node_read_errors 1"), "{text}");
    }
}
