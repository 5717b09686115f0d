//! The gres check: gres.conf's GPU lines against the catalogue, and against the node's MIG
//! instances as NVML reports them, or, without NVML, against the device files.

use std::collections::BTreeSet;
use std::path::Path;

use smartmig_core::config::Resolved;
use smartmig_core::mig::layout::display_instance;
use smartmig_core::mig::padding::{device_major, is_pad_type, PAD_DEVICE_MAJOR};
use smartmig_gpu::GpuBackend;

use super::files::{self, expand_brackets};
use super::{Finding, Status};

/// Where the gres check learns what MIG instances the node has.
pub enum MigSource {
    /// A backend that lists them: NVML, or a simulated node.
    Backend {
        /// What it is, for the check's line (`NVML`, `simulated node DIR`).
        label: String,
        /// The backend.
        backend: Box<dyn GpuBackend>,
    },
    /// No backend: the device files gres.conf names must exist. Says why.
    DeviceFiles(String),
    /// The simulated node asked for cannot be read.
    Unreadable(String),
}

impl MigSource {
    /// The simulated node in `simulated`, else NVML as `nvml` says, else the device files.
    pub fn open(simulated: Option<&Path>, nvml: &smartmig_gpu::nvml::NvmlOptions) -> MigSource {
        match simulated {
            Some(dir) => match smartmig_gpu::simulated::Simulated::open(dir) {
                Ok(s) => MigSource::Backend {
                    label: format!("simulated node {}", dir.display()),
                    backend: Box::new(s),
                },
                Err(e) => MigSource::Unreadable(e.to_string()),
            },
            None => match smartmig_gpu::nvml::Nvml::open_with(nvml) {
                Ok(n) => MigSource::Backend {
                    label: "NVML".into(),
                    backend: Box::new(n),
                },
                Err(e) => MigSource::DeviceFiles(e.to_string()),
            },
        }
    }
}

/// One `Name=gpu` line of gres.conf.
struct GresLine {
    /// `FILE:LINE`.
    at: String,
    ty: Option<String>,
    /// `File=` or `MultipleFiles=` expanded.
    files: Vec<String>,
}

/// A MIG instance the backend reports.
struct Actual {
    /// `GPU 0 3g.20gb@4`.
    what: String,
    ty: String,
    files: Vec<String>,
}

fn same_files(a: &[String], b: &[String]) -> bool {
    a.iter().collect::<BTreeSet<_>>() == b.iter().collect::<BTreeSet<_>>()
}

