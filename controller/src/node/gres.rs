//! The node's gres.conf, written from the devices' physical instance mapping.
//!
//! Slurm 22.05 keeps a running job's GPUs by *index* into the node's gres.conf lines, so
//! the lines follow a fixed physical order: GPU index, then placement start. An instance
//! that stays through a re-layout keeps its slot relative to the instances around it.

use std::fmt::Write as _;

use smartmig_core::mig::GpuModel;
use smartmig_gpu::GpuState;

/// gres.conf text for a node's MIG GPUs, given in GPU index order.
pub fn render(node: &str, gpus: &[(u32, &GpuModel, &GpuState)]) -> String {
    let mut out = String::from(
        "# Written by smartmigd (node agent); changes are overwritten.\n\
         # Lines follow the physical MIG instance mapping: GPU index, then placement start.\n",
    );
    let mut sorted: Vec<&(u32, &GpuModel, &GpuState)> = gpus.iter().collect();
    sorted.sort_by_key(|g| g.0);
    for (index, model, state) in sorted {
        let _ = writeln!(out, "# GPU {index}: {}", model.key);
        let mut devices = state.devices.clone();
        devices.sort_by_key(|d| d.instance);
        for d in devices {
            let ty = model
                .profiles
                .get(d.instance.profile)
                .map_or("unknown", |p| p.name.as_str());
            let files: Vec<String> = d.files.iter().map(|f| f.display().to_string()).collect();
            let key = if files.len() == 1 { "File" } else { "MultipleFiles" };
            // Writing to a String cannot fail.
            let _ = writeln!(
                out,
                "NodeName={node} Name=gpu Type={ty} {key}={}",
                files.join(",")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartmig_core::mig::{Catalogue, Layout};
    use smartmig_gpu::MigDevice;

    #[test]
    fn lines_follow_gpu_index_then_placement_whatever_the_input_order() {
        let m = Catalogue::embedded().model("a100-40gb").unwrap().clone();
        let l = Layout::parse(&m, "3g@4 2g@0 1g@2").unwrap();
        let mut devices: Vec<MigDevice> = l
            .instances()
            .iter()
            .map(|i| MigDevice {
                instance: *i,
                files: vec![format!("/dev/x{}", i.start).into()],
            })
            .collect();
        devices.reverse();
        let st = GpuState {
            layout: l.clone(),
            without_compute: vec![],
            busy: vec![],
            devices,
        };
        let one = GpuState {
            layout: Layout::parse(&m, "7g@0").unwrap(),
            without_compute: vec![],
            busy: vec![],
            devices: vec![MigDevice {
                instance: Layout::parse(&m, "7g@0").unwrap().instances()[0],
                files: vec!["/dev/nvidia1".into(), "/dev/nvidia-caps/nvidia-cap3".into()],
            }],
        };
        let text = render("n1", &[(1, &m, &one), (0, &m, &st)]);
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "NodeName=n1 Name=gpu Type=2g.10gb File=/dev/x0",
                "NodeName=n1 Name=gpu Type=1g.5gb File=/dev/x2",
                "NodeName=n1 Name=gpu Type=3g.20gb File=/dev/x4",
                "NodeName=n1 Name=gpu Type=7g.40gb MultipleFiles=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap3",
            ]
        );
    }
}
