//! Plugin state: the router built from smartmig.toml and the snapshot cache, kept by the
//! watcher thread (`watch`), and the [`View`] of them that the entry points read.
//!
//! Slurm 22.05 calls `init`/`fini` on `scontrol reconfigure` only when `JobSubmitPlugins`
//! itself changed, so the plugin watches smartmig.toml (like job_submit/lua watches its
//! script): once a second it compares the file's mtime, size and inode with those it
//! loaded, and reloads on a change. A file that fails to load keeps the previous good
//! config (logged once); with none, `gpu:mig` requests are refused with the reason. The
//! same check notices a smartmig.toml created beside slurm.conf after slurmctld started:
//! the file beside slurm.conf wins over the default path whenever it exists.
//!
//! The files are read off slurmctld's job lock: job_submit only clones the last
//! published view (one uncontended mutex), so a slow or hung file system delays the
//! watcher, never a submission.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use smartmig_core::config::{Config, DEFAULT_PATH};
use smartmig_core::routing::{OnError, Router, Snapshot, MAX_SNAPSHOT_BYTES};

/// The config file name looked for beside slurm.conf.
pub const CONFIG_NAME: &str = "smartmig.toml";

/// Loaded state.
pub enum State {
    /// A usable config.
    Ready(Box<Ready>),
    /// The config could not be loaded: why (GPU routing requests are refused with it).
    Broken(String),
}

/// State with a valid config.
pub struct Ready {
    /// The config file read.
    pub config_path: PathBuf,
    /// Routing built from it (shared with the published view).
    pub router: Arc<Router>,
    /// Snapshot file.
    pub snapshot_path: PathBuf,
    /// Cached snapshot.
    pub snapshot: SnapshotCache,
}

/// The last snapshot read; problems are logged once until they change.
#[derive(Default)]
pub struct SnapshotCache {
    /// The file version `current` was parsed from: an unchanged file is not parsed again.
    stamp: Option<Stamp>,
    current: Option<Arc<Snapshot>>,
    last_problem: Option<SnapshotProblem>,
    /// Files parsed so far.
    parses: u64,
}

/// Why the snapshot cannot be used (routing then follows the static rule).
#[derive(Debug, Clone, PartialEq)]
pub enum SnapshotProblem {
    /// The file cannot be read (missing, no permission).
    Unreadable {
        /// The snapshot file.
        path: PathBuf,
        /// The I/O error.
        error: String,
    },
    /// Larger than any snapshot the controller writes.
    TooLarge {
        /// The snapshot file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// Not a snapshot.
    Invalid {
        /// The snapshot file.
        path: PathBuf,
        /// What is wrong with it.
        error: String,
    },
    /// Older than `routing.snapshot_max_age_s`.
    Stale {
        /// The snapshot file.
        path: PathBuf,
        /// Its age, seconds.
        age_s: f64,
        /// The limit, seconds.
        limit_s: f64,
    },
}

impl std::fmt::Display for SnapshotProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SnapshotProblem::Unreadable { path, error } => write!(f, "snapshot {}: {error}", path.display()),
            SnapshotProblem::TooLarge { path, bytes } => {
                write!(f, "snapshot {}: {bytes} bytes is too large", path.display())
            }
            SnapshotProblem::Invalid { path, error } => write!(f, "{}: {error}", path.display()),
            SnapshotProblem::Stale { path, age_s, limit_s } => write!(
                f,
                "snapshot {} is stale ({age_s:.0} s old, limit {limit_s} s)",
                path.display()
            ),
        }
    }
}

impl SnapshotProblem {
    /// Whether `other` is the same problem, as far as the log is concerned: a stale file
    /// ageing by a second is no news.
    fn same_as(&self, other: &SnapshotProblem) -> bool {
        match (self, other) {
            (SnapshotProblem::Stale { path: a, .. }, SnapshotProblem::Stale { path: b, .. }) => a == b,
            _ => self == other,
        }
    }
}