/// This host's Slurm node names: the `NodeName=` entries of slurm.conf (`Include`s read)
/// whose `NodeHostname` (or, without one, whose name) is the short host name; the host
/// name itself when none is.
pub fn this_host_nodes(slurm_conf: &Path) -> Vec<String> {
    let host = smartmig_core::config::node::short_hostname().unwrap_or_default();
    let mut names = Vec::new();
    for line in files::read_lines(slurm_conf).unwrap_or_default() {
        let text = line.text.split('#').next().unwrap_or("").trim();
        let fields = files::key_values(text);
        let get = |k: &str| {
            fields
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.as_str())
        };
        let Some(Ok(nodes)) = get("NodeName").map(expand_brackets) else {
            continue;
        };
        let hosts = get("NodeHostname")
            .and_then(|h| expand_brackets(h).ok())
            .unwrap_or_else(|| nodes.clone());
        for (i, n) in nodes.iter().enumerate() {
            if hosts.get(i).unwrap_or(n) == &host && !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    if names.is_empty() {
        names.push(host);
    }
    names
}

/// The gres check of [`super::run`]: `nodes` are this host's Slurm node names. Only the
/// gres.conf lines for them (or for every node) count: a shared gres.conf lists other
/// nodes' devices, which this host neither has nor needs. With `AutoDetect=nvml` for
/// these nodes Slurm takes the devices from NVML itself, so lines without `File=` are
/// fine and device files are not compared.
pub fn check(slurm_conf: &Path, r: &Resolved, source: &MigSource, nodes: &[String]) -> Finding {
    let path = slurm_conf.with_file_name("gres.conf");
    let lines = match files::read_lines(&path) {
        Ok(t) => t,
        Err(e) => {
            return Finding::bad(
                "gres",
                Status::Fail,
                e.to_string(),
                "write gres.conf beside slurm.conf with one line per MIG instance (docs/admin-guide.md)",
            )
        }
    };
    let profiles: Vec<&str> = r
        .models
        .iter()
        .flat_map(|m| m.model.profiles.iter().map(|p| p.name.as_str()))
        .collect();
    let node = nodes.join(",");
    let mut problems = Vec::new();
    let mut gpus = Vec::new();
    let mut autodetect: Option<String> = None;
    let mut pads = 0;
    for conf_line in &lines {
        let line = conf_line.text.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let fields = files::key_values(line);
        let get = |k: &str| {
            fields
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.as_str())
        };
        let at = format!("{}:{}", conf_line.file.display(), conf_line.number);
        let line_nodes = match get("NodeName").map(expand_brackets).transpose() {
            Ok(n) => n,
            Err(e) => {
                problems.push(format!("{at}: NodeName: {e}"));
                continue;
            }
        };
        if line_nodes
            .as_ref()
            .is_some_and(|n| !n.iter().any(|x| nodes.contains(x)))
        {
            continue;
        }
        // The last AutoDetect line for these nodes wins, as in Slurm.
        if let Some(a) = get("AutoDetect") {
            autodetect = (!a.eq_ignore_ascii_case("off")).then(|| a.to_string());
        }
        if get("Name") != Some("gpu") {
            continue;
        }
        let ty = get("Type").map(str::to_string);
        if let Some(t) = ty.as_deref().filter(|t| is_pad_type(t)) {
            // Padding records (`[controller.central] padding`): no GPU, a device file each.
            match get("File").map(|f| (f, std::fs::metadata(f))) {
                Some((f, Ok(m))) => match pad_device_problem(&m) {
                    None => pads += 1,
                    Some(why) => problems.push(format!("{at}: padding device {f} {why}")),
                },
                Some((f, Err(_))) => problems.push(format!("{at}: padding device {f} does not exist")),
                None => problems.push(format!("{at}: Type={t} without File= (slurmd refuses the file)")),
            }
            continue;
        }
        match &ty {
            Some(t) if profiles.contains(&t.as_str()) => {}
            Some(t) => problems.push(format!(
                "{at}: Type={t} is no MIG profile of the configured models"
            )),
            None => problems.push(format!(
                "{at}: a GPU line without Type= (MIG types cannot be routed)"
            )),
        }
        let files = match get("File").or(get("MultipleFiles")) {
            Some(f) => match expand_brackets(f) {
                Ok(files) => files,
                Err(e) => {
                    problems.push(format!("{at}: {f}: {e}"));
                    continue;
                }
            },
            None if autodetect.is_some() || get("AutoDetect").is_some() => continue,
            None => {
                problems.push(format!("{at}: no File= (Slurm 22.05 drops such a GPU silently)"));
                continue;
            }
        };
        gpus.push(GresLine { at, ty, files });
    }
    if pads > 0 && autodetect.is_some() {
        problems.push(format!(
            "{pads} padding records with AutoDetect on: NVML knows no padding device (set AutoDetect=off for node {node})"
        ));
    }
    if let Some(mode) = &autodetect {
        let summary = format!(
            "AutoDetect={mode} for node {node}: Slurm takes the MIG devices from NVML; {} explicit lines, every Type= a catalogue profile",
            gpus.len()
        );
        return if problems.is_empty() {
            Finding::ok("gres", format!("{}: {summary}", path.display()))
        } else {
            Finding::bad(
                "gres",
                Status::Fail,
                problems.join("; "),
                "use the catalogue's profile names in Type= (`smartmig mig models`)",
            )
        };
    }

    let (summary, source_line) = match source {
        MigSource::Unreadable(e) => {
            return Finding::bad(
                "gres",
                Status::Fail,
                format!("cannot read the simulated node: {e}"),
                "pass the directory of a smartmigd simulated node to --simulated",
            )
        }
        MigSource::DeviceFiles(why) => {
            let mut devices = 0;
            for l in &gpus {
                for file in &l.files {
                    devices += 1;
                    if !Path::new(file).exists() {
                        problems.push(format!("{}: device {file} does not exist", l.at));
                    }
                }
            }
            (
                format!("{devices} MIG devices, every type a catalogue profile and every file present"),
                format!("source: device files; {why}"),
            )
        }
        MigSource::Backend { label, backend } => {
            let actual = match instances(backend.as_ref(), r) {
                Ok(a) => a,
                Err(e) => {
                    return Finding::bad(
                        "gres",
                        Status::Fail,
                        format!("{label}: {e}"),
                        "check the driver: nvidia-smi mig -lgi",
                    )
                }
            };
            let mine: Vec<&GresLine> = gpus.iter().collect();
            problems.extend(compare(&mine, &actual, label));
            (
                format!(
                    "{} lines for node {node} match the {} MIG instances {label} reports",
                    mine.len(),
                    actual.len()
                ),
                format!("source: {label}"),
            )
        }
    };
    let summary = match pads {
        0 => summary,
        n => format!("{summary}, and {n} padding records"),
    };
    if problems.is_empty() {
        Finding::ok("gres", format!("{}: {summary} ({source_line})", path.display()))
    } else {
        Finding::bad(
            "gres",
            Status::Fail,
            format!("{} ({source_line})", problems.join("; ")),
            "make gres.conf list the node's actual MIG instances (the node agent writes it; `nvidia-smi mig -lgi` shows them) and use the catalogue's profile names (`smartmig mig models`)",
        )
    }
}

