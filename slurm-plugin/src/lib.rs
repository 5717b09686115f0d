//! job_submit_smartmig: the Slurm job_submit plugin, a thin FFI shell over
//! `smartmig_core::routing`.
//!
//! slurmctld loads `job_submit_smartmig.so` (`JobSubmitPlugins=smartmig`), calls `init`
//! at start and after `scontrol reconfigure` (after `fini`), and `job_submit` /
//! `job_modify` under its job lock for every submission and update. Every entry point
//! catches panics (none may unwind into C), does bounded work without file I/O (a
//! watcher thread re-reads the files, `watch`), and logs through Slurm.

use std::ffi::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use smartmig_core::routing::{OnError, Outcome, RoutedFrom, TresField, AUTO_TYPE};

pub mod ffi;
pub mod state;
pub mod sys;
pub mod watch;

use ffi::{add_err_msg, log_error, log_info, JobDesc};
use state::View;
use sys::{job_desc_msg_t, job_record_t};

/// Plugin name shown by Slurm.
#[no_mangle]
pub static plugin_name: [u8; 41] = *b"smartmig: energy-aware MIG slice routing\0";

/// Plugin type: `job_submit/<name>`, so `JobSubmitPlugins=smartmig` finds it.
#[no_mangle]
pub static plugin_type: [u8; 20] = *b"job_submit/smartmig\0";

/// The Slurm release the plugin was built against (`SLURM_VERSION_NUMBER` of its headers);
/// slurmctld refuses to load the plugin into another release, logging both versions.
#[no_mangle]
pub static plugin_version: u32 = sys::SLURM_VERSION_NUMBER;

const SUCCESS: c_int = sys::SLURM_SUCCESS as c_int;
const ERROR: c_int = -1;
/// Returned for refused requests: sbatch prints our message, then Slurm's text for it.
const REFUSED: c_int = sys::ESLURM_INVALID_GRES as c_int;

/// Loads smartmig.toml (beside slurm.conf, else /etc/smartmig/smartmig.toml) and starts
/// the thread that re-reads it and the snapshot.
///
/// A bad config does not fail `init`: that would stop slurmctld, or after a plugin-list
/// change every submission. Instead the error is logged and only `gpu:mig` requests are
/// refused until the file is fixed (it is re-read when it changes).
#[no_mangle]
pub extern "C" fn init() -> c_int {
    let r = catch_unwind(|| {
        let beside = ffi::extra_conf_path(state::CONFIG_NAME);
        let (mut plugin, line) = state::Plugin::start(beside, state::default_config_path());
        log_info(concat!("built for Slurm ", env!("SLURM_BUILT_FOR")));
        log_line(line);
        // The snapshot too, before the first submission: from 23.11 every reconfigure
        // (a re-layout's among them) loads the plugin afresh, and a second of the static
        // rule after it could send jobs to a type the re-layout just removed.
        plugin.tick(state::unix_now()).into_iter().for_each(log_line);
        state::publish(Some(plugin.view()));
        if let Err(e) = watch::start(plugin, log_line) {
            log_error(&format!(
                "cannot start the watcher thread ({e}): smartmig.toml and the snapshot are not \
                 re-read until slurmctld restarts, and routing follows the static rule"
            ));
        }
        SUCCESS
    });
    r.unwrap_or(ERROR)
}

fn log_line(line: state::LogLine) {
    match line {
        state::LogLine::Error(text) => log_error(&text),
        state::LogLine::Info(text) => log_info(&text),
    }
}

/// Stops the watcher thread and drops the state (slurmctld unloads the library next, or
/// calls `init` again on reconfigure).
#[no_mangle]
pub extern "C" fn fini() -> c_int {
    catch_unwind(|| {
        if watch::stop_running() == Some(watch::Stopped::LeftBehind) {
            log_error(&format!(
                "the watcher thread is still reading smartmig.toml or the snapshot after {} s \
                 (a hung file system?); left to end when the read returns",
                watch::STOP_WAIT.as_secs()
            ));
        }
        state::publish(None);
        SUCCESS
    })
    .unwrap_or(ERROR)
}

/// Routes a new job. `err_msg` receives the info line or the refusal reason.
///
/// # Safety
/// Called by slurmctld with a valid descriptor and `err_msg` pointer.
#[no_mangle]
pub unsafe extern "C" fn job_submit(
    job_desc: *mut job_desc_msg_t,
    _submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    entry(job_desc, err_msg, Op::Submit)
}