/// What a snapshot refresh found worth logging.
#[derive(Debug, PartialEq)]
pub enum SnapshotNews {
    /// Nothing new.
    Quiet,
    /// A new problem (missing, corrupt, stale): log once.
    Problem(SnapshotProblem),
    /// Usable again after a problem.
    Recovered,
}

impl SnapshotCache {
    /// The snapshot to use at `now_unix`, the file parsed again if it changed.
    pub fn get(
        &mut self,
        path: &Path,
        max_age_s: f64,
        now_unix: f64,
    ) -> (Option<&Arc<Snapshot>>, SnapshotNews) {
        let current = stamp(path);
        if current.is_none() || current != self.stamp || self.current.is_none() {
            self.stamp = current;
            self.current = None;
            self.parses += 1;
            match read_snapshot(path) {
                Ok(s) => self.current = Some(Arc::new(s)),
                Err(problem) => return (None, self.note(Some(problem))),
            }
        }
        let problem = match &self.current {
            None => return (None, SnapshotNews::Quiet),
            Some(s) if !s.is_fresh(now_unix, max_age_s) => Some(SnapshotProblem::Stale {
                path: path.to_path_buf(),
                age_s: s.age_s(now_unix),
                limit_s: max_age_s,
            }),
            Some(_) => None,
        };
        let stale = problem.is_some();
        let news = self.note(problem);
        (if stale { None } else { self.current.as_ref() }, news)
    }

    fn note(&mut self, problem: Option<SnapshotProblem>) -> SnapshotNews {
        match (problem, &self.last_problem) {
            (None, None) => SnapshotNews::Quiet,
            (None, Some(_)) => {
                self.last_problem = None;
                SnapshotNews::Recovered
            }
            (Some(p), Some(old)) if p.same_as(old) => SnapshotNews::Quiet,
            (Some(p), _) => {
                self.last_problem = Some(p.clone());
                SnapshotNews::Problem(p)
            }
        }
    }
}

fn read_snapshot(path: &Path) -> Result<Snapshot, SnapshotProblem> {
    let unreadable = |e: std::io::Error| SnapshotProblem::Unreadable {
        path: path.to_path_buf(),
        error: e.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    if meta.len() > MAX_SNAPSHOT_BYTES as u64 {
        return Err(SnapshotProblem::TooLarge {
            path: path.to_path_buf(),
            bytes: meta.len(),
        });
    }
    let bytes = std::fs::read(path).map_err(unreadable)?;
    Snapshot::parse(&bytes).map_err(|e| SnapshotProblem::Invalid {
        path: path.to_path_buf(),
        error: e.to_string(),
    })
}

/// What identifies one version of a file (the config, the snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    mtime: Option<SystemTime>,
    len: u64,
    ino: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        mtime: m.modified().ok(),
        len: m.len(),
        ino: m.ino(),
    })
}

/// Everything the plugin keeps between calls.
pub struct Plugin {
    /// The config file watched: `beside` when it exists, else `default`.
    pub config_path: PathBuf,
    /// smartmig.toml beside slurm.conf, as slurmctld names it.
    beside: Option<PathBuf>,
    /// The path used when there is none beside slurm.conf.
    default: PathBuf,
    /// What was loaded from it.
    pub state: State,
    stamp: Option<Stamp>,
}

/// A log line the caller should write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogLine {
    /// News (a config loaded).
    Info(String),
    /// A fault the admin must see (a config that does not load).
    Error(String),
}

#[cfg(test)]
impl LogLine {
    /// (is an error, text).
    pub fn into_parts(self) -> (bool, String) {
        match self {
            LogLine::Info(t) => (false, t),
            LogLine::Error(t) => (true, t),
        }
    }
}

