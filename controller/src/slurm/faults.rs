//! Faults a test injects into smartmigd's Slurm calls (the central role's, and a node
//! agent's channel), in debug builds only: the real harness's way to make slurmctld refuse
//! an update or lose a reply on cue, which a real slurmctld cannot be made to do.
//! `SMARTMIGD_SLURM_FAULTS` names a JSON list of [`SlurmFault`]s; release builds ignore it
//! (with a warning).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{JobUpdate, NodeUpdate, SlurmApi, SlurmError, SlurmJob, SlurmNode};

/// The environment variable naming the faults file.
pub const FAULTS_ENV: &str = "SMARTMIGD_SLURM_FAULTS";

/// One fault: which calls it hits and how.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmFault {
    /// The call: `update_node`, `update_job`, `requeue`, `reconfigure` or `ping`.
    pub call: String,
    /// `update_node` only: calls on this node.
    #[serde(default)]
    pub node: Option<String>,
    /// `update_node` only: resumes (true) or anything else (false).
    #[serde(default)]
    pub resume: Option<bool>,
    /// `update_node` only: drains whose reason starts with this.
    #[serde(default)]
    pub drain_reason: Option<String>,
    /// `update_node` only: updates that write the node's `Extra` (a plan hand-off).
    #[serde(default)]
    pub extra: Option<bool>,
    /// Matching calls to let through before failing.
    #[serde(default)]
    pub skip: u32,
    /// Matching calls that fail after the skipped ones.
    #[serde(default = "one")]
    pub times: u32,
    /// The call reaches slurmctld and takes effect; only its reply is lost.
    #[serde(default)]
    pub reply_lost: bool,
    /// Not a failure: the call waits, after creating `<pause>.reached`, until a file
    /// `pause` exists (at most [`PAUSE_LIMIT`]), then goes through, or meets a failure
    /// fault whose window it is in too: a test's window to act between smartmigd's
    /// decision and the call.
    #[serde(default)]
    pub pause: Option<PathBuf>,
}

/// The longest a `pause` fault holds its call.
pub const PAUSE_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

fn one() -> u32 {
    1
}

/// What a call is, for matching.
struct Call<'a> {
    name: &'static str,
    node: Option<&'a NodeUpdate>,
}

impl SlurmFault {
    fn matches(&self, call: &Call<'_>) -> bool {
        if self.call != call.name {
            return false;
        }
        let Some(u) = call.node else {
            return self.node.is_none()
                && self.resume.is_none()
                && self.drain_reason.is_none()
                && self.extra.is_none();
        };
        self.node.as_ref().is_none_or(|n| *n == u.node)
            && self.resume.is_none_or(|r| r == u.resume)
            && self
                .drain_reason
                .as_ref()
                .is_none_or(|p| u.drain.as_deref().is_some_and(|d| d.starts_with(p.as_str())))
            && self.extra.is_none_or(|x| x == u.extra.is_some())
    }
}

/// A [`SlurmApi`] whose calls fail as its faults say.
pub struct Faulty {
    inner: Box<dyn SlurmApi>,
    /// Each fault with the number of calls it matched so far.
    faults: Vec<(SlurmFault, u32)>,
}

impl Faulty {
    /// `inner` with `faults`.
    pub fn new(inner: Box<dyn SlurmApi>, faults: Vec<SlurmFault>) -> Faulty {
        Faulty {
            inner,
            faults: faults.into_iter().map(|f| (f, 0)).collect(),
        }
    }

    /// What `call` meets now: every matching fault counts the call; the first pause whose
    /// window (after `skip`, for `times`) it falls in holds it, then the first failure
    /// whose window it falls in applies.
    fn faults_met(&mut self, call: &Call<'_>) -> (Option<PathBuf>, Option<SlurmFault>) {
        let (mut pause, mut failure) = (None, None);
        for (f, seen) in self.faults.iter_mut().filter(|(f, _)| f.matches(call)) {
            *seen += 1;
            if *seen <= f.skip || *seen > f.skip + f.times {
                continue;
            }
            match &f.pause {
                Some(gate) => {
                    pause.get_or_insert_with(|| gate.clone());
                }
                None => {
                    failure.get_or_insert_with(|| f.clone());
                }
            }
        }
        (pause, failure)
    }