/// The MIG instances (with compute instances) on the GPUs with MIG on, which must be of
/// configured models.
fn instances(backend: &dyn GpuBackend, r: &Resolved) -> Result<Vec<Actual>, String> {
    let mut out = Vec::new();
    for g in backend.gpus().map_err(|e| e.to_string())? {
        // A GPU without MIG has no instances to list (nor gres.conf lines of MIG types).
        if !g.mig_enabled {
            continue;
        }
        let Some(m) = r
            .models
            .iter()
            .find(|m| g.model.as_deref() == Some(m.model.key.as_str()))
        else {
            return Err(format!(
                "GPU {} ({}) is none of the configured models (gpu.models)",
                g.index, g.name
            ));
        };
        let state = backend.state(g.index, &m.model).map_err(|e| e.to_string())?;
        for d in state.devices {
            out.push(Actual {
                what: format!("GPU {} {}", g.index, display_instance(&m.model, &d.instance)),
                ty: m
                    .model
                    .profiles
                    .get(d.instance.profile)
                    .map_or_else(|| "unknown".into(), |p| p.name.clone()),
                files: d.files.iter().map(|f| f.display().to_string()).collect(),
            });
        }
    }
    Ok(out)
}

/// gres.conf lines against the instances, one message per difference.
fn compare(lines: &[&GresLine], actual: &[Actual], label: &str) -> Vec<String> {
    let mut out = Vec::new();
    for a in actual {
        match lines.iter().find(|l| same_files(&l.files, &a.files)) {
            None => out.push(format!(
                "{label} reports {} ({}), gres.conf has no line for it",
                a.what,
                a.files.join(",")
            )),
            Some(l) if l.ty.as_deref() != Some(a.ty.as_str()) => out.push(format!(
                "{}: Type={} but {label} reports {} on those devices",
                l.at,
                l.ty.as_deref().unwrap_or("(none)"),
                a.what
            )),
            Some(_) => {}
        }
    }
    for l in lines {
        if !actual.iter().any(|a| same_files(&l.files, &a.files)) {
            out.push(format!(
                "{}: {} is no MIG instance {label} reports",
                l.at,
                l.files.join(",")
            ));
        }
    }
    out
}

