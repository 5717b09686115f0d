//! The watcher thread: re-reads smartmig.toml and the controller snapshot once a second
//! and publishes what it read (`state::publish`), so that no entry point called under
//! slurmctld's job lock touches a file.
//!
//! Started by `init`, stopped by `fini`. slurmctld unloads the library right after
//! `fini`, so `fini` waits for the thread; but a read on a hung file system may never
//! return, and slurmctld's reconfigure must not hang on it. After [`STOP_WAIT`] the thread
//! is left behind: the library is linked `-z nodelete` (build.rs), so its code stays
//! mapped, and a thread that was told to stop publishes nothing when its read returns.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::state::{self, LogLine, Plugin};

/// How often the files are checked.
pub const PERIOD: Duration = Duration::from_secs(1);

/// How long `fini` waits for a read in progress before leaving the thread behind.
pub const STOP_WAIT: Duration = Duration::from_secs(3);

/// A running watcher.
pub struct Watcher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    /// Disconnected when the thread ends.
    ended: mpsc::Receiver<()>,
    handle: JoinHandle<()>,
}

/// How a watcher stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Stopped {
    /// The thread ended and was joined.
    Joined,
    /// The thread was still in a read after [`STOP_WAIT`]: it will end when the read
    /// returns, publishing nothing.
    LeftBehind,
}

fn stopped(flag: &Mutex<bool>) -> MutexGuard<'_, bool> {
    flag.lock().unwrap_or_else(|e| e.into_inner())
}

impl Watcher {
    /// Starts watching `plugin`'s files, publishing after every step and handing each
    /// log line to `log`.
    pub fn spawn(mut plugin: Plugin, log: fn(LogLine)) -> std::io::Result<Watcher> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = Arc::clone(&stop);
        let (alive, ended) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("smartmig-watch".into())
            .spawn(move || {
                let _alive = alive;
                let (lock, wake) = &*flag;
                loop {
                    // A stop set while the thread read or logged is seen at once.
                    let (done, _) = wake
                        .wait_timeout_while(stopped(lock), PERIOD, |done| !*done)
                        .unwrap_or_else(|e| e.into_inner());
                    if *done {
                        return;
                    }
                    // Unlocked while reading files: `stop` must never wait on a read.
                    drop(done);
                    let step = catch_unwind(AssertUnwindSafe(|| plugin.tick(state::unix_now())));
                    // Published under the flag's lock, so that nothing is published after
                    // `stop` has set it: a later `init`'s view is never overwritten.
                    let done = stopped(lock);
                    if *done {
                        return;
                    }
                    state::publish(Some(plugin.view()));
                    drop(done);
                    match step {
                        Ok(lines) => lines.into_iter().for_each(log),
                        Err(_) => log(LogLine::Error(
                            "internal error (panic) while re-reading smartmig.toml or the snapshot; \
                             routing keeps the last state read"
                                .into(),
                        )),
                    }
                }
            })?;
        Ok(Watcher { stop, ended, handle })
    }

    /// Tells the thread to stop and waits for it, at most [`STOP_WAIT`].
    pub fn stop(self) -> Stopped {
        let (lock, wake) = &*self.stop;
        *stopped(lock) = true;
        wake.notify_all();
        match self.ended.recv_timeout(STOP_WAIT) {
            Err(RecvTimeoutError::Timeout) => Stopped::LeftBehind,
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                // A panic is caught inside each step; the thread's own end cannot fail.
                let _ = self.handle.join();
                Stopped::Joined
            }
        }
    }
}

static WATCHER: Mutex<Option<Watcher>> = Mutex::new(None);

/// Starts the watcher (stopping one left running), keeping it for [`stop_running`].
pub fn start(plugin: Plugin, log: fn(LogLine)) -> std::io::Result<()> {
    stop_running();
    let w = Watcher::spawn(plugin, log)?;
    *WATCHER.lock().unwrap_or_else(|e| e.into_inner()) = Some(w);
    Ok(())
}

