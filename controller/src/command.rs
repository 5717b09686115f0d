//! Running the admin's commands (stop or start slurmd, restart slurmctld) with a time
//! limit, and waiting for a condition: a hung command or daemon never stalls a loop.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wait_timeout::ChildExt as _;

/// A configured command that did not succeed.
#[derive(Debug, thiserror::Error)]
#[error("command `{command}` failed: {reason}")]
pub struct CommandError {
    /// The command line.
    pub command: String,
    /// Exit status and stderr, the spawn error, or the timeout.
    pub reason: String,
}

/// Runs `cmd` (program and arguments, no shell), killing it after `timeout`; a non-zero
/// exit is an error carrying the first lines of its stderr.
pub fn run(cmd: &[String], timeout: Duration) -> Result<(), CommandError> {
    let command = cmd.join(" ");
    let fail = |reason: String| CommandError {
        command: command.clone(),
        reason,
    };
    let (prog, args) = cmd.split_first().ok_or_else(|| fail("empty command".into()))?;
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(e.to_string()))?;
    let status = match child.wait_timeout(timeout).map_err(|e| fail(e.to_string()))? {
        Some(s) => s,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(fail(format!("no exit within {timeout:?}; killed")));
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let err: String = err.trim().chars().take(400).collect();
    Err(fail(if err.is_empty() {
        status.to_string()
    } else {
        format!("{status}: {err}")
    }))
}

/// Calls `ready` every `every` until it returns Some or `limit` has passed (None).
pub fn poll_until<T>(limit: Duration, every: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = ready() {
            return Some(v);
        }
        if start.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(every.min(limit.saturating_sub(start.elapsed())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        ["sh", "-c", script].map(String::from).to_vec()
    }

    #[test]
    fn a_failing_command_reports_its_stderr_and_a_hung_one_is_killed() {
        run(&sh("exit 0"), Duration::from_secs(5)).unwrap();
        let e = run(&sh("echo 'unit not found' >&2; exit 5"), Duration::from_secs(5)).unwrap_err();
        assert!(
            e.to_string().contains("unit not found") && e.to_string().contains("5"),
            "{e}"
        );
        let start = Instant::now();
        let e = run(&sh("sleep 30"), Duration::from_millis(300)).unwrap_err();
        assert!(e.reason.contains("killed"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(run(&[], Duration::from_secs(1))
            .unwrap_err()
            .reason
            .contains("empty"));
    }

    #[test]
    fn polling_stops_at_the_first_answer_or_the_limit() {
        let mut n = 0;
        assert_eq!(
            poll_until(Duration::from_secs(5), Duration::from_millis(1), || {
                n += 1;
                (n == 3).then_some(n)
            }),
            Some(3)
        );
        assert_eq!(
            poll_until(Duration::from_millis(20), Duration::from_millis(5), || None::<()>),
            None
        );
    }
}
