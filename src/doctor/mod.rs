//! `smartmig doctor`: checks of an installation, each a [`Finding`] with a fix.
//!
//! Everything is read-only: files are read, `scontrol --version` is run, the plugin's ELF
//! file is parsed (never loaded), NVML is only queried, and ONNX Runtime only opens the
//! configured policies.

mod files;
mod gres;

use std::path::{Path, PathBuf};

use serde::Serialize;
use smartmig_core::config::{Config, PolicyKind, Resolved};
use smartmig_core::routing::Snapshot;
use smartmig_gpu::nvml::{Nvml, NvmlOptions};
use smartmig_gpu::GpuBackend;

pub use files::{expand_brackets, plugin_version, SlurmConf};
pub use gres::MigSource;

/// The Debian/Ubuntu plugin directory, Slurm's `PluginDir` when slurm.conf sets none.
pub const DEFAULT_PLUGIN_DIR: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm";

/// How a check came out; the order is the severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fine.
    Ok,
    /// Not checked (asked to skip it, or it does not apply to this installation).
    Skip,
    /// Works, but not as intended.
    Warn,
    /// Broken.
    Fail,
}

/// One check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// The check's name (`slurm`, `plugin`, `config`, `snapshot`, `nvml`, `onnx`, `gres`).
    pub check: &'static str,
    /// Outcome.
    pub status: Status,
    /// What was found.
    pub message: String,
    /// What to do about it (None when fine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    fn ok(check: &'static str, message: String) -> Finding {
        Finding {
            check,
            status: Status::Ok,
            message,
            fix: None,
        }
    }

    fn bad(check: &'static str, status: Status, message: String, fix: impl Into<String>) -> Finding {
        Finding {
            check,
            status,
            message,
            fix: Some(fix.into()),
        }
    }
}

/// Every check's name, in the order they run.
pub const CHECKS: [&str; 7] = ["slurm", "plugin", "config", "snapshot", "nvml", "onnx", "gres"];

/// Where to look.
#[derive(Debug, Clone)]
pub struct Options {
    /// slurm.conf.
    pub slurm_conf: PathBuf,
    /// smartmig.toml (None: beside slurm.conf, then /etc/smartmig/smartmig.toml).
    pub config: Option<PathBuf>,
    /// `scontrol` to ask for the Slurm version.
    pub scontrol: PathBuf,
    /// Checks not to run.
    pub skip: Vec<String>,
    /// Now, Unix seconds (for the snapshot's age).
    pub now: f64,
    /// This node's Slurm name: the gres check compares its gres.conf lines with its GPUs
    /// (None: the short host name).
    pub node: Option<String>,
    /// A simulated node's directory to take the MIG instances from instead of NVML.
    pub simulated: Option<PathBuf>,
}

