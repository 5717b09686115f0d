//! The node's MIG lines in gres.conf, written from the devices' physical instance mapping
//! into a block of their own, marked, so that every other line of the file stays as the
//! site wrote it (`AutoDetect`, non-MIG GPUs, `Cores=`, shards/MPS, other nodes' lines).
//!
//! Slurm keeps a running job's GPUs by *index* into the node's gres.conf records, so the
//! lines follow a fixed physical order: GPU index, then placement start; with padding, the
//! order the central role sends, which keeps each device's position within its type across
//! re-layouts (`smartmig_core::mig::device_order`), recorded in the block.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use smartmig_core::mig::layout::display_instance;
use smartmig_core::mig::padding::{self, OverBlock, PAD_DEVICE_MAJOR};
use smartmig_core::mig::GpuModel;
use smartmig_gpu::GpuState;

use crate::channel::device_ref;

/// The first line of a node's block.
pub fn begin_marker(node: &str) -> String {
    format!("# BEGIN smartmig node {node}: MIG instances, written by smartmigd node; do not edit")
}

/// The last line of a node's block.
pub fn end_marker(node: &str) -> String {
    format!("# END smartmig node {node}")
}

/// Why a gres.conf cannot take smartmig's block.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GresConfError {
    /// A line outside the block already defines one of this node's MIG instances.
    #[error("gres.conf line {line}: `{text}` defines a MIG type for node {node} outside smartmig's block; remove it (smartmigd writes this node's MIG lines itself)")]
    Conflict {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
        /// The node.
        node: String,
    },
    /// The markers of the node's block are broken (one missing, or repeated).
    #[error("gres.conf: the markers of node {node}'s smartmig block are broken ({why}); fix them by hand")]
    Markers {
        /// The node.
        node: String,
        /// What is wrong.
        why: String,
    },
}

/// The comment line of a padded block that records its blocks, so that the agent can
/// write the same padding again (after a reboot) from the file alone.
const PADDING_LINE: &str = "# padding blocks:";

/// The comment line of a block written in a given order: the node's devices in that
/// order (`GPU:instance` each, `crate::channel::device_ref`), which the agent reads again
/// to report the order Slurm numbers them in.
const ORDER_LINE: &str = "# device order:";

/// Padding records to write after a node's MIG lines: each MIG type's block
/// (`smartmig_core::mig::padding`), the directory of the padding device files, and the
/// order of the node's devices.
#[derive(Debug, Clone)]
pub struct Padding<'a> {
    /// Each MIG type's block on the node.
    pub blocks: &'a BTreeMap<String, u32>,
    /// Where the padding device files are (`<state_dir>/pad`).
    pub dir: &'a Path,
    /// The node's devices in the order to write them (`GPU:instance` each); empty: GPU
    /// and placement order.
    pub order: &'a [String],
}

/// Why a node's gres.conf lines cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The instances exceed the padding blocks.
    #[error("padding: {0}")]
    Padding(#[from] OverBlock),
    /// The order asked for does not list the node's devices, each once.
    #[error("the device order {order:?} does not list the node's devices ({devices}) once each")]
    Order {
        /// The order asked for.
        order: Vec<String>,
        /// The devices, as the order names them.
        devices: String,
    },
}

/// Padding records of one type a node can hold at most (minor numbers per type).
const PADS_PER_TYPE: u32 = 4096;

/// One padding record's device file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PadDevice {
    /// Its padding type (`pad-3g.20gb`).
    pub pad: String,
    /// The file (`<dir>/pad-<type>-<k>`).
    pub path: PathBuf,
    /// Its minor number (major [`PAD_DEVICE_MAJOR`]): unique on the node.
    pub minor: u32,
}

impl Padding<'_> {
    /// Every padding record's device file around `counts` (instances per MIG type), in
    /// gres.conf order; a record's minor number is its type's position among the blocks,
    /// then its place in the type, so it stays the same while the blocks do.
    pub fn devices(&self, counts: &BTreeMap<String, u32>) -> Result<Vec<PadDevice>, OverBlock> {
        let pads = padding::padding(counts, self.blocks)?;
        let mut out = Vec::new();
        for (slot, ty) in (0u32..).zip(self.blocks.keys()) {
            let pad = padding::pad_type(ty);
            let n = pads.get(&pad).copied().unwrap_or(0);
            if n > PADS_PER_TYPE {
                return Err(OverBlock {
                    gpu_type: pad,
                    count: n,
                    block: PADS_PER_TYPE,
                });
            }
            out.extend((0..n).map(|k| PadDevice {
                pad: pad.clone(),
                path: self.dir.join(format!("{pad}-{k}")),
                minor: slot * PADS_PER_TYPE + k,
            }));
        }
        Ok(out)
    }
}

