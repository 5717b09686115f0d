//! `smartmig doctor`: checks of an installation, each a [`Finding`] with a fix.
//!
//! Everything is read-only: files are read, `scontrol --version` is run, the plugin's ELF
//! file is parsed (never loaded), NVML is only queried, and ONNX Runtime only opens the
//! configured policies.

mod files;
mod gres;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use smartmig_core::config::{Config, PolicyKind, Resolved};
use smartmig_core::routing::Snapshot;
use smartmig_gpu::nvml::{Nvml, NvmlOptions};
use smartmig_gpu::GpuBackend;

pub use files::{expand_brackets, plugin_version, ConfError, PluginFileError, SlurmConf};
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
    /// The check's name (one of [`CHECKS`]).
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
pub const CHECKS: [&str; 8] = [
    "slurm", "plugin", "config", "requeue", "snapshot", "nvml", "onnx", "gres",
];

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
    /// How long `scontrol --version` may take.
    pub scontrol_timeout: Duration,
}

/// How long `scontrol --version` may take by default: it answers at once when it has a
/// configuration, and otherwise may try DNS for a minute.
pub const SCONTROL_TIMEOUT: Duration = Duration::from_secs(3);

/// How long any other check may take before doctor reports it as hanging and goes on.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `check` on its own thread; after `limit` it is reported as hanging (the thread is
/// left to finish or die with the process).
fn timed(check: &'static str, limit: Duration, f: impl FnOnce() -> Finding + Send + 'static) -> Finding {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(format!("doctor-{check}"))
        .spawn(move || {
            // The receiver may be gone after a timeout: nothing left to tell.
            let _ = tx.send(f());
        });
    let hung = |why: String| {
        Finding::bad(
            check,
            Status::Fail,
            why,
            "find what blocks it (a hung driver, NFS, DNS) and run doctor again",
        )
    };
    match spawned {
        Err(e) => hung(format!("could not start the check: {e}")),
        Ok(_) => rx
            .recv_timeout(limit)
            .unwrap_or_else(|_| hung(format!("did not finish within {} s", limit.as_secs_f64()))),
    }
}