/// Runs every check.
pub fn run(o: &Options) -> Vec<Finding> {
    let mut out = Vec::new();
    let skip = |c: &str| o.skip.iter().any(|s| s == c);
    let conf = SlurmConf::read(&o.slurm_conf);
    let version = slurm_version(&o.scontrol, &o.slurm_conf);
    if !skip("slurm") {
        out.push(check_slurm(&o.slurm_conf, &conf, &version));
    }
    if !skip("plugin") {
        out.push(check_plugin(&conf, &version));
    }
    let config_path = o.config.clone().unwrap_or_else(|| {
        let beside = o.slurm_conf.with_file_name("smartmig.toml");
        if beside.is_file() {
            beside
        } else {
            PathBuf::from("/etc/smartmig/smartmig.toml")
        }
    });
    let resolved = Config::from_file(&config_path)
        .map_err(|e| e.to_string())
        .and_then(|c| c.resolve(config_path.parent()).map_err(|e| e.to_string()));
    if !skip("config") {
        out.push(match &resolved {
            Ok(r) => Finding::ok(
                "config",
                format!(
                    "{}: valid (GPU models {}, policy {:?})",
                    config_path.display(),
                    r.models.iter().map(|m| m.model.key.as_str()).collect::<Vec<_>>().join(", "),
                    r.config.policy.kind
                ),
            ),
            Err(e) => Finding::bad(
                "config",
                Status::Fail,
                e.clone(),
                format!(
                    "create or correct {} (every key is documented in etc/smartmig.toml; `smartmig config check FILE` names the bad key)",
                    config_path.display()
                ),
            ),
        });
    }
    let config = resolved.as_ref().ok();
    let dependent = |check: &'static str| {
        Finding::bad(
            check,
            Status::Skip,
            "not checked: smartmig.toml is not valid".into(),
            "fix the config check first",
        )
    };
    if !skip("snapshot") {
        out.push(config.map_or_else(|| dependent("snapshot"), |r| check_snapshot(r, o.now)));
    }
    if !skip("onnx") {
        out.push(config.map_or_else(|| dependent("onnx"), check_onnx));
    }
    // Where NVML is: the config's [node] keys, else the defaults.
    let nvml = config.map_or_else(NvmlOptions::default, |r| NvmlOptions::from(&r.config.node));
    if !skip("nvml") {
        out.push(check_nvml(&nvml));
    }
    if !skip("gres") {
        out.push(match (config, &conf) {
            (Some(r), Ok(_)) => {
                let node = o
                    .node
                    .clone()
                    .unwrap_or_else(|| smartmig_core::config::node::short_hostname().unwrap_or_default());
                gres::check(
                    &o.slurm_conf,
                    r,
                    &MigSource::open(o.simulated.as_deref(), &nvml),
                    &node,
                )
            }
            (None, _) => dependent("gres"),
            (_, Err(e)) => Finding::bad(
                "gres",
                Status::Skip,
                format!("not checked: {e}"),
                "fix the slurm check first",
            ),
        });
    }
    // Report in the documented order.
    out.sort_by_key(|f| CHECKS.iter().position(|c| *c == f.check));
    out
}

/// The worst status of a set of findings (Ok when empty).
pub fn worst(findings: &[Finding]) -> Status {
    findings.iter().map(|f| f.status).max().unwrap_or(Status::Ok)
}

/// `SLURM_VERSION_NUMBER` of a `major.minor.micro` version.
pub fn version_number(version: &str) -> Option<u32> {
    let mut parts = version.split('.').map(|p| {
        let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok()
    });
    let (a, b, c) = (parts.next()??, parts.next()??, parts.next()??);
    Some((a << 16) | (b << 8) | c)
}