/// Instances per MIG type of `gpus`.
pub fn instance_counts(gpus: &[(u32, &GpuModel, &GpuState)]) -> BTreeMap<String, u32> {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for (_, model, state) in gpus {
        for d in &state.devices {
            let ty = model
                .profiles
                .get(d.instance.profile)
                .map_or("unknown", |p| p.name.as_str());
            *counts.entry(ty.to_string()).or_default() += 1;
        }
    }
    counts
}

/// Whether `order` lists `devices` (references, [`device_ref`]), each once.
pub fn check_order(order: &[String], devices: &[String]) -> Result<(), RenderError> {
    let mut wanted: Vec<&String> = order.iter().collect();
    let mut have: Vec<&String> = devices.iter().collect();
    wanted.sort();
    have.sort();
    if wanted != have {
        return Err(RenderError::Order {
            order: order.to_vec(),
            devices: have.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" "),
        });
    }
    Ok(())
}

/// The lines of a node's MIG GPUs (no markers): in GPU index and placement order, or,
/// with `padding` and its order, in that order after an order line; then, with `padding`,
/// the padding records that fill each type's block (one device file each: a record
/// without `File=` beside records with one is fatal to slurmd).
pub fn render(
    node: &str,
    gpus: &[(u32, &GpuModel, &GpuState)],
    padding: Option<&Padding<'_>>,
) -> Result<String, RenderError> {
    let mut sorted: Vec<&(u32, &GpuModel, &GpuState)> = gpus.iter().collect();
    sorted.sort_by_key(|g| g.0);
    // Every device: (its GPU, its reference, its line), in GPU and placement order.
    let mut devices: Vec<(u32, String, String)> = Vec::new();
    for (index, model, state) in &sorted {
        let mut own = state.devices.clone();
        own.sort_by_key(|d| d.instance);
        for d in own {
            let ty = model
                .profiles
                .get(d.instance.profile)
                .map_or("unknown", |p| p.name.as_str());
            let files: Vec<String> = d.files.iter().map(|f| f.display().to_string()).collect();
            let key = if files.len() == 1 { "File" } else { "MultipleFiles" };
            devices.push((
                *index,
                device_ref(*index, &display_instance(model, &d.instance)),
                format!("NodeName={node} Name=gpu Type={ty} {key}={}", files.join(",")),
            ));
        }
    }
    let mut out = String::new();
    let padded = padding.filter(|p| !p.blocks.is_empty());
    match padded.filter(|p| !p.order.is_empty()) {
        Some(p) => {
            let refs: Vec<String> = devices.iter().map(|d| d.1.clone()).collect();
            check_order(p.order, &refs)?;
            // Writing to a String cannot fail.
            let _ = writeln!(out, "{ORDER_LINE} {}", p.order.join(" "));
            for r in p.order {
                if let Some((_, _, line)) = devices.iter().find(|d| &d.1 == r) {
                    let _ = writeln!(out, "{line}");
                }
            }
        }
        None => {
            for (index, model, _) in &sorted {
                let _ = writeln!(out, "# GPU {index}: {}", model.key);
                for (_, _, line) in devices.iter().filter(|d| d.0 == *index) {
                    let _ = writeln!(out, "{line}");
                }
            }
        }
    }
    if let Some(p) = padded {
        let devices = p.devices(&instance_counts(gpus))?;
        let spec: Vec<String> = p.blocks.iter().map(|(t, n)| format!("{t}={n}")).collect();
        let _ = writeln!(out, "{PADDING_LINE} {}", spec.join(" "));
        for d in devices {
            let _ = writeln!(
                out,
                "NodeName={node} Name=gpu Type={} File={}",
                d.pad,
                d.path.display()
            );
        }
    }
    Ok(out)
}