impl Plugin {
    /// Loads the config (at `init`): `beside` slurm.conf if it exists, else `default`.
    pub fn start(beside: Option<PathBuf>, default: PathBuf) -> (Plugin, LogLine) {
        let config_path = config_path(beside.clone(), &default);
        let stamp = stamp(&config_path);
        let (state, line) = match load(&config_path) {
            Ok(ready) => {
                let line = LogLine::Info(ready.describe());
                (State::Ready(Box::new(ready)), line)
            }
            Err(e) => (
                State::Broken(e.clone()),
                LogLine::Error(format!(
                    "config not loaded, gpu:mig requests will be refused: {e}"
                )),
            ),
        };
        let plugin = Plugin {
            config_path,
            beside,
            default,
            state,
            stamp,
        };
        (plugin, line)
    }

    /// Reloads the config if its file changed, or if the file to read changed (one
    /// appeared beside slurm.conf, or it went away).
    pub fn refresh(&mut self) -> Option<LogLine> {
        let path = config_path(self.beside.clone(), &self.default);
        if path != self.config_path {
            self.config_path = path;
            // A file not yet read: whatever its stamp, load it.
            self.stamp = None;
        }
        let current = stamp(&self.config_path);
        if current == self.stamp {
            return None;
        }
        self.stamp = current;
        match load(&self.config_path) {
            Ok(mut ready) => {
                // Keep the snapshot cache: the file it reads may be the same.
                if let State::Ready(old) = &mut self.state {
                    if old.snapshot_path == ready.snapshot_path {
                        ready.snapshot = std::mem::take(&mut old.snapshot);
                    }
                }
                let line = LogLine::Info(format!("re{}", ready.describe()));
                self.state = State::Ready(Box::new(ready));
                Some(line)
            }
            Err(e) => match &self.state {
                State::Ready(_) => Some(LogLine::Error(format!(
                    "changed config not loaded, keeping the previous one: {e}"
                ))),
                State::Broken(_) => {
                    self.state = State::Broken(e.clone());
                    Some(LogLine::Error(format!("config still not loaded: {e}")))
                }
            },
        }
    }
}

/// What the entry points route with: the watcher's latest state, replaced whole.
pub enum View {
    /// A usable config, and the last snapshot parsed (checked for age at each use).
    Ready {
        /// Routing built from the config.
        router: Arc<Router>,
        /// The snapshot as last read, fresh or not.
        snapshot: Option<Arc<Snapshot>>,
    },
    /// No usable config: why.
    Broken(String),
}

impl View {
    /// The failure policy: the config's, or fail-open without one.
    pub fn on_error(&self) -> OnError {
        match self {
            View::Ready { router, .. } => router.config().on_error,
            View::Broken(_) => OnError::Open,
        }
    }
}

impl Plugin {
    /// One watch step: reloads the config and re-reads the snapshot where their files
    /// changed; returns what to log.
    pub fn tick(&mut self, now_unix: f64) -> Vec<LogLine> {
        let mut lines: Vec<LogLine> = self.refresh().into_iter().collect();
        if let State::Ready(r) = &mut self.state {
            let max_age = r.router.config().snapshot_max_age_s;
            match r.snapshot.get(&r.snapshot_path, max_age, now_unix).1 {
                SnapshotNews::Quiet => {}
                SnapshotNews::Problem(p) => lines.push(LogLine::Info(format!(
                    "{p}; routing by the static rule until it is usable"
                ))),
                SnapshotNews::Recovered => lines.push(LogLine::Info("snapshot usable again".into())),
            }
        }
        lines
    }

    /// The view to publish for the entry points.
    pub fn view(&self) -> View {
        match &self.state {
            State::Ready(r) => View::Ready {
                router: Arc::clone(&r.router),
                snapshot: r.snapshot.current.clone(),
            },
            State::Broken(why) => View::Broken(why.clone()),
        }
    }
}

static VIEW: Mutex<Option<Arc<View>>> = Mutex::new(None);

/// Held by the tests that publish: they share one process-wide view.
#[cfg(test)]
pub static TEST_SERIAL: Mutex<()> = Mutex::new(());