/// The version `scontrol --version` prints (`slurm 22.05.8` → `22.05.8`).
fn slurm_version(scontrol: &Path, slurm_conf: &Path) -> Result<String, String> {
    // scontrol needs a configuration even to print its version.
    let out = std::process::Command::new(scontrol)
        .arg("--version")
        .env("SLURM_CONF", slurm_conf)
        .output()
        .map_err(|e| format!("cannot run {} --version: {e}", scontrol.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .nth(1)
        .filter(|v| version_number(v).is_some())
        .map(str::to_string)
        .ok_or_else(|| format!("{} --version printed {:?}", scontrol.display(), text.trim()))
}

fn check_slurm(path: &Path, conf: &Result<SlurmConf, String>, version: &Result<String, String>) -> Finding {
    let version = match version {
        Ok(v) => v,
        Err(e) => {
            return Finding::bad(
                "slurm",
                Status::Fail,
                e.clone(),
                "install Slurm's client commands (Debian: slurm-client) or pass --scontrol PATH",
            )
        }
    };
    let conf = match conf {
        Ok(c) => c,
        Err(e) => {
            return Finding::bad(
                "slurm",
                Status::Fail,
                e.clone(),
                "pass --slurm-conf PATH or set SLURM_CONF",
            )
        }
    };
    let plugins = conf.get("JobSubmitPlugins").unwrap_or("");
    let named = plugins
        .split(',')
        .map(str::trim)
        .any(|p| p == "smartmig" || p == "job_submit/smartmig");
    if named {
        Finding::ok(
            "slurm",
            format!(
                "Slurm {version}; {} has JobSubmitPlugins={plugins}",
                path.display()
            ),
        )
    } else {
        Finding::bad(
            "slurm",
            Status::Fail,
            format!(
                "Slurm {version}; {} does not name smartmig in JobSubmitPlugins (`{plugins}`)",
                path.display()
            ),
            "add smartmig to JobSubmitPlugins in slurm.conf (JobSubmitPlugins=smartmig, or append to the list) and restart slurmctld",
        )
    }
}

fn check_plugin(conf: &Result<SlurmConf, String>, version: &Result<String, String>) -> Finding {
    let dirs: Vec<PathBuf> = conf
        .as_ref()
        .ok()
        .and_then(|c| c.get("PluginDir"))
        .unwrap_or(DEFAULT_PLUGIN_DIR)
        .split(':')
        .map(PathBuf::from)
        .collect();
    // Slurm takes the first directory that holds the file.
    let Some(so) = dirs
        .iter()
        .map(|d| d.join("job_submit_smartmig.so"))
        .find(|p| p.is_file())
    else {
        let list: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        return Finding::bad(
            "plugin",
            Status::Fail,
            format!("job_submit_smartmig.so is in none of PluginDir {}", list.join(":")),
            format!(
                "install it: `install -m 0755 libjob_submit_smartmig.so {}/job_submit_smartmig.so` (docs/admin-guide.md, Install)",
                dirs.first().map_or(DEFAULT_PLUGIN_DIR.into(), |d| d.display().to_string())
            ),
        );
    };
    let theirs = match plugin_version(&so) {
        Ok(v) => v,
        Err(e) => {
            return Finding::bad(
                "plugin",
                Status::Fail,
                format!("{}: {e}", so.display()),
                "reinstall the plugin built by `cargo build -p smartmig-slurm-plugin --release`",
            )
        }
    };
    let show = |v: u32| format!("{}.{:02}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff);
    match version.as_ref().ok().and_then(|v| version_number(v)) {
        Some(ours) if ours == theirs => Finding::ok(
            "plugin",
            format!("{}: plugin_version {} matches slurmctld", so.display(), show(theirs)),
        ),
        Some(ours) => Finding::bad(
            "plugin",
            Status::Fail,
            format!(
                "{}: built for Slurm {}, but Slurm is {}: slurmctld refuses to load it",
                so.display(),
                show(theirs),
                show(ours)
            ),
            "rebuild the plugin against this Slurm's headers (`cargo build -p smartmig-slurm-plugin --release`) and reinstall it before restarting slurmctld",
        ),
        None => Finding::bad(
            "plugin",
            Status::Warn,
            format!(
                "{}: built for Slurm {}; the installed Slurm's version is unknown",
                so.display(),
                show(theirs)
            ),
            "fix the slurm check, then run doctor again",
        ),
    }
}

fn check_snapshot(r: &Resolved, now: f64) -> Finding {
    let path = &r.config.controller.snapshot_path;
    let max_age = r.config.routing.snapshot_max_age_s;
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            return Finding::bad(
                "snapshot",
                Status::Warn,
                format!("{}: {e}; routing falls back to the static layout's types", path.display()),
                "start smartmigd (systemctl start smartmigd) and check its log; without it the plugin routes on policy.static_layout",
            )
        }
    };
    match Snapshot::parse(&bytes) {
        Err(e) => Finding::bad(
            "snapshot",
            Status::Fail,
            format!("{}: {e}", path.display()),
            "only smartmigd should write the snapshot: stop whatever else writes it and restart smartmigd",
        ),
        Ok(s) if s.is_fresh(now, max_age) => Finding::ok(
            "snapshot",
            format!(
                "{}: {:.0} s old (limit {max_age} s)",
                path.display(),
                s.age_s(now)
            ),
        ),
        Ok(s) => Finding::bad(
            "snapshot",
            Status::Warn,
            format!(
                "{}: {:.0} s old, the plugin ignores it after {max_age} s (routing uses the static layout)",
                path.display(),
                s.age_s(now)
            ),
            "check that smartmigd runs (systemctl status smartmigd) and that the host clocks agree",
        ),
    }
}

fn check_onnx(r: &Resolved) -> Finding {
    if r.config.policy.kind != PolicyKind::MeanField {
        return Finding::bad(
            "onnx",
            Status::Skip,
            format!(
                "policy.kind is {:?}: no learned policy to load",
                r.config.policy.kind
            ),
            "nothing to do",
        );
    }
    let explicit = r.config.controller.onnxruntime.as_deref();
    let rt =
        match crate::policy::OnnxRuntime::init(explicit) {
            Ok(rt) => rt,
            Err(e) => return Finding::bad(
                "onnx",
                Status::Fail,
                e.to_string(),
                "run `smartmig policy fetch-runtime`, or set controller.onnxruntime to a libonnxruntime.so",
            ),
        };
    let mut loaded = Vec::new();
    for m in &r.models {
        let path = r.config.policy.models_dir.join(crate::policy::policy_file_name(
            &m.model.key,
            crate::policy::mode_semantics(r.config.controller.mode),
        ));
        let fix = format!(
            "install the policy for {} as {} (`smartmig train --out ...`), or set policy.kind = \"static\"",
            m.model.key,
            path.display()
        );
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => return Finding::bad("onnx", Status::Fail, format!("{}: {e}", path.display()), fix),
        };
        let checked = crate::cli::policy_metadata(&path, &bytes).and_then(|meta| {
            if meta.gpu_model != m.model.key {
                return Err(format!("made for {}, not {}", meta.gpu_model, m.model.key));
            }
            let names: Vec<&str> = m.configurations.iter().map(|c| c.name.as_str()).collect();
            if meta.configurations != names {
                return Err(format!(
                    "configurations {:?} differ from the catalogue's {names:?}",
                    meta.configurations
                ));
            }
            crate::policy::PolicyRuntime::from_bytes(&rt, &bytes, &meta, &path.display().to_string())
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        if let Err(e) = checked {
            return Finding::bad("onnx", Status::Fail, format!("{}: {e}", path.display()), fix);
        }
        loaded.push(path.display().to_string());
    }
    Finding::ok(
        "onnx",
        format!(
            "ONNX Runtime {}; loaded {}",
            rt.library().display(),
            loaded.join(", ")
        ),
    )
}

fn check_nvml(options: &NvmlOptions) -> Finding {
    let library = options.library.to_string_lossy();
    let nvml = match Nvml::open_with(options) {
        Ok(n) => n,
        Err(e) => {
            return Finding::bad(
                "nvml",
                Status::Warn,
                format!("NVML not found ({e}); no NVIDIA driver on this host"),
                format!("on GPU nodes install the NVIDIA driver ({library}, [node] nvml_library); on a controller-only host run doctor with --skip nvml"),
            )
        }
    };
    let gpus = match nvml.gpus() {
        Ok(g) => g,
        Err(e) => {
            return Finding::bad(
                "nvml",
                Status::Fail,
                format!("NVML: {e}"),
                "check the driver: nvidia-smi",
            )
        }
    };
    let mut parts = Vec::new();
    let mut off = Vec::new();
    for g in &gpus {
        let mode = if g.mig_enabled { "MIG on" } else { "MIG off" };
        let pending = if g.mig_pending == g.mig_enabled {
            ""
        } else {
            " (changes at the next GPU reset)"
        };
        parts.push(format!("GPU {}: {mode}{pending}", g.index));
        if !g.mig_enabled {
            off.push(g.index.to_string());
        }
    }
    let count = gpus.len();
    if off.is_empty() {
        Finding::ok("nvml", format!("{count} GPUs; {}", parts.join(", ")))
    } else {
        Finding::bad(
            "nvml",
            Status::Warn,
            format!("{count} GPUs; {}", parts.join(", ")),
            format!(
                "enable MIG on GPUs {}: `nvidia-smi -i N -mig 1` while idle",
                off.join(",")
            ),
        )
    }
}