/// Runs every check in [`CHECKS`] order, handing each finding to `report` as soon as it
/// is known (a hanging check costs at most [`CHECK_TIMEOUT`]).
pub fn run(o: &Options, report: &mut dyn FnMut(&Finding)) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut emit = |f: Finding| {
        report(&f);
        out.push(f);
    };
    let skip = |c: &str| o.skip.iter().any(|s| s == c);
    // Shared with the plugin check's thread.
    let conf = std::sync::Arc::new(SlurmConf::read(&o.slurm_conf));
    let version = match conf.as_ref() {
        // Without a configuration scontrol looks for one in DNS and may hang; the slurm
        // check reports the missing file instead.
        Err(_) => Err("not asked: scontrol needs slurm.conf".to_string()),
        Ok(_) if skip("slurm") && skip("plugin") => Err("not asked".to_string()),
        Ok(_) => slurm_version(&o.scontrol, &o.slurm_conf, o.scontrol_timeout),
    };
    if !skip("slurm") {
        emit(check_slurm(&o.slurm_conf, &conf, &version));
    }
    if !skip("plugin") {
        let (conf, version) = (std::sync::Arc::clone(&conf), version.clone());
        emit(timed("plugin", CHECK_TIMEOUT, move || {
            check_plugin(&conf, &version)
        }));
    }
    let config_path = o.config.clone().unwrap_or_else(|| {
        let beside = o.slurm_conf.with_file_name("smartmig.toml");
        if beside.is_file() {
            beside
        } else {
            PathBuf::from(smartmig_core::config::DEFAULT_PATH)
        }
    });
    let resolved = Config::from_file(&config_path)
        .map_err(|e| e.to_string())
        .and_then(|c| c.resolve(config_path.parent()).map_err(|e| e.to_string()))
        .map(std::sync::Arc::new);
    if !skip("config") {
        emit(match &resolved {
            Ok(r) => Finding::ok(
                "config",
                format!(
                    "{}: valid (GPU models {}, policy {})",
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
                    "create or correct {} (every key is documented in smartmig.toml(5) and /usr/share/doc/smartmig/examples/smartmig.toml; `smartmig config check FILE` names the bad key)",
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
    let needs_slurm_conf = |check: &'static str, e: &ConfError| {
        Finding::bad(
            check,
            Status::Skip,
            format!("not checked: {e}"),
            "fix the slurm check first",
        )
    };
    if !skip("requeue") {
        emit(match (config, conf.as_ref()) {
            (Some(r), Ok(c)) => check_requeue(&o.slurm_conf, c, r.config.controller.mode),
            (None, _) => dependent("requeue"),
            (_, Err(e)) => needs_slurm_conf("requeue", e),
        });
    }
    if !skip("snapshot") {
        emit(match config {
            Some(r) => {
                let (r, now) = (r.clone(), o.now);
                timed("snapshot", CHECK_TIMEOUT, move || check_snapshot(&r, now))
            }
            None => dependent("snapshot"),
        });
    }
    // Where NVML is: the config's [node] keys, else the defaults.
    let nvml = config.map_or_else(NvmlOptions::default, |r| NvmlOptions::from(&r.config.node));
    if !skip("nvml") {
        let nvml = nvml.clone();
        emit(timed("nvml", CHECK_TIMEOUT, move || check_nvml(&nvml)));
    }
    if !skip("onnx") {
        emit(match config {
            Some(r) => {
                let r = r.clone();
                timed("onnx", CHECK_TIMEOUT, move || check_onnx(&r))
            }
            None => dependent("onnx"),
        });
    }
    if !skip("gres") {
        emit(match (config, conf.as_ref()) {
            (Some(r), Ok(_)) => {
                let (r, slurm_conf, simulated) = (r.clone(), o.slurm_conf.clone(), o.simulated.clone());
                let (node, nvml) = (o.node.clone(), nvml.clone());
                timed("gres", CHECK_TIMEOUT, move || {
                    let nodes = match node {
                        Some(n) => vec![n],
                        None => gres::this_host_nodes(&slurm_conf),
                    };
                    gres::check(
                        &slurm_conf,
                        &r,
                        &MigSource::open(simulated.as_deref(), &nvml),
                        &nodes,
                    )
                })
            }
            (None, _) => dependent("gres"),
            (_, Err(e)) => needs_slurm_conf("gres", e),
        });
    }
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

/// The version `scontrol --version` prints (`slurm 22.05.8` → `22.05.8`), within `limit`;
/// otherwise what went wrong, quoting scontrol's own error output.
fn slurm_version(scontrol: &Path, slurm_conf: &Path, limit: Duration) -> Result<String, String> {
    use std::io::Read;
    use std::process::{Command, Stdio};
    // scontrol needs a configuration even to print its version.
    let mut child = Command::new(scontrol)
        .arg("--version")
        .env("SLURM_CONF", slurm_conf)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {} --version: {e}", scontrol.display()))?;
    let start = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                // Best effort: it may have exited in between.
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} --version did not answer within {} s",
                    scontrol.display(),
                    limit.as_secs_f64()
                ));
            }
            Err(e) => return Err(format!("{} --version: {e}", scontrol.display())),
        }
    };
    let read = |pipe: Option<&mut dyn Read>| {
        let mut text = String::new();
        if let Some(p) = pipe {
            // A pipe that cannot be read leaves the text empty, which the messages show.
            let _ = p.read_to_string(&mut text);
        }
        text
    };
    let stdout = read(child.stdout.as_mut().map(|p| p as &mut dyn Read));
    let stderr = read(child.stderr.as_mut().map(|p| p as &mut dyn Read));
    if !status.success() {
        return Err(format!(
            "{} --version failed ({status}): {}",
            scontrol.display(),
            stderr.trim()
        ));
    }
    stdout
        .split_whitespace()
        .nth(1)
        .filter(|v| version_number(v).is_some())
        .map(str::to_string)
        .ok_or_else(|| format!("{} --version printed {:?}", scontrol.display(), stdout.trim()))
}

