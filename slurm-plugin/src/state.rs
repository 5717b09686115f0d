//! Plugin state: the router built from smartmig.toml and the snapshot cache. Set by
//! `init`, taken by `fini`, held in one mutex (slurmctld calls job_submit under its job
//! lock, so the mutex is uncontended; it is there to make the state safe, not fast).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use smartmig_core::config::{Config, DEFAULT_PATH};
use smartmig_core::routing::{OnError, Router, Snapshot, MAX_SNAPSHOT_BYTES};

/// The snapshot is read again at most this often.
pub const SNAPSHOT_REREAD: Duration = Duration::from_secs(1);

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
    /// Routing built from it.
    pub router: Router,
    /// Snapshot file.
    pub snapshot_path: PathBuf,
    /// Cached snapshot.
    pub snapshot: SnapshotCache,
}

/// The last snapshot read and when; problems are logged once until they change.
#[derive(Default)]
pub struct SnapshotCache {
    last_read: Option<Instant>,
    current: Option<Snapshot>,
    last_problem: Option<String>,
}

/// What a snapshot refresh found worth logging.
#[derive(Debug, PartialEq, Eq)]
pub enum SnapshotNews {
    /// Nothing new.
    Quiet,
    /// A new problem (missing, corrupt, stale): log once.
    Problem(String),
    /// Usable again after a problem.
    Recovered,
}

impl SnapshotCache {
    /// The snapshot to use at `now_unix`, re-reading the file if a second has passed.
    pub fn get(
        &mut self,
        path: &Path,
        max_age_s: f64,
        now: Instant,
        now_unix: f64,
    ) -> (Option<&Snapshot>, SnapshotNews) {
        if self
            .last_read
            .is_none_or(|t| now.duration_since(t) >= SNAPSHOT_REREAD)
        {
            self.last_read = Some(now);
            self.current = None;
            match read_snapshot(path) {
                Ok(s) => self.current = Some(s),
                Err(problem) => return (None, self.note(Some(problem))),
            }
        }
        let problem = match &self.current {
            None => return (None, SnapshotNews::Quiet),
            Some(s) if !s.is_fresh(now_unix, max_age_s) => Some(format!(
                "snapshot {} is stale ({:.0} s old, limit {max_age_s} s)",
                path.display(),
                s.age_s(now_unix)
            )),
            Some(_) => None,
        };
        let stale = problem.is_some();
        let news = self.note(problem);
        (if stale { None } else { self.current.as_ref() }, news)
    }

    fn note(&mut self, problem: Option<String>) -> SnapshotNews {
        // Compare problem kinds without numbers so a stale file ageing by a second is not
        // news every second.
        let kind = |p: &str| p.chars().filter(|c| !c.is_ascii_digit()).collect::<String>();
        match (problem, &self.last_problem) {
            (None, None) => SnapshotNews::Quiet,
            (None, Some(_)) => {
                self.last_problem = None;
                SnapshotNews::Recovered
            }
            (Some(p), Some(old)) if kind(&p) == kind(old) => SnapshotNews::Quiet,
            (Some(p), _) => {
                self.last_problem = Some(p.clone());
                SnapshotNews::Problem(p)
            }
        }
    }
}

fn read_snapshot(path: &Path) -> Result<Snapshot, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("snapshot {}: {e}", path.display()))?;
    if meta.len() > MAX_SNAPSHOT_BYTES as u64 {
        return Err(format!(
            "snapshot {}: {} bytes is too large",
            path.display(),
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("snapshot {}: {e}", path.display()))?;
    Snapshot::parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// The state, even if an earlier holder panicked (the state stays consistent: every
/// update replaces it whole).
pub fn lock() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Now as Unix seconds.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Loads the config at `path` into a ready state.
pub fn load(path: &Path) -> Result<Ready, String> {
    let cfg = Config::from_file(path).map_err(|e| e.to_string())?;
    let resolved = cfg.resolve(path.parent()).map_err(|e| e.to_string())?;
    let router = Router::from_resolved(&resolved).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Ready {
        config_path: path.to_path_buf(),
        router,
        snapshot_path: resolved.config.controller.snapshot_path.clone(),
        snapshot: SnapshotCache::default(),
    })
}

/// The config to read: beside slurm.conf if there is one there, else the default path.
pub fn config_path(beside_slurm_conf: Option<PathBuf>) -> PathBuf {
    match beside_slurm_conf {
        Some(p) if p.exists() => p,
        _ => PathBuf::from(DEFAULT_PATH),
    }
}

impl Ready {
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
    fn the_snapshot_is_reread_at_most_once_a_second() {
        let d = tmpdir("reread");
        let p = write(&d, "s.json", SNAP);
        let mut c = SnapshotCache::default();
        let t0 = Instant::now();
        assert!(c.get(&p, 120.0, t0, 1010.0).0.is_some());
        std::fs::write(&p, "garbage").unwrap();
        // Within the second the cached copy is used.
        assert!(c
            .get(&p, 120.0, t0 + Duration::from_millis(500), 1010.5)
            .0
            .is_some());
        let (s, news) = c.get(&p, 120.0, t0 + Duration::from_millis(1100), 1011.0);
        assert!(s.is_none());
        assert!(matches!(news, SnapshotNews::Problem(m) if m.contains("not valid")));
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn problems_are_news_once_and_recovery_is_news() {
        let d = tmpdir("news");
        let p = d.join("missing.json");
        let mut c = SnapshotCache::default();
        let t0 = Instant::now();
        let sec = |n: u64| t0 + Duration::from_secs(n);
        assert!(matches!(
            c.get(&p, 120.0, sec(0), 1000.0).1,
            SnapshotNews::Problem(_)
        ));
        assert_eq!(c.get(&p, 120.0, sec(2), 1000.0).1, SnapshotNews::Quiet);
        write(&d, "missing.json", SNAP);
        let (s, news) = c.get(&p, 120.0, sec(4), 1010.0);
        assert!(s.is_some());
        assert_eq!(news, SnapshotNews::Recovered);
        // Stale: a problem once, then quiet while it ages.
        assert!(
            matches!(c.get(&p, 120.0, sec(6), 1500.0).1, SnapshotNews::Problem(m) if m.contains("stale"))
        );
        let (s, news) = c.get(&p, 120.0, sec(8), 1501.0);
        assert!(s.is_none());
        assert_eq!(news, SnapshotNews::Quiet);
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