/// What is wrong with a padding device file, if anything: it must be a character device
/// of major [`PAD_DEVICE_MAJOR`], a number no driver serves, since Slurm's device cgroup
/// denies each GRES device a job was not given by its number.
fn pad_device_problem(m: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    if !m.file_type().is_char_device() {
        return Some("is not a character device (smartmigd makes them)".to_string());
    }
    let major = device_major(m.rdev());
    (major != PAD_DEVICE_MAJOR).then(|| {
        format!(
            "has major number {major}, a real driver's: with ConstrainDevices=yes Slurm would deny \
             that device to every job not given the record (smartmigd makes them with major \
             {PAD_DEVICE_MAJOR}; delete the file and let the agent make it again)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartmig_core::config::Config;
    use smartmig_gpu::simulated::Simulated;

    fn resolved() -> Resolved {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../etc/smartmig.toml"));
        Config::from_file(path).unwrap().resolve(path.parent()).unwrap()
    }

    /// A simulated node with one A100 in `3g@4 2g@0 1g@2`, and its gres.conf lines
    /// (`NodeName=n1 Name=gpu Type=T File=F`) as the node agent writes them.
    fn node(dir: &Path) -> (Simulated, Vec<String>) {
        let r = resolved();
        let m = &r.models[0].model;
        let sim = Simulated::create_layouts(&dir.join("sim"), m, &["3g@4 2g@0 1g@2"]).unwrap();
        let lines = sim
            .state(0, m)
            .unwrap()
            .devices
            .iter()
            .map(|d| {
                let ty = &m.profiles[d.instance.profile].name;
                format!("NodeName=n1 Name=gpu Type={ty} File={}", d.files[0].display())
            })
            .collect();
        (sim, lines)
    }

    fn gres(dir: &Path, lines: &[String], source: &MigSource) -> Finding {
        std::fs::write(dir.join("gres.conf"), lines.join("\n") + "\n").unwrap();
        check(&dir.join("slurm.conf"), &resolved(), source, &["n1".to_string()])
    }

    fn simulated(dir: &Path) -> MigSource {
        MigSource::open(Some(&dir.join("sim")), &Default::default())
    }

    #[test]
    fn padding_records_are_counted_apart_need_their_own_devices_and_autodetect_off() {
        let d = tempfile::tempdir().unwrap();
        let (_sim, mut lines) = node(d.path());
        let pad = d.path().join("pad-3g.20gb-0");
        let record = |file: &Path| format!("NodeName=n1 Name=gpu Type=pad-3g.20gb File={}", file.display());
        // A plain file, or a real driver's device (/dev/null, 1:3), is refused.
        std::fs::write(&pad, "").unwrap();
        lines.push(record(&pad));
        let f = gres(d.path(), &lines, &simulated(d.path()));
        assert!(f.message.contains("is not a character device"), "{f:?}");
        *lines.last_mut().unwrap() = record(Path::new("/dev/null"));
        let f = gres(d.path(), &lines, &simulated(d.path()));
        assert!(f.message.contains("has major number 1, a real driver's"), "{f:?}");
        // As the agent makes them (needs root, as the agent does).
        std::fs::remove_file(&pad).unwrap();
        let made = std::process::Command::new("mknod")
            .arg(&pad)
            .args(["c", &PAD_DEVICE_MAJOR.to_string(), "0"])
            .status()
            .unwrap();
        assert!(made.success(), "mknod (the test runs as root)");
        *lines.last_mut().unwrap() = record(&pad);
        let f = gres(d.path(), &lines, &simulated(d.path()));
        assert_eq!(f.status, Status::Ok, "{f:?}");
        assert!(f.message.contains("and 1 padding records"), "{}", f.message);
        lines.push("NodeName=n1 Name=gpu Type=pad-3g.20gb File=/nonexistent/pad".into());
        let f = gres(d.path(), &lines, &simulated(d.path()));
        assert!(
            f.message
                .contains("padding device /nonexistent/pad does not exist"),
            "{f:?}"
        );
        lines.pop();
        lines.insert(0, "AutoDetect=nvml".into());
        let f = gres(d.path(), &lines, &simulated(d.path()));
        assert!(f.message.contains("AutoDetect on"), "{f:?}");
    }

    #[test]
    fn gres_lines_matching_the_backends_instances_pass_and_the_line_names_the_source() {
        let d = tempfile::tempdir().unwrap();
        let (_sim, mut lines) = node(d.path());
        // Another node's line is not this node's business, whatever its files.
        lines.push("NodeName=n[2-3] Name=gpu Type=7g.40gb File=/nonexistent/nvidia9".into());
        // MultipleFiles= counts like File=.
        lines[0] = lines[0].replace("File=", "MultipleFiles=");
        let f = gres(d.path(), &lines, &simulated(d.path()));
        assert_eq!(f.status, Status::Ok, "{f:?}");
        assert!(
            f.message
                .contains("3 lines for node n1 match the 3 MIG instances"),
            "{}",
            f.message
        );
        assert!(f.message.contains("(source: simulated node "), "{}", f.message);
    }

    #[test]
    fn gres_lines_differing_from_the_backends_instances_are_each_named() {
        let d = tempfile::tempdir().unwrap();
        let (_sim, lines) = node(d.path());
        // Line 1 with the wrong type, line 2 gone, line 3 kept, and a device that is no instance.
        let wrong_type = lines[0].replace("Type=2g.10gb", "Type=1g.5gb");
        assert_ne!(wrong_type, lines[0], "the first instance is the 2g at 0");
        let extra = format!(
            "NodeName=n1 Name=gpu Type=1g.5gb File={}/dev/nvidia7",
            d.path().join("sim").display()
        );
        let f = gres(
            d.path(),
            &[wrong_type, lines[2].clone(), extra],
            &simulated(d.path()),
        );
        assert_eq!(f.status, Status::Fail, "{f:?}");
        let m = &f.message;
        assert!(m.contains("gres.conf:1: Type=1g.5gb but simulated node"), "{m}");
        assert!(m.contains("reports GPU 0 2g.10gb@0"), "{m}");
        assert!(
            m.contains("GPU 0 1g.5gb@2") && m.contains("gres.conf has no line for it"),
            "{m}"
        );
        assert!(
            m.contains("gres.conf:3: ") && m.contains("nvidia7 is no MIG instance"),
            "{m}"
        );
        assert!(m.contains("(source: simulated node "), "{m}");
    }

    #[test]
    fn without_a_backend_the_device_files_are_checked_and_the_line_says_why() {
        let d = tempfile::tempdir().unwrap();
        let (_sim, mut lines) = node(d.path());
        let source = MigSource::DeviceFiles("NVML unavailable here".into());
        let f = gres(d.path(), &lines, &source);
        assert_eq!(f.status, Status::Ok, "{f:?}");
        assert!(f.message.contains("3 MIG devices"), "{}", f.message);
        assert!(
            f.message
                .contains("(source: device files; NVML unavailable here)"),
            "{}",
            f.message
        );

        lines.push("Name=gpu Type=1g.5gb File=/nonexistent/nvidia9".into());
        let f = gres(d.path(), &lines, &source);
        assert_eq!(f.status, Status::Fail, "{f:?}");
        assert!(
            f.message
                .contains("gres.conf:4: device /nonexistent/nvidia9 does not exist"),
            "{}",
            f.message
        );
    }

    /// Issue 17: a shared gres.conf failed the check on other nodes' lines (their device
    /// files are not on this host, their types may be other GPUs').
    #[test]
    fn other_nodes_lines_of_a_shared_gres_conf_are_not_this_nodes_business() {
        let d = tempfile::tempdir().unwrap();
        let (_sim, mut lines) = node(d.path());
        lines.push("NodeName=n[2-3] Name=gpu Type=v100 File=/nonexistent/nvidia[0-1]".into());
        lines.push("NodeName=n4 Name=gpu Type=a100".into());
        let f = gres(d.path(), &lines, &MigSource::DeviceFiles("no NVML here".into()));
        assert_eq!(f.status, Status::Ok, "{f:?}");
        assert!(f.message.contains("3 MIG devices"), "{}", f.message);
    }

    /// Issue 17: `AutoDetect=nvml`, which the admin guide suggests, failed the check.
    #[test]
    fn autodetect_nvml_needs_no_file_lines_and_is_said() {
        let d = tempfile::tempdir().unwrap();
        let lines = [
            "AutoDetect=nvml".to_string(),
            "Name=gpu Type=3g.20gb".to_string(),
            "NodeName=n9 AutoDetect=off".to_string(),
        ];
        let f = gres(d.path(), &lines, &MigSource::DeviceFiles("no NVML here".into()));
        assert_eq!(f.status, Status::Ok, "{f:?}");
        assert!(f.message.contains("AutoDetect=nvml for node n1"), "{}", f.message);
        // Turned off for this node: the same lines lack File=.
        let lines = [
            "AutoDetect=nvml".to_string(),
            "NodeName=n1 AutoDetect=off".to_string(),
            "Name=gpu Type=3g.20gb".to_string(),
        ];
        let f = gres(d.path(), &lines, &MigSource::DeviceFiles("no NVML here".into()));
        assert_eq!(f.status, Status::Fail, "{f:?}");
        assert!(f.message.contains("no File="), "{}", f.message);
    }

    #[test]
    fn this_hosts_nodes_are_found_by_node_hostname() {
        let d = tempfile::tempdir().unwrap();
        let host = smartmig_core::config::node::short_hostname().unwrap();
        std::fs::write(
            d.path().join("slurm.conf"),
            format!(
                "ClusterName=x\nNodeName=gpu[01-02] NodeHostname=other,{host} Gres=gpu:1g.5gb:7\nNodeName={host}x CPUs=2\n"
            ),
        )
        .unwrap();
        assert_eq!(this_host_nodes(&d.path().join("slurm.conf")), ["gpu02"]);
    }

    #[test]
    fn an_unreadable_simulated_node_fails_the_check() {
        let d = tempfile::tempdir().unwrap();
        let (_sim, lines) = node(d.path());
        let f = gres(
            d.path(),
            &lines,
            &MigSource::open(Some(&d.path().join("nothing")), &Default::default()),
        );
        assert_eq!(f.status, Status::Fail, "{f:?}");
        assert!(
            f.message.contains("cannot read the simulated node"),
            "{}",
            f.message
        );
    }
}