/// The node's devices in the order its block of gres.conf lists them (its `# device
/// order:` line), empty when the block has none (GPU and placement order) or the node has
/// no block; an error when the block's markers are broken (the order is then unknown, not
/// GPU order).
pub fn recorded_order(text: &str, node: &str) -> Result<Vec<String>, GresConfError> {
    Ok(block_line(text, node, ORDER_LINE)?
        .map(|spec| spec.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default())
}

/// The padding blocks a node's block of gres.conf records (its `# padding blocks:` line),
/// empty when it has none or the node has no block; an error when the block's markers are
/// broken.
pub fn recorded_blocks(text: &str, node: &str) -> Result<BTreeMap<String, u32>, GresConfError> {
    Ok(block_line(text, node, PADDING_LINE)?
        .map(|spec| {
            spec.split_whitespace()
                .filter_map(|w| w.split_once('='))
                .filter_map(|(t, n)| Some((t.to_string(), n.parse().ok()?)))
                .collect()
        })
        .unwrap_or_default())
}

/// The rest of the line of node `node`'s block that starts with `prefix`, if any.
fn block_line<'t>(text: &'t str, node: &str, prefix: &str) -> Result<Option<&'t str>, GresConfError> {
    let lines: Vec<&str> = text.lines().collect();
    Ok(find_block(&lines, node)?.and_then(|(b, e)| lines[b..e].iter().find_map(|l| l.strip_prefix(prefix))))
}

/// Makes each padding device file: a character device of major [`PAD_DEVICE_MAJOR`] and
/// its own minor, which no driver serves (a job given one could open nothing). A file of
/// another device number is made again; a path that exists as anything but a character
/// device is refused, never replaced.
pub fn make_padding_files(devices: &[PadDevice]) -> std::io::Result<()> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    for d in devices {
        let want = libc::makedev(PAD_DEVICE_MAJOR, d.minor);
        match std::fs::symlink_metadata(&d.path) {
            Ok(m) if m.file_type().is_char_device() && m.rdev() == want => continue,
            Ok(m) if m.file_type().is_char_device() => std::fs::remove_file(&d.path)?,
            Ok(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a character device", d.path.display()),
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if let Some(dir) = d.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let path = std::ffi::CString::new(d.path.as_os_str().as_encoded_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        // SAFETY: `path` is a valid NUL-terminated string; mknod only reads it.
        let rc = unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o666, want) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Where the node's block is in `lines`: (begin, end) line positions, None when absent.
fn find_block(lines: &[&str], node: &str) -> Result<Option<(usize, usize)>, GresConfError> {
    let (b, e) = (begin_marker(node), end_marker(node));
    let begins: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].trim_end() == b).collect();
    let ends: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].trim_end() == e).collect();
    let broken = |why: &str| GresConfError::Markers {
        node: node.to_string(),
        why: why.to_string(),
    };
    match (begins.as_slice(), ends.as_slice()) {
        ([], []) => Ok(None),
        ([b], [e]) if b < e => Ok(Some((*b, *e))),
        ([_], [_]) => Err(broken("END before BEGIN")),
        _ => Err(broken("each must appear exactly once")),
    }
}

/// The value of `key=value` word `word` (gres.conf keys are case-insensitive to Slurm).
fn value_of<'a>(word: &'a str, key: &str) -> Option<&'a str> {
    let (k, v) = word.split_once('=')?;
    k.eq_ignore_ascii_case(key).then_some(v)
}

/// Whether a gres.conf line names node `node` (or every node: no `NodeName=`).
fn for_node(words: &[&str], node: &str) -> bool {
    match words.iter().find_map(|w| value_of(w, "NodeName")) {
        None => true,
        Some(list) => smartmig_core::config::hostlist::HostList::parse(list).is_ok_and(|h| h.contains(node)),
    }
}