fn view_slot() -> MutexGuard<'static, Option<Arc<View>>> {
    // Every update replaces the value whole: a panicked holder leaves it consistent.
    VIEW.lock().unwrap_or_else(|e| e.into_inner())
}

/// The published view (None before `init` and after `fini`). The lock is held only to
/// clone the `Arc`.
pub fn view() -> Option<Arc<View>> {
    view_slot().clone()
}

/// Replaces the published view.
pub fn publish(view: Option<View>) {
    let old = std::mem::replace(&mut *view_slot(), view.map(Arc::new));
    // Dropped outside the lock: the last reference may free a whole router.
    drop(old);
}

pub use smartmig_core::clock::unix_now;

/// Loads the config at `path` into a ready state.
pub fn load(path: &Path) -> Result<Ready, String> {
    let cfg = Config::from_file(path).map_err(|e| e.to_string())?;
    let resolved = cfg.resolve(path.parent()).map_err(|e| e.to_string())?;
    let router = Router::from_resolved(&resolved).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Ready {
        config_path: path.to_path_buf(),
        router: Arc::new(router),
        snapshot_path: resolved.config.controller.snapshot_path.clone(),
        snapshot: SnapshotCache::default(),
    })
}

/// The config to read: beside slurm.conf if there is one there, else `default`.
pub fn config_path(beside_slurm_conf: Option<PathBuf>, default: &Path) -> PathBuf {
    match beside_slurm_conf {
        Some(p) if p.exists() => p,
        _ => default.to_path_buf(),
    }
}

/// Where the config lives when there is none beside slurm.conf.
pub fn default_config_path() -> PathBuf {
    PathBuf::from(DEFAULT_PATH)
}

impl Ready {
    /// The log line for a successful load.
    pub fn describe(&self) -> String {
        format!(
            "loaded {} ({} candidate types, on_error={:?}, snapshot {})",
            self.config_path.display(),
            self.router.candidates().len(),
            self.on_error(),
            self.snapshot_path.display()
        )
    }