fn check_slurm(
    path: &Path,
    conf: &Result<SlurmConf, ConfError>,
    version: &Result<String, String>,
) -> Finding {
    let conf =
        match conf {
            Ok(c) => c,
            Err(e) => return Finding::bad(
                "slurm",
                Status::Fail,
                e.to_string(),
                "pass --slurm-conf PATH or set SLURM_CONF (doctor reads slurm.conf, and scontrol needs it)",
            ),
        };
    let version = match version {
        Ok(v) => v,
        Err(e) if e.starts_with("cannot run") => {
            return Finding::bad(
                "slurm",
                Status::Fail,
                e.clone(),
                "install Slurm's client commands (Debian: slurm-client) or pass --scontrol PATH",
            )
        }
        Err(e) => {
            return Finding::bad(
                "slurm",
                Status::Fail,
                e.clone(),
                "make `scontrol --version` work with this slurm.conf (its error is quoted above)",
            )
        }
    };
    let plugins = conf.get("JobSubmitPlugins").unwrap_or("");
    let named = plugins
        .split(',')
        .map(str::trim)
        .any(|p| p == "smartmig" || p == "job_submit/smartmig");
    // Worth knowing before the first re-layout strands a routed job.
    let limit = match version_number(version) {
        Some(n) if n < smartmig_core::routing::RETYPE_SINCE => {
            "; before 23.02.6 smartmigd cannot re-route a pending job whose GPU type a \
             re-layout removes (admin guide, \"Re-routing pending jobs\")"
        }
        _ => "",
    };
    if named {
        Finding::ok(
            "slurm",
            format!(
                "Slurm {version}; {} has JobSubmitPlugins={plugins}{limit}",
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

/// In preempt mode smartmigd frees GPUs by requeueing jobs; under `JobRequeue=0` Slurm
/// requeues only batch jobs submitted with `--requeue`, so most nodes change by the drain
/// rules instead, which an admin who chose preempt should hear from doctor, not find out.
fn check_requeue(path: &Path, conf: &SlurmConf, mode: smartmig_core::config::Mode) -> Finding {
    use smartmig_core::config::Mode;
    if mode != Mode::Preempt {
        return Finding::bad(
            "requeue",
            Status::Skip,
            format!("controller.mode = \"{mode}\": smartmigd requeues no job"),
            "nothing to do",
        );
    }
    match conf.get("JobRequeue").map(str::trim) {
        Some("0") => Finding::bad(
            "requeue",
            Status::Warn,
            format!(
                "controller.mode = \"preempt\", but {} has JobRequeue=0: Slurm requeues only batch jobs submitted with --requeue, and smartmigd changes a node running any other job by the drain rules",
                path.display()
            ),
            "remove JobRequeue=0 from slurm.conf (the default, 1, lets Slurm requeue batch jobs not submitted with --no-requeue) and run `scontrol reconfigure`, or set controller.mode = \"drain\" in smartmig.toml",
        ),
        value => Finding::ok(
            "requeue",
            format!(
                "controller.mode = \"preempt\"; JobRequeue={} in {}: Slurm requeues batch jobs not submitted with --no-requeue",
                value.unwrap_or("1 (default)"),
                path.display()
            ),
        ),
    }
}

fn check_plugin(conf: &Result<SlurmConf, ConfError>, version: &Result<String, String>) -> Finding {
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
                "on the Slurm controller host: `systemctl enable --now smartmigd-central` and check `journalctl -u smartmigd-central`; without it the plugin routes on policy.static_layout",
            )
        }
    };
    match Snapshot::parse(&bytes) {
        Err(e) => Finding::bad(
            "snapshot",
            Status::Fail,
            format!("{}: {e}", path.display()),
            "only smartmigd-central should write the snapshot: stop whatever else writes it and `systemctl restart smartmigd-central`",
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
            "check that smartmigd-central runs (`systemctl status smartmigd-central`) and that the host clocks agree",
        ),
    }
}

/// The ONNX Runtime library smartmigd-central will load: its unit sees neither home
/// directories (`ProtectHome=yes`) nor the admin's environment, so only
/// `controller.onnxruntime` or the system copy count, not `ORT_DYLIB_PATH` or a cache in
/// a home directory.
fn service_runtime(configured: Option<&Path>) -> Result<PathBuf, String> {
    use smartmig_policy::provision;
    let hidden = |p: &Path| ["/home", "/root", "/run/user"].iter().any(|h| p.starts_with(h));
    if let Some(p) = configured {
        if hidden(p) {
            return Err(format!(
                "controller.onnxruntime = {} is in a home directory, which the smartmigd-central unit cannot see (ProtectHome=yes)",
                p.display()
            ));
        }
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(format!("controller.onnxruntime = {}: no such file", p.display()))
        };
    }
    if let Some(p) = provision::system_library() {
        return Ok(p);
    }
    Err(match provision::cached_library() {
        Some(c) => format!(
            "ONNX Runtime is only in {}, which the smartmigd-central unit cannot see (ProtectHome=yes); it looks in {}",
            c.display(),
            provision::SYSTEM_DIR
        ),
        None => format!(
            "no ONNX Runtime for smartmigd-central: controller.onnxruntime is unset and {} has no {}",
            provision::SYSTEM_DIR,
            provision::library_file_name()
        ),
    })
}