/// `text` (the current gres.conf, maybe empty) with node `node`'s block replaced by
/// `lines`, or appended when it has none. Another line that defines one of the node's MIG
/// types (`mig_types`, the catalogue's profile names) is refused — or, with `adopt`, left
/// out (the block replaces it: `smartmigd node --restore`, before slurmd starts).
pub fn merge(
    text: &str,
    node: &str,
    lines: &str,
    mig_types: &HashSet<String>,
    adopt: bool,
) -> Result<String, GresConfError> {
    let all: Vec<&str> = text.lines().collect();
    let block = find_block(&all, node)?;
    let mut adopted = Vec::new();
    for (i, l) in all.iter().enumerate() {
        if block.is_some_and(|(b, e)| (b..=e).contains(&i)) {
            continue;
        }
        let words: Vec<&str> = l.split('#').next().unwrap_or("").split_whitespace().collect();
        let gpu = words
            .iter()
            .any(|w| value_of(w, "Name").is_some_and(|n| n.eq_ignore_ascii_case("gpu")));
        let mig = words
            .iter()
            .filter_map(|w| value_of(w, "Type"))
            .any(|t| mig_types.contains(t));
        if gpu && mig && for_node(&words, node) {
            if adopt {
                adopted.push(i);
                continue;
            }
            return Err(GresConfError::Conflict {
                line: i + 1,
                text: l.trim().to_string(),
                node: node.to_string(),
            });
        }
    }
    let mut out = String::new();
    let mut push = |l: &str| {
        out.push_str(l);
        out.push('\n');
    };
    let new_block = |push: &mut dyn FnMut(&str)| {
        push(&begin_marker(node));
        for l in lines.lines() {
            push(l);
        }
        push(&end_marker(node));
    };
    let kept = |range: std::ops::Range<usize>| range.filter(|i| !adopted.contains(i)).map(|i| all[i]);
    match block {
        Some((b, e)) => {
            kept(0..b).for_each(&mut push);
            new_block(&mut push);
            kept(e + 1..all.len()).for_each(&mut push);
        }
        None => {
            kept(0..all.len()).for_each(&mut push);
            new_block(&mut push);
        }
    }
    Ok(out)
}