    /// Runs `run` as `call` under the faults.
    fn run<T>(
        &mut self,
        call: Call<'_>,
        what: String,
        run: impl FnOnce(&mut dyn SlurmApi) -> Result<T, SlurmError>,
    ) -> Result<T, SlurmError> {
        let (pause, failure) = self.faults_met(&call);
        if let Some(gate) = pause {
            wait_for_gate(&gate, &what);
        }
        let Some(f) = failure else {
            return run(self.inner.as_mut());
        };
        let (errno, message) = if f.reply_lost {
            run(self.inner.as_mut())?;
            // SLURM_COMMUNICATIONS_RECEIVE_ERROR: sent, no answer.
            (
                1002,
                "Communication receive failure (injected: the call took effect)",
            )
        } else {
            // ESLURM_INVALID_NODE_STATE-like: slurmctld answered no.
            (2001, "refused (injected)")
        };
        log::warn!("{FAULTS_ENV}: {what} fails: {message}");
        Err(SlurmError::Call {
            call: what,
            errno,
            message: message.to_string(),
        })
    }
}

/// Holds call `what`: creates `<gate>.reached`, then waits until `gate` exists (at most
/// [`PAUSE_LIMIT`]).
fn wait_for_gate(gate: &Path, what: &str) {
    let mut reached = gate.to_path_buf().into_os_string();
    reached.push(".reached");
    if let Err(e) = std::fs::write(&reached, "") {
        log::warn!("{FAULTS_ENV}: {}: {e}", Path::new(&reached).display());
    }
    log::warn!("{FAULTS_ENV}: {what} waits for {}", gate.display());
    crate::command::poll_until(PAUSE_LIMIT, std::time::Duration::from_millis(50), || {
        gate.exists().then_some(())
    });
}

/// `api`, wrapped in the faults `$SMARTMIGD_SLURM_FAULTS` names (debug builds); `api`
/// itself when the variable is unset or in a release build.
pub fn from_env(api: Box<dyn SlurmApi>) -> Result<Box<dyn SlurmApi>, String> {
    let Some(path) = std::env::var_os(FAULTS_ENV) else {
        return Ok(api);
    };
    if !cfg!(debug_assertions) {
        log::warn!("{FAULTS_ENV} is set; ignored: a release build injects no faults");
        return Ok(api);
    }
    let faults = read(Path::new(&path))?;
    log::warn!(
        "{FAULTS_ENV}: {} fault(s) from {}",
        faults.len(),
        Path::new(&path).display()
    );
    Ok(Box::new(Faulty::new(api, faults)))
}

/// The faults of file `path`.
fn read(path: &Path) -> Result<Vec<SlurmFault>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{FAULTS_ENV}={}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{FAULTS_ENV}={}: {e}", path.display()))
}