fn check_onnx(r: &Resolved) -> Finding {
    if let Some(why) = smartmig_core::config::periodic_mismatch(&r.config) {
        return Finding::bad(
            "onnx",
            Status::Warn,
            format!("policy.kind is periodic, but smartmigd runs policy.static_layout instead: {why}"),
            "run `smartmig tune-periodic --smartmig-toml /etc/smartmig/smartmig.toml` (it searches under the file's rules and writes the schedule there), or delete policy.periodic_tuned_under to run the schedule as written",
        );
    }
    if r.config.policy.kind != PolicyKind::MeanField {
        return Finding::bad(
            "onnx",
            Status::Skip,
            format!(
                "policy.kind is {}: no learned policy to load",
                r.config.policy.kind
            ),
            "nothing to do",
        );
    }
    let library = match service_runtime(r.config.controller.onnxruntime.as_deref()) {
        Ok(p) => p,
        Err(why) => {
            return Finding::bad(
                "onnx",
                Status::Fail,
                why,
                format!(
                    "run `smartmig policy fetch-runtime --system` (installs {}/{}), or set controller.onnxruntime to a libonnxruntime.so outside /home and /root",
                    smartmig_policy::provision::SYSTEM_DIR,
                    smartmig_policy::provision::library_file_name()
                ),
            )
        }
    };
    let rt = match smartmig_policy::OnnxRuntime::init(Some(&library)) {
        Ok(rt) => rt,
        Err(e) => {
            return Finding::bad(
                "onnx",
                Status::Fail,
                e.to_string(),
                "replace the library with onnxruntime's own (`smartmig policy fetch-runtime --system`)",
            )
        }
    };
    let mut loaded = Vec::new();
    for m in &r.models {
        let path = r.config.policy.models_dir.join(smartmig_policy::policy_file_name(
            &m.model.key,
            smartmig_policy::mode_semantics(r.config.controller.mode),
        ));
        let fix = format!(
            "install the policy for {} as {} (the smartmig package ships them in /usr/share/smartmig/onnx; `smartmig train --out FILE` makes one), or set policy.kind = \"static\"",
            m.model.key,
            path.display()
        );
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => return Finding::bad("onnx", Status::Fail, format!("{}: {e}", path.display()), fix),
        };
        let checked = smartmig_policy::onnx_proto::read_metadata(&path, &bytes)
            .map_err(|e| e.to_string())
            .and_then(|meta| {
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
                smartmig_policy::PolicyRuntime::from_bytes(&rt, &bytes, &meta, &path.display().to_string())
                    .map(|_| meta)
                    .map_err(|e| e.to_string())
            });
        let meta = match checked {
            Ok(meta) => meta,
            Err(e) => return Finding::bad("onnx", Status::Fail, format!("{}: {e}", path.display()), fix),
        };
        // What smartmigd refuses to run (its GPUs then take the static layout).
        let central = &r.config.controller.central;
        let site = smartmig_policy::Site {
            requeued: central.requeued,
            padding: central.padding,
            requeue_max_run_s: central.requeue_max_run_s,
        };
        if let Some(why) = meta.refusal(site) {
            return Finding::bad(
                "onnx",
                Status::Fail,
                format!("{}: smartmigd will not run it: {why}", path.display()),
                "install a policy that suits the site (`smartmig train --smartmig-toml /etc/smartmig/smartmig.toml`), or set policy.kind = \"periodic\" or \"static\"",
            );
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in `scontrol` running `body` (a shell script).
    fn fake_scontrol(dir: &Path, body: &str) -> PathBuf {
        let p = dir.join("scontrol");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn options(dir: &Path, scontrol: PathBuf) -> Options {
        Options {
            slurm_conf: dir.join("slurm.conf"),
            config: Some(dir.join("smartmig.toml")),
            scontrol,
            skip: vec!["nvml".into(), "onnx".into(), "gres".into()],
            now: 0.0,
            node: None,
            simulated: None,
            scontrol_timeout: Duration::from_millis(300),
        }
    }

    fn slurm_finding(o: &Options) -> Finding {
        let mut seen = Vec::new();
        let all = run(o, &mut |f| seen.push(f.check));
        assert_eq!(
            seen,
            all.iter().map(|f| f.check).collect::<Vec<_>>(),
            "reported as it went"
        );
        all.into_iter().find(|f| f.check == "slurm").unwrap()
    }

    /// Issue 17: without slurm.conf doctor printed nothing for a minute (scontrol looking
    /// for a configuration), then blamed a missing scontrol.
    #[test]
    fn a_missing_slurm_conf_is_named_and_scontrol_is_not_asked() {
        let d = tempfile::tempdir().unwrap();
        let never = fake_scontrol(d.path(), "sleep 60");
        let f = slurm_finding(&options(d.path(), never));
        assert_eq!(f.status, Status::Fail);
        assert!(
            f.message.contains("slurm.conf") && f.message.contains("cannot read"),
            "{}",
            f.message
        );
    }

    #[test]
    fn a_hanging_scontrol_is_cut_off_and_a_failing_one_quoted() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("slurm.conf"), "JobSubmitPlugins=smartmig\n").unwrap();
        let slow = fake_scontrol(d.path(), "sleep 60");
        let f = slurm_finding(&options(d.path(), slow));
        assert!(f.message.contains("did not answer within 0.3 s"), "{}", f.message);
        let failing = fake_scontrol(
            d.path(),
            "echo 'scontrol: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host' >&2; exit 1",
        );
        let f = slurm_finding(&options(d.path(), failing));
        assert_eq!(f.status, Status::Fail);
        assert!(
            f.message.contains("res_nsearch error: Unknown host") && !f.message.contains("not installed"),
            "{}",
            f.message
        );
    }

    #[test]
    fn a_slurm_before_23_02_6_is_fine_but_its_re_routing_limit_is_named() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("slurm.conf"), "JobSubmitPlugins=smartmig\n").unwrap();
        for (version, named) in [
            ("22.05.8", true),
            ("23.02.5", true),
            ("23.02.6", false),
            ("24.11.5", false),
        ] {
            let scontrol = fake_scontrol(d.path(), &format!("echo 'slurm {version}'"));
            let f = slurm_finding(&options(d.path(), scontrol));
            assert_eq!(f.status, Status::Ok, "{}", f.message);
            assert_eq!(
                f.message.contains("cannot re-route a pending job"),
                named,
                "{version}: {}",
                f.message
            );
        }
    }

    #[test]
    fn preempt_mode_under_job_requeue_0_is_a_warning_and_drain_mode_skips_the_check() {
        let d = tempfile::tempdir().unwrap();
        let scontrol = fake_scontrol(d.path(), "echo 'slurm 22.05.8'");
        let requeue = |slurm_conf: &str, mode: &str| {
            std::fs::write(d.path().join("slurm.conf"), slurm_conf).unwrap();
            std::fs::write(
                d.path().join("smartmig.toml"),
                format!("version = 1\n[gpu]\nmodels = [\"a100-40gb\"]\n[controller]\nmode = \"{mode}\"\n"),
            )
            .unwrap();
            let all = run(&options(d.path(), scontrol.clone()), &mut |_| {});
            all.into_iter().find(|f| f.check == "requeue").unwrap()
        };
        let f = requeue("JobSubmitPlugins=smartmig\nJobRequeue=0\n", "preempt");
        assert_eq!(f.status, Status::Warn);
        assert!(
            f.message.contains("JobRequeue=0") && f.message.contains("drain rules"),
            "{}",
            f.message
        );
        assert!(f.fix.unwrap().contains("controller.mode = \"drain\""));
        let f = requeue("JobSubmitPlugins=smartmig\n", "preempt");
        assert_eq!(f.status, Status::Ok, "{}", f.message);
        assert!(f.message.contains("JobRequeue=1 (default)"), "{}", f.message);
        let f = requeue("JobSubmitPlugins=smartmig\nJobRequeue=0\n", "drain");
        assert_eq!(f.status, Status::Skip, "{}", f.message);
    }

    /// A policy smartmigd refuses is a failure here too: a preempt policy validated where
    /// requeued jobs resume, at a site whose jobs start over (the default), or one validated
    /// with a requeue limit the site does not keep.
    #[test]
    fn a_policy_fails_where_its_validation_assumed_resumed_jobs_a_requeue_limit_or_padding_the_site_lacks() {
        let Ok(rt) = smartmig_policy::OnnxRuntime::init(None) else {
            eprintln!("skipped: no ONNX Runtime here");
            return;
        };
        let d = tempfile::tempdir().unwrap();
        // The unit cannot see a home directory: give the check a copy outside it.
        let library = d.path().join("libonnxruntime.so");
        std::fs::copy(rt.library(), &library).unwrap();
        // `limit`: validated where jobs restart, requeueing only jobs younger than it.
        let check_limited = |central: &str, padding: bool, limit: Option<f64>| {
            let text = format!(
                "version = 1\n[policy]\nkind = \"mean-field\"\nmodels_dir = \"{dir}\"\n\
                 [controller]\nmode = \"preempt\"\nonnxruntime = \"{lib}\"\n\
                 [controller.central]\n{central}",
                dir = d.path().display(),
                lib = library.display()
            );
            let r = smartmig_core::config::Config::parse(&text, "smartmig.toml")
                .unwrap()
                .resolve(None)
                .unwrap();
            let m = &r.models[0];
            let k = m.configurations.len();
            let meta = smartmig_policy::PolicyMetadata {
                training_scenario: "paper".into(),
                training_seed: 1,
                guard: Some("passed: +7.4% ± 0.8%".into()),
                padding,
                requeue_max_run_s: limit,
                ..smartmig_policy::PolicyMetadata::new(
                    m.model.key.clone(),
                    m.configurations.iter().map(|c| c.name.clone()).collect(),
                    smartmig_policy::Semantics::Preempt,
                    match limit {
                        Some(_) => smartmig_policy::Requeued::Restart,
                        None => smartmig_policy::Requeued::Resume,
                    },
                )
            };
            let dim = meta.input_dim();
            let net = smartmig_policy::PolicyNetwork {
                layers: vec![smartmig_policy::Dense {
                    in_dim: dim,
                    out_dim: k * k,
                    w: vec![0.0; dim * k * k],
                    b: vec![0.0; k * k],
                }],
                hidden: smartmig_policy::Activation::Tanh,
            };
            let path = d.path().join("a100-40gb-preempt.onnx");
            smartmig_policy::onnx_writer::write(&path, &net, &meta).unwrap();
            check_onnx(&r)
        };
        let check = |central: &str, padding: bool| check_limited(central, padding, None);
        let f = check("", false);
        assert_eq!(f.status, Status::Fail, "{}", f.message);
        assert!(
            f.message.contains("smartmigd will not run it") && f.message.contains("requeued jobs resume"),
            "{}",
            f.message
        );
        let f = check("requeued = \"resume\"\n", false);
        assert_eq!(f.status, Status::Ok, "{}", f.message);
        // A policy validated with padding records, at a site without them.
        let f = check("requeued = \"resume\"\n", true);
        assert_eq!(f.status, Status::Fail, "{}", f.message);
        assert!(f.message.contains("padding = false"), "{}", f.message);
        let f = check("requeued = \"resume\"\npadding = true\n", true);
        assert_eq!(f.status, Status::Ok, "{}", f.message);
        // Validated where jobs restart with a requeue limit the site does not keep.
        let f = check_limited("", false, Some(60.0));
        assert_eq!(f.status, Status::Fail, "{}", f.message);
        assert!(f.message.contains("requeue_max_run_s = 60 s"), "{}", f.message);
        let f = check_limited("requeue_max_run_s = 60\n", false, Some(60.0));
        assert_eq!(f.status, Status::Ok, "{}", f.message);
    }

    #[test]
    fn a_periodic_schedule_searched_under_other_rules_is_a_warning_naming_both() {
        let check = |central: &str| {
            let text = format!(
                "version = 1\n[policy]\nkind = \"periodic\"\n\
                 periodic_tuned_under = \"mode = drain, padding = false, min_relayout_interval_s = 600, persist_cycles = 2, max_nodes_per_batch = 4\"\n\
                 [[policy.periodic]]\nat = \"00:00\"\nlayout = [\"c1\"]\n\
                 [controller]\nmode = \"drain\"\n[controller.central]\n{central}"
            );
            let r = smartmig_core::config::Config::parse(&text, "smartmig.toml")
                .unwrap()
                .resolve(None)
                .unwrap();
            check_onnx(&r)
        };
        let f = check("min_relayout_interval_s = 600\npersist_cycles = 2\nmax_nodes_per_batch = 4\n");
        assert_eq!(f.status, Status::Skip, "{}", f.message);
        let f = check(
            "min_relayout_interval_s = 600\npersist_cycles = 2\nmax_nodes_per_batch = 4\npadding = true\n",
        );
        assert_eq!(f.status, Status::Warn, "{}", f.message);
        assert!(
            f.message.contains("padding = false") && f.message.contains("padding = true"),
            "{}",
            f.message
        );
    }

    /// Issue 17: the onnx check found ONNX Runtime in root's ~/.cache, which the central
    /// unit cannot see.
    #[test]
    fn a_runtime_in_a_home_directory_is_refused_for_the_daemon() {
        let e = service_runtime(Some(Path::new(
            "/root/.cache/smartmig/onnxruntime/1.32.0/libonnxruntime.so",
        )))
        .unwrap_err();
        assert!(e.contains("ProtectHome=yes"), "{e}");
        let e = service_runtime(Some(Path::new("/nonexistent/libonnxruntime.so"))).unwrap_err();
        assert!(e.contains("no such file"), "{e}");
    }
}