/// `text` without node `node`'s markers, its lines kept as plain configuration
/// (`smartmigd node --release`).
pub fn release(text: &str, node: &str) -> Result<String, GresConfError> {
    let all: Vec<&str> = text.lines().collect();
    let Some((b, e)) = find_block(&all, node)? else {
        return Ok(text.to_string());
    };
    let mut out = String::new();
    for (i, l) in all.iter().enumerate() {
        if i != b && i != e {
            out.push_str(l);
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartmig_core::mig::{Catalogue, Layout};
    use smartmig_gpu::MigDevice;

    fn types() -> HashSet<String> {
        let m = Catalogue::embedded().model("a100-40gb").unwrap().clone();
        m.profiles.iter().map(|p| p.name.clone()).collect()
    }

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
        let text = render("n1", &[(1, &m, &one), (0, &m, &st)], None).unwrap();
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

    #[test]
    fn with_padding_lines_follow_the_order_given_which_the_block_records_and_a_wrong_order_is_refused() {
        let m = Catalogue::embedded().model("a100-40gb").unwrap().clone();
        let state = |text: &str, gpu: u32| {
            let l = Layout::parse(&m, text).unwrap();
            let devices = l
                .instances()
                .iter()
                .map(|i| MigDevice {
                    instance: *i,
                    files: vec![format!("/dev/nvidia{}", gpu * 8 + u32::from(i.start)).into()],
                })
                .collect();
            GpuState {
                layout: l,
                without_compute: vec![],
                busy: vec![],
                devices,
            }
        };
        let (g0, g1) = (state("3g@0 3g@4", 0), state("4g@0 3g@4", 1));
        let gpus = [(0, &m, &g0), (1, &m, &g1)];
        let blocks: BTreeMap<String, u32> = [("3g.20gb".to_string(), 4), ("4g.20gb".to_string(), 2)].into();
        let dir = Path::new("/pad");
        let order = ["0:3g.20gb@4", "1:3g.20gb@4", "0:3g.20gb@0", "1:4g.20gb@0"].map(String::from);
        let padding = Padding {
            blocks: &blocks,
            dir,
            order: &order,
        };
        let text = render("n1", &gpus, Some(&padding)).unwrap();
        let files: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.contains("Type=pad-"))
            .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("File=")))
            .collect();
        assert_eq!(
            files,
            ["/dev/nvidia4", "/dev/nvidia12", "/dev/nvidia0", "/dev/nvidia8"]
        );
        let conf = merge("", "n1", &text, &types(), false).unwrap();
        assert_eq!(recorded_order(&conf, "n1").unwrap(), order);
        assert_eq!(recorded_order(&conf, "n2").unwrap(), Vec::<String>::new());
        // Broken markers: the order is unknown, never taken for GPU order.
        let twice = format!("{conf}{}\n", begin_marker("n1"));
        assert!(matches!(
            recorded_order(&twice, "n1"),
            Err(GresConfError::Markers { .. })
        ));
        assert!(matches!(
            recorded_blocks(&twice, "n1"),
            Err(GresConfError::Markers { .. })
        ));
        // Without an order: GPU and placement order, and none recorded.
        let plain = Padding {
            order: &[],
            ..padding.clone()
        };
        let conf = merge(
            "",
            "n1",
            &render("n1", &gpus, Some(&plain)).unwrap(),
            &types(),
            false,
        )
        .unwrap();
        assert!(recorded_order(&conf, "n1").unwrap().is_empty(), "{conf}");
        // An order that lists a device twice, or one the GPUs do not have, is refused.
        for bad in [
            ["0:3g.20gb@4", "0:3g.20gb@4", "0:3g.20gb@0", "1:4g.20gb@0"],
            ["0:3g.20gb@4", "1:3g.20gb@4", "0:3g.20gb@0", "1:4g.20gb@4"],
        ] {
            let bad = bad.map(String::from);
            let e = render(
                "n1",
                &gpus,
                Some(&Padding {
                    order: &bad,
                    ..padding.clone()
                }),
            )
            .unwrap_err();
            assert!(matches!(e, RenderError::Order { .. }), "{e}");
        }
    }

    const SITE: &str = "AutoDetect=nvml\n\
        NodeName=n1 Name=gpu Type=a100 File=/dev/nvidia1 Cores=0-15\n\
        NodeName=n2 Name=gpu Type=3g.20gb File=/dev/nvidia0\n\
        Name=shard Count=8\n";

    #[test]
    fn the_site_lines_stay_and_only_the_block_changes() {
        let first = merge(
            SITE,
            "n1",
            "NodeName=n1 Name=gpu Type=7g.40gb File=/dev/x0\n",
            &types(),
            false,
        )
        .unwrap();
        assert!(first.starts_with(SITE), "{first}");
        let second = merge(
            &first,
            "n1",
            "NodeName=n1 Name=gpu Type=3g.20gb File=/dev/x0\n",
            &types(),
            false,
        )
        .unwrap();
        assert!(
            second.starts_with(SITE) && !second.contains("7g.40gb"),
            "{second}"
        );
        assert_eq!(second.matches("# BEGIN smartmig node n1").count(), 1);
        assert_eq!(
            release(&second, "n1").unwrap(),
            format!("{SITE}NodeName=n1 Name=gpu Type=3g.20gb File=/dev/x0\n")
        );
    }

    #[test]
    fn a_mig_line_of_this_node_outside_the_block_and_broken_markers_are_refused() {
        let text = format!("{SITE}Name=gpu Type=1g.5gb File=/dev/nvidia9\n");
        let e = merge(&text, "n1", "", &types(), false).unwrap_err();
        assert!(matches!(e, GresConfError::Conflict { line: 5, .. }), "{e}");
        // Keys in any case, as Slurm reads them.
        let lower = format!("{SITE}nodename=n1 name=GPU type=1g.5gb file=/dev/nvidia9\n");
        let e = merge(&lower, "n1", "", &types(), false).unwrap_err();
        assert!(matches!(e, GresConfError::Conflict { line: 5, .. }), "{e}");
        let adopted = merge(
            &text,
            "n1",
            "NodeName=n1 Name=gpu Type=7g.40gb File=/dev/x0\n",
            &types(),
            true,
        )
        .unwrap();
        assert!(
            adopted.starts_with(SITE) && !adopted.contains("nvidia9"),
            "{adopted}"
        );
        let other = merge(SITE, "n3", "", &types(), false);
        assert!(other.is_ok(), "n2's MIG line belongs to n2: {other:?}");
        let broken = format!("{}\n", begin_marker("n1"));
        assert!(matches!(
            merge(&broken, "n1", "", &types(), false),
            Err(GresConfError::Markers { .. })
        ));
    }
}