    /// The failure policy.
    pub fn on_error(&self) -> OnError {
        self.router.config().on_error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("smartmig-state-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    const SNAP: &str =
        r#"{"version":1,"generated_at":1000,"soon_free_within_s":60,"queue_pressure":0,"types":{}}"#;

    #[test]
    fn an_unchanged_snapshot_is_not_parsed_again_and_a_replaced_one_is() {
        let d = tmpdir("unchanged");
        let p = write(&d, "s.json", SNAP);
        let mut c = SnapshotCache::default();
        for _ in 0..5 {
            assert!(c.get(&p, 120.0, 1010.0).0.is_some());
        }
        assert_eq!(c.parses, 1, "one parse for five reads of an unchanged file");
        // The controller replaces the file atomically: a new inode.
        let tmp = write(
            &d,
            "s.json.tmp",
            &SNAP.replace("\"queue_pressure\":0", "\"queue_pressure\":3"),
        );
        std::fs::rename(&tmp, &p).unwrap();
        let (s, _) = c.get(&p, 120.0, 1010.0);
        assert!(
            s.is_some_and(|s| s.queue_pressure > 0.0),
            "the new snapshot is used"
        );
        assert_eq!(c.parses, 2);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn problems_are_news_once_and_recovery_is_news() {
        let d = tmpdir("news");
        let p = d.join("missing.json");
        let mut c = SnapshotCache::default();
        assert!(matches!(c.get(&p, 120.0, 1000.0).1, SnapshotNews::Problem(_)));
        assert_eq!(c.get(&p, 120.0, 1000.0).1, SnapshotNews::Quiet);
        write(&d, "missing.json", SNAP);
        let (s, news) = c.get(&p, 120.0, 1010.0);
        assert!(s.is_some());
        assert_eq!(news, SnapshotNews::Recovered);
        // Stale: a problem once, then quiet while it ages.
        assert!(
            matches!(c.get(&p, 120.0, 1500.0).1, SnapshotNews::Problem(m) if m.to_string().contains("stale"))
        );
        let (s, news) = c.get(&p, 120.0, 1501.0);
        assert!(s.is_none());
        assert_eq!(news, SnapshotNews::Quiet);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_changed_config_is_reloaded_and_a_broken_one_keeps_the_last_good() {
        let d = tmpdir("reload");
        let p = write(&d, "smartmig.toml", "version = 1\n");
        let (mut plugin, l) = Plugin::start(Some(p.clone()), d.join("absent.toml"));
        let (err, _) = l.into_parts();
        assert!(!err);
        let untyped = |pl: &Plugin| match &pl.state {
            State::Ready(r) => r.router.config().route_untyped,
            State::Broken(_) => panic!("broken"),
        };
        assert!(!untyped(&plugin));
        assert_eq!(plugin.refresh(), None, "unchanged file: nothing to do");
        write(
            &d,
            "smartmig.toml",
            "version = 1\n[routing]\nroute_untyped = true\n",
        );
        let (err, line) = plugin.refresh().expect("reloaded").into_parts();
        assert!(!err && line.starts_with("reloaded"), "{line}");
        assert!(untyped(&plugin));
        write(
            &d,
            "smartmig.toml",
            "version = 1\n[routing]\nroute_untypd = true\n",
        );
        let (err, line) = plugin.refresh().expect("reported").into_parts();
        assert!(
            err && line.contains("keeping the previous one") && line.contains("route_untypd"),
            "{line}"
        );
        assert!(untyped(&plugin));
        std::fs::remove_dir_all(&d).ok();
    }

    /// Issue 17: a smartmig.toml created beside slurm.conf after slurmctld started was
    /// ignored ("cannot read /etc/smartmig/smartmig.toml") until a restart.
    #[test]
    fn a_config_that_appears_beside_slurm_conf_is_picked_up() {
        let d = tmpdir("appears");
        let beside = d.join("smartmig.toml");
        let default = write(&d, "default.toml", "version = 1\n");
        let (mut plugin, l) = Plugin::start(Some(beside.clone()), default.clone());
        let (err, line) = l.into_parts();
        assert!(!err && line.contains("default.toml"), "{line}");
        write(
            &d,
            "smartmig.toml",
            "version = 1\n[routing]\nroute_untyped = true\n",
        );
        let (err, line) = plugin.refresh().expect("switched").into_parts();
        assert!(!err && line.contains(&beside.display().to_string()), "{line}");
        assert!(matches!(&plugin.state, State::Ready(r) if r.router.config().route_untyped));
        // Gone again: back to the default.
        std::fs::remove_file(&beside).unwrap();
        let (_, line) = plugin.refresh().expect("switched back").into_parts();
        assert!(line.contains("default.toml"), "{line}");
        // With neither file, the first to appear is read.
        let (mut plugin, l) = Plugin::start(Some(beside.clone()), d.join("absent.toml"));
        let (err, _) = l.into_parts();
        assert!(err && matches!(plugin.state, State::Broken(_)));
        write(&d, "smartmig.toml", "version = 1\n");
        let (err, line) = plugin.refresh().expect("loaded").into_parts();
        assert!(!err && line.starts_with("reloaded"), "{line}");
        assert!(matches!(plugin.state, State::Ready(_)));
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_bad_config_is_reported_with_file_and_key() {
        let d = tmpdir("cfg");
        let p = write(
            &d,
            "smartmig.toml",
            "version = 1\n[routing]\non_eror = \"open\"\n",
        );
        let e = load(&p).err().unwrap();
        assert!(e.contains("smartmig.toml:3") && e.contains("on_eror"), "{e}");
        let p = write(&d, "smartmig.toml", "version = 1\n");
        assert!(load(&p).is_ok());
        std::fs::remove_dir_all(&d).ok();
    }
}