/// Stops the watcher started by [`start`], if any.
pub fn stop_running() -> Option<Stopped> {
    let w = WATCHER.lock().unwrap_or_else(|e| e.into_inner()).take();
    w.map(Watcher::stop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::View;
    use std::path::Path;
    use std::time::Instant;

    static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

    fn collect(line: LogLine) {
        LINES.lock().unwrap().push(line.into_parts().1);
    }

    fn route_untyped() -> Option<bool> {
        match state::view().as_deref() {
            Some(View::Ready { router, .. }) => Some(router.config().route_untyped),
            _ => None,
        }
    }

    fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(start.elapsed() < Duration::from_secs(20), "never: {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The published view follows the files without any entry point reading them, and
    /// after `stop` nothing is published any more.
    #[test]
    fn the_watcher_publishes_a_changed_config_and_snapshot_and_stops_when_told() {
        let _serial = state::TEST_SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let d = std::env::temp_dir().join(format!("smartmig-watch-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let cfg = d.join("smartmig.toml");
        let snap = d.join("snapshot.json");
        let toml = |extra: &str| {
            format!(
                "version = 1\n[controller]\nsnapshot_path = {:?}\n[routing]\n{extra}",
                snap.display()
            )
        };
        std::fs::write(&cfg, toml("")).unwrap();
        let (plugin, _) = Plugin::start(Some(cfg.clone()), Path::new("/nonexistent").into());
        state::publish(Some(plugin.view()));
        start(plugin, collect).unwrap();
        assert_eq!(route_untyped(), Some(false));

        std::fs::write(&cfg, toml("route_untyped = true\n")).unwrap();
        wait_for("the changed config published", || route_untyped() == Some(true));
        let now = state::unix_now();
        std::fs::write(
            &snap,
            format!(r#"{{"version":1,"generated_at":{now},"soon_free_within_s":60,"queue_pressure":2,"types":{{}}}}"#),
        )
        .unwrap();
        wait_for(
            "the snapshot published",
            || matches!(state::view().as_deref(), Some(View::Ready { snapshot: Some(s), .. }) if s.queue_pressure == 2.0),
        );
        // Logged after the view is published.
        wait_for("the reload and the snapshot logged", || {
            let lines = LINES.lock().unwrap();
            lines.iter().any(|l| l.starts_with("reloaded"))
                && lines.iter().any(|l| l == "snapshot usable again")
        });

        stop_running();
        state::publish(None);
        std::fs::write(&cfg, toml("route_untyped = false\n")).unwrap();
        std::thread::sleep(PERIOD * 2);
        assert!(state::view().is_none(), "a stopped watcher publishes nothing");
        std::fs::remove_dir_all(&d).ok();
    }

    /// A snapshot read that blocks (here a FIFO with a writer that writes nothing, as a
    /// hung file system would) holds up neither the entry points nor `fini` for more than
    /// [`STOP_WAIT`], and the thread left behind publishes nothing when the read returns.
    #[test]
    fn a_read_that_never_returns_is_left_behind_and_publishes_nothing_after_it_returns() {
        use std::os::unix::fs::OpenOptionsExt;
        let _serial = state::TEST_SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let d = std::env::temp_dir().join(format!("smartmig-watch-hung-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let cfg = d.join("smartmig.toml");
        let fifo = d.join("snapshot.json");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        std::fs::write(
            &cfg,
            format!(
                "version = 1\n[controller]\nsnapshot_path = {:?}\n",
                fifo.display()
            ),
        )
        .unwrap();
        let (plugin, _) = Plugin::start(Some(cfg.clone()), Path::new("/nonexistent").into());
        state::publish(Some(plugin.view()));
        start(plugin, collect).unwrap();
        // A writer opens only once the thread has opened the FIFO to read; then, with no
        // data and the writer kept open, the thread's read blocks.
        let start = Instant::now();
        let writer = loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo)
            {
                Ok(w) => break w,
                Err(e) => {
                    assert!(
                        start.elapsed() < Duration::from_secs(20),
                        "the thread never read: {e}"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        assert!(state::view().is_some(), "routing goes on with the last view");
        assert_eq!(stop_running(), Some(Stopped::LeftBehind));
        state::publish(None);
        // The read returns (end of file): the thread ends without publishing.
        drop(writer);
        std::thread::sleep(PERIOD * 2);
        assert!(state::view().is_none(), "the thread left behind published");
        std::fs::remove_dir_all(&d).ok();
    }
}