/// Routes a job update (`scontrol update job ... Gres=gpu:mig:1`). Slurm 22.05 has no
/// message channel here: refusals reach the user as the error code only.
///
/// # Safety
/// Called by slurmctld with a valid descriptor.
#[cfg(not(slurm_job_modify_err_msg))]
#[no_mangle]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut job_desc_msg_t,
    _job_ptr: *mut job_record_t,
    _submit_uid: u32,
) -> c_int {
    entry(job_desc, std::ptr::null_mut(), Op::Modify)
}

/// Routes a job update; releases from 23.02 pass a message channel.
///
/// # Safety
/// Called by slurmctld with a valid descriptor and `err_msg` pointer.
#[cfg(slurm_job_modify_err_msg)]
#[no_mangle]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut job_desc_msg_t,
    _job_ptr: *mut job_record_t,
    _submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    entry(job_desc, err_msg, Op::Modify)
}

/// Which of slurmctld's calls a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `job_submit`: a new job.
    Submit,
    /// `job_modify`: an update of a job; the descriptor holds only the changed fields.
    Modify,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Op::Submit => "job_submit",
            Op::Modify => "job_modify",
        })
    }
}

/// Both entry points: catch panics and apply the failure policy.
unsafe fn entry(job_desc: *mut job_desc_msg_t, err_msg: *mut *mut c_char, op: Op) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| route(job_desc, err_msg, op)));
    match r {
        Ok(rc) => rc,
        Err(_) => {
            let policy = state::view().map_or(OnError::Open, |v| v.on_error());
            internal_error(policy, err_msg, &format!("internal error (panic) in {op}"))
        }
    }
}

unsafe fn internal_error(policy: OnError, err_msg: *mut *mut c_char, what: &str) -> c_int {
    match policy {
        OnError::Open => {
            log_error(&format!("{what}; job accepted unchanged (on_error = open)"));
            SUCCESS
        }
        OnError::Closed => {
            log_error(&format!("{what}; job refused (on_error = closed)"));
            add_err_msg(err_msg, &format!("smartmig: {what}; ask your admin"));
            ERROR
        }
    }
}

unsafe fn route(job_desc: *mut job_desc_msg_t, err_msg: *mut *mut c_char, op: Op) -> c_int {
    // Logged with each routed job: the time spent under slurmctld's job lock.
    let started = Instant::now();
    let Some(mut desc) = JobDesc::from_ptr(job_desc) else {
        return SUCCESS;
    };
    let now = state::unix_now();
    let Some(view) = state::view() else {
        return refuse_auto_only(&desc, err_msg, "plugin not initialised");
    };
    let (router, snapshot) = match &*view {
        View::Ready { router, snapshot } => (router, snapshot),
        View::Broken(why) => return refuse_auto_only(&desc, err_msg, why),
    };
    let policy = view.on_error();
    let job = match desc.job(now as i64) {
        Ok(j) => j,
        Err(e) => return internal_error(policy, err_msg, &format!("{op}: GPU request is not UTF-8 ({e})")),
    };
    // A stale snapshot is not used (the watcher logs it once).
    let max_age = router.config().snapshot_max_age_s;
    let snapshot = snapshot.as_deref().filter(|s| s.is_fresh(now, max_age));
    match router.route(&job, snapshot) {
        Ok(Outcome::Unchanged(_)) => SUCCESS,
        Ok(Outcome::Routed(r)) => {
            log_info(&format!(
                "{op} name={:?}: {} [{} us in plugin]",
                job.name.unwrap_or(""),
                r.message,
                started.elapsed().as_micros()
            ));
            // What the user asked, so the controller may re-route the job later (only
            // jobs with this mark, from this request). Only at submission: Slurm refuses
            // a job update that sets the admin comment unless an admin sends it (checked
            // after this plugin, whoever set the field), and an update's descriptor does
            // not hold the job's comment, which writing would replace.
            if op == Op::Submit {
                let tres = job.tres.0.map(|t| t.map(str::to_string));
                let from = RoutedFrom {
                    to: Some(RoutedFrom::routed_to(&tres, &r.tres)),
                    tres,
                    time_limit_min: job.time_limit_min,
                };
                let mark = from.mark(desc.admin_comment().as_deref());
                desc.set_admin_comment(&mark);
            }
            for (field, text) in &r.tres {
                desc.set_tres(*field, text);
            }
            if let Some(t) = r.time_limit_min {
                desc.set_time_limit(t);
            }
            add_err_msg(err_msg, &r.message);
            SUCCESS
        }
        Err(e) => {
            let msg = format!("smartmig: {e}");
            log_info(&format!("{op} refused: {msg}"));
            add_err_msg(err_msg, &msg);
            REFUSED
        }
    }
}