impl SlurmApi for Faulty {
    fn jobs(&mut self) -> Result<Vec<SlurmJob>, SlurmError> {
        self.inner.jobs()
    }
    fn nodes(&mut self) -> Result<Vec<SlurmNode>, SlurmError> {
        self.inner.nodes()
    }
    fn node(&mut self, name: &str) -> Result<Option<SlurmNode>, SlurmError> {
        self.inner.node(name)
    }
    fn slurmd_timeout(&mut self) -> Result<u32, SlurmError> {
        self.inner.slurmd_timeout()
    }
    fn update_node(&mut self, update: &NodeUpdate) -> Result<(), SlurmError> {
        let call = Call {
            name: "update_node",
            node: Some(update),
        };
        let what = format!("slurm_update_node({})", update.node);
        self.run(call, what, |api| api.update_node(update))
    }
    fn update_job(&mut self, update: &JobUpdate) -> Result<(), SlurmError> {
        let call = Call {
            name: "update_job",
            node: None,
        };
        let what = format!("slurm_update_job({})", update.job);
        self.run(call, what, |api| api.update_job(update))
    }
    fn requeue(&mut self, job: u32) -> Result<(), SlurmError> {
        let call = Call {
            name: "requeue",
            node: None,
        };
        self.run(call, format!("slurm_requeue({job})"), |api| api.requeue(job))
    }
    fn ping(&mut self) -> Result<(), SlurmError> {
        let call = Call {
            name: "ping",
            node: None,
        };
        self.run(call, "slurm_ping".to_string(), |api| api.ping())
    }
    fn reconfigure(&mut self) -> Result<(), SlurmError> {
        let call = Call {
            name: "reconfigure",
            node: None,
        };
        self.run(call, "slurm_reconfigure".to_string(), |api| api.reconfigure())
    }
    fn as_any(&mut self) -> &mut dyn std::any::Any {
        self.inner.as_any()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::central::fake::FakeSlurm;

    fn resume(node: &str) -> NodeUpdate {
        NodeUpdate {
            node: node.into(),
            resume: true,
            ..NodeUpdate::default()
        }
    }

    #[test]
    fn a_fault_hits_only_its_calls_after_the_skipped_ones_and_a_lost_reply_still_takes_effect() {
        let faults: Vec<SlurmFault> = serde_json::from_str(
            r#"[{"call": "update_node", "node": "b", "resume": true, "skip": 1, "times": 1},
                {"call": "update_node", "node": "c", "reply_lost": true}]"#,
        )
        .unwrap();
        let slurm = FakeSlurm {
            nodes: ["a", "b", "c"].map(|n| FakeSlurm::node(n, &[])).to_vec(),
            ..FakeSlurm::default()
        };
        let mut api = Faulty::new(Box::new(slurm), faults);
        let fake = |api: &mut Faulty| {
            api.as_any()
                .downcast_mut::<FakeSlurm>()
                .unwrap()
                .node_updates
                .len()
        };
        // Another node, and a drain of b: through.
        api.update_node(&resume("a")).unwrap();
        let drain_b = NodeUpdate {
            node: "b".into(),
            drain: Some("x".into()),
            ..NodeUpdate::default()
        };
        api.update_node(&drain_b).unwrap();
        assert_eq!(fake(&mut api), 2);
        // b's first resume passes, the second fails without reaching Slurm, the third passes.
        api.update_node(&resume("b")).unwrap();
        let e = api.update_node(&resume("b")).unwrap_err();
        assert!(!e.may_have_taken_effect(), "{e}");
        api.update_node(&resume("b")).unwrap();
        assert_eq!(fake(&mut api), 4);
        // c's reply is lost: the update is in Slurm, the caller sees an error it must
        // treat as "may have taken effect".
        let e = api.update_node(&resume("c")).unwrap_err();
        assert!(e.may_have_taken_effect(), "{e}");
        assert_eq!(fake(&mut api), 5);
    }

    #[test]
    fn faults_of_one_call_apply_in_turn() {
        // The first reconfigure is refused, the second loses its reply, the third passes.
        let faults: Vec<SlurmFault> = serde_json::from_str(
            r#"[{"call": "reconfigure"}, {"call": "reconfigure", "skip": 1, "reply_lost": true}]"#,
        )
        .unwrap();
        let mut api = Faulty::new(Box::new(FakeSlurm::default()), faults);
        let first = api.reconfigure().unwrap_err();
        let second = api.reconfigure().unwrap_err();
        assert!(!first.may_have_taken_effect() && second.may_have_taken_effect());
        api.reconfigure().unwrap();
    }

    #[test]
    fn a_paused_call_then_meets_a_failure_whose_window_it_is_in() {
        // The first reconfigure waits for the gate, then is refused; the second passes.
        let dir = tempfile::tempdir().unwrap();
        let gate = dir.path().join("gate");
        std::fs::write(&gate, "").unwrap();
        let faults: Vec<SlurmFault> = serde_json::from_str(&format!(
            r#"[{{"call": "reconfigure", "pause": "{}"}}, {{"call": "reconfigure"}}]"#,
            gate.display()
        ))
        .unwrap();
        let mut api = Faulty::new(Box::new(FakeSlurm::default()), faults);
        let e = api.reconfigure().unwrap_err();
        assert!(!e.may_have_taken_effect(), "{e}");
        assert!(dir.path().join("gate.reached").exists());
        api.reconfigure().unwrap();
        let fake = api.as_any().downcast_mut::<FakeSlurm>().unwrap();
        assert_eq!(fake.reconfigures, 1, "the refused call never reached Slurm");
    }

    #[test]
    fn a_faults_file_that_does_not_parse_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("faults.json");
        std::fs::write(&path, r#"[{"call": "update_node", "nodes": "b"}]"#).unwrap();
        let e = read(&path).unwrap_err();
        assert!(e.contains("faults.json") && e.contains("nodes"), "{e}");
    }
}