/// Without a usable config: refuse only requests that need routing, pass the rest.
unsafe fn refuse_auto_only(desc: &JobDesc<'_>, err_msg: *mut *mut c_char, why: &str) -> c_int {
    let Ok(job) = desc.job(0) else {
        return SUCCESS;
    };
    let auto = TresField::ALL
        .iter()
        .filter_map(|f| job.tres.0[*f as usize])
        .any(|t| {
            smartmig_core::tres::entries(t).any(|e| {
                // A 0-count entry asks for nothing (Slurm drops it): not a request to route.
                smartmig_core::tres::parse(e).is_ok_and(|e| {
                    e.is_gpu()
                        && e.gpu_type.is_some_and(|t| t.eq_ignore_ascii_case(AUTO_TYPE))
                        && e.count() != Ok(0)
                })
            })
        });
    if !auto {
        return SUCCESS;
    }
    add_err_msg(
        err_msg,
        &format!("smartmig: automatic MIG routing is unavailable ({why})"),
    );
    REFUSED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exported_names_are_nul_terminated_c_strings() {
        for bytes in [&plugin_name[..], &plugin_type[..]] {
            let c = std::ffi::CStr::from_bytes_with_nul(bytes).expect("one NUL, at the end");
            assert!(!c.to_bytes().is_empty());
        }
        assert_eq!(&plugin_type[..], b"job_submit/smartmig\0");
        assert_eq!(plugin_version, sys::SLURM_VERSION_NUMBER);
    }

    fn take_msg(msg: &mut *mut c_char) -> String {
        if msg.is_null() {
            return String::new();
        }
        let s = unsafe { std::ffi::CStr::from_ptr(*msg) }
            .to_string_lossy()
            .into_owned();
        unsafe { ffi::clear_err_msg(msg) };
        s
    }

    #[test]
    fn internal_errors_follow_on_error() {
        let mut msg: *mut c_char = std::ptr::null_mut();
        assert_eq!(
            unsafe { internal_error(OnError::Open, &mut msg, "boom") },
            SUCCESS
        );
        assert!(msg.is_null(), "fail-open tells the user nothing");
        assert_eq!(
            unsafe { internal_error(OnError::Closed, &mut msg, "boom") },
            ERROR
        );
        assert!(take_msg(&mut msg).contains("boom"));
    }

    /// The whole entry path in-process (Slurm's allocator and logger replaced by libc
    /// stand-ins): without a config file only gpu:mig requests are refused.
    #[test]
    fn without_a_config_job_submit_refuses_only_gpu_mig() {
        // Tests run outside slurmctld: no smartmig.toml beside a slurm.conf, and none
        // at /etc/smartmig on a build machine.
        if std::path::Path::new(smartmig_core::config::DEFAULT_PATH).exists() {
            eprintln!("skipped: {} exists here", smartmig_core::config::DEFAULT_PATH);
            return;
        }
        let _serial = state::TEST_SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        assert_eq!(init(), SUCCESS);
        let submit = |tres: &str| {
            let mut d: Box<job_desc_msg_t> = Box::new(unsafe { std::mem::zeroed() });
            d.time_limit = sys::NO_VAL;
            let t = std::ffi::CString::new(tres).unwrap();
            d.tres_per_node = t.as_ptr() as *mut c_char;
            let mut msg: *mut c_char = std::ptr::null_mut();
            let rc = unsafe { job_submit(&mut *d, 0, &mut msg) };
            d.tres_per_node = std::ptr::null_mut();
            (rc, take_msg(&mut msg))
        };
        let (rc, msg) = submit("gres:gpu:mig:1");
        assert_eq!(rc, REFUSED);
        assert!(msg.contains("automatic MIG routing is unavailable"), "{msg}");
        assert_eq!(submit("gres:gpu:3g.20gb:1"), (SUCCESS, String::new()));
        assert_eq!(submit("gres:gpu:mig:0"), (SUCCESS, String::new()));
        assert_eq!(
            unsafe { job_submit(std::ptr::null_mut(), 0, std::ptr::null_mut()) },
            SUCCESS
        );
        assert_eq!(fini(), SUCCESS);
        assert!(state::view().is_none(), "fini leaves nothing published");
    }
}
