//! The only place that touches Slurm's memory: a safe view of `job_desc_msg_t`, writing
//! results back with Slurm's allocator, and Slurm's logger.
//!
//! Slurm's allocator and logger live in `libslurmfull.so`, which slurmctld has loaded:
//! the symbols below resolve there when slurmctld dlopens the plugin. The plugin does not
//! link libslurm itself (a second copy would have its own allocator state).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::str::Utf8Error;

use smartmig_core::routing::{Job, TresField, TresStrings};

use crate::sys::{job_desc_msg_t, INFINITE, NO_VAL};

#[cfg(not(test))]
extern "C" {
    fn slurm_xstrdup(s: *const c_char) -> *mut c_char;
    // 22.05 takes (item, file, line, func); later releases take only `item`. Passing the
    // extra arguments is harmless to the one-argument form under the C calling convention.
    fn slurm_xfree(item: *mut *mut c_void, file: *const c_char, line: c_int, func: *const c_char);
    fn slurm_info(fmt: *const c_char, ...);
    fn slurm_error(fmt: *const c_char, ...);
    fn slurm_get_extra_conf_path(name: *const c_char) -> *mut c_char;
}

// Unit tests run outside slurmctld: stand-ins with the same contracts over libc's allocator.
#[cfg(test)]
mod standins {
    use super::*;
    extern "C" {
        fn strdup(s: *const c_char) -> *mut c_char;
        fn free(p: *mut c_void);
    }
    pub unsafe fn slurm_xstrdup(s: *const c_char) -> *mut c_char {
        strdup(s)
    }
    pub unsafe fn slurm_xfree(item: *mut *mut c_void, _: *const c_char, _: c_int, _: *const c_char) {
        free(*item);
        *item = std::ptr::null_mut();
    }
    pub unsafe fn slurm_info(_: *const c_char, msg: *const c_char) {
        eprintln!("info: {}", CStr::from_ptr(msg).to_string_lossy());
    }
    pub unsafe fn slurm_error(_: *const c_char, msg: *const c_char) {
        eprintln!("error: {}", CStr::from_ptr(msg).to_string_lossy());
    }
    pub unsafe fn slurm_get_extra_conf_path(_: *const c_char) -> *mut c_char {
        std::ptr::null_mut()
    }
}
#[cfg(test)]
use standins::*;

/// Prefix of every log line, so `grep smartmig slurmctld.log` finds them.
const LOG_PREFIX: &str = "job_submit/smartmig: ";

fn c_message(msg: &str) -> CString {
    // Interior NULs cannot cross into C; they never occur in our messages but user text
    // might carry one.
    CString::new(format!("{LOG_PREFIX}{msg}").replace('\0', " ")).unwrap_or_default()
}

/// Logs at info level through slurmctld's logger (never with user text as format).
pub fn log_info(msg: &str) {
    let m = c_message(msg);
    // SAFETY: "%s" with one NUL-terminated string argument.
    unsafe { slurm_info(c"%s".as_ptr(), m.as_ptr()) }
}

/// Logs at error level through slurmctld's logger.
pub fn log_error(msg: &str) {
    let m = c_message(msg);
    // SAFETY: as in `log_info`.
    unsafe { slurm_error(c"%s".as_ptr(), m.as_ptr()) }
}

/// A copy of `s` in Slurm's allocator (for fields and `err_msg` that Slurm frees).
fn xstrdup(s: &str) -> *mut c_char {
    let c = CString::new(s.replace('\0', " ")).unwrap_or_default();
    // SAFETY: a valid NUL-terminated string; the result is owned by Slurm's allocator.
    unsafe { slurm_xstrdup(c.as_ptr()) }
}

/// Frees a Slurm-allocated string and nulls the pointer.
///
/// # Safety
/// `*p` must be null or allocated by Slurm's allocator.
unsafe fn xfree(p: &mut *mut c_char) {
    if !p.is_null() {
        let item = p as *mut *mut c_char as *mut *mut c_void;
        slurm_xfree(item, c"smartmig".as_ptr(), 0, c"xfree".as_ptr());
        *p = std::ptr::null_mut();
    }
}

/// Adds `msg` to `*err_msg` (Slurm frees it), after any earlier message on a line of its
/// own.
///
/// Every plugin of `JobSubmitPlugins` gets the same `err_msg` (job_submit.c hands each the
/// same pointer), so another plugin's text (lua's `slurm.user_msg()`) must stay; lua joins
/// its own messages with a newline too.
///
/// # Safety
/// `err_msg` must be null or point to a pointer owned by Slurm's allocator (or null).
pub unsafe fn add_err_msg(err_msg: *mut *mut c_char, msg: &str) {
    if err_msg.is_null() {
        return;
    }
    // Another plugin's text that is not UTF-8 is kept as best it reads, not dropped.
    let old = (!(*err_msg).is_null()).then(|| CStr::from_ptr(*err_msg).to_string_lossy());
    let joined = match old {
        Some(old) if !old.is_empty() => format!("{old}\n{msg}"),
        _ => msg.to_string(),
    };
    xfree(&mut *err_msg);
    *err_msg = xstrdup(&joined);
}

/// Frees `*err_msg` and nulls it (tests: what slurmctld does after the plugins ran).
///
/// # Safety
/// As [`add_err_msg`].
#[cfg(test)]
pub unsafe fn clear_err_msg(err_msg: *mut *mut c_char) {
    if !err_msg.is_null() {
        xfree(&mut *err_msg);
    }
}

/// The path of `name` beside slurm.conf, as slurmctld computes it.
pub fn extra_conf_path(name: &str) -> Option<std::path::PathBuf> {
    let c = CString::new(name).ok()?;
    // SAFETY: returns an xmalloc'ed string or null; we copy it and free it.
    unsafe {
        let mut p = slurm_get_extra_conf_path(c.as_ptr());
        if p.is_null() {
            return None;
        }
        let path = CStr::from_ptr(p).to_string_lossy().into_owned();
        xfree(&mut p);
        Some(path.into())
    }
}

/// A borrowed, safe view of a job descriptor.
pub struct JobDesc<'a> {
    desc: &'a mut job_desc_msg_t,
}

/// Reads a C string field.
///
/// # Safety
/// `p` must be null or a valid NUL-terminated string that outlives `'a`.
unsafe fn text<'a>(p: *const c_char) -> Result<Option<&'a str>, Utf8Error> {
    if p.is_null() {
        Ok(None)
    } else {
        CStr::from_ptr(p).to_str().map(Some)
    }
}

impl<'a> JobDesc<'a> {
    /// Wraps a pointer from slurmctld.
    ///
    /// # Safety
    /// `desc` must be null or a valid job descriptor, not used elsewhere during `'a`.
    pub unsafe fn from_ptr(desc: *mut job_desc_msg_t) -> Option<JobDesc<'a>> {
        desc.as_mut().map(|desc| JobDesc { desc })
    }

    fn field_ptr(&mut self, f: TresField) -> &mut *mut c_char {
        match f {
            TresField::PerNode => &mut self.desc.tres_per_node,
            TresField::PerJob => &mut self.desc.tres_per_job,
            TresField::PerTask => &mut self.desc.tres_per_task,
            TresField::PerSocket => &mut self.desc.tres_per_socket,
        }
    }

    /// The routing view of the job, at `now` (Unix seconds). Fails on non-UTF-8 text.
    pub fn job(&self, now: i64) -> Result<Job<'_>, Utf8Error> {
        let d = &*self.desc;
        // SAFETY: slurmctld hands us NUL-terminated strings or nulls, alive for the call.
        unsafe {
            Ok(Job {
                tres: TresStrings([
                    text(d.tres_per_node)?,
                    text(d.tres_per_job)?,
                    text(d.tres_per_task)?,
                    text(d.tres_per_socket)?,
                ]),
                // Only the GPU request must read; other text that is not UTF-8 (a job
                // named after a Latin-1 script file) counts as absent: no rule or hint
                // matches it, and a job without GPUs is not refused for it.
                name: text(d.name).unwrap_or(None),
                account: text(d.account).unwrap_or(None),
                partition: text(d.partition).unwrap_or(None),
                comment: text(d.comment).unwrap_or(None),
                time_limit_min: (d.time_limit != NO_VAL && d.time_limit != INFINITE).then_some(d.time_limit),
                deadline: (d.deadline > 0).then_some(d.deadline),
                begin: (d.begin_time > 0).then_some(d.begin_time),
                time_min_min: (d.time_min != 0 && d.time_min != NO_VAL && d.time_min != INFINITE)
                    .then_some(d.time_min),
                now,
            })
        }
    }

    /// Replaces a tres field with a copy of `value` in Slurm's allocator.
    pub fn set_tres(&mut self, f: TresField, value: &str) {
        let slot = self.field_ptr(f);
        // SAFETY: slurmctld's fields are null or xmalloc'ed; we free with its allocator.
        unsafe { xfree(slot) };
        *slot = xstrdup(value);
    }

    /// Sets the time limit in minutes.
    pub fn set_time_limit(&mut self, minutes: u32) {
        self.desc.time_limit = minutes;
    }

    /// The admin comment (only Slurm admins and plugins can set it).
    pub fn admin_comment(&self) -> Option<String> {
        // SAFETY: as in `job`.
        unsafe { text(self.desc.admin_comment).ok().flatten().map(str::to_string) }
    }

    /// Replaces the admin comment with a copy of `value` in Slurm's allocator.
    pub fn set_admin_comment(&mut self, value: &str) {
        // SAFETY: as in `set_tres`.
        unsafe { xfree(&mut self.desc.admin_comment) };
        self.desc.admin_comment = xstrdup(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_desc() -> Box<job_desc_msg_t> {
        // SAFETY: job_desc_msg_t is plain C data; all-zero is what slurm_init_job_desc_msg
        // starts from (null pointers, zero numbers).
        let mut d: Box<job_desc_msg_t> = Box::new(unsafe { std::mem::zeroed() });
        d.time_limit = NO_VAL;
        d
    }

    #[test]
    fn the_view_reads_fields_and_treats_no_val_as_unset() {
        let mut d = empty_desc();
        let tres = CString::new("gres:gpu:mig:1").unwrap();
        d.tres_per_node = xstrdup(tres.to_str().unwrap());
        d.deadline = 0;
        let view = unsafe { JobDesc::from_ptr(&mut *d) }.unwrap();
        let job = view.job(5).unwrap();
        assert_eq!(job.tres.0[0], Some("gres:gpu:mig:1"));
        assert_eq!((job.time_limit_min, job.deadline, job.name), (None, None, None));
        unsafe { xfree(&mut d.tres_per_node) };
    }

    #[test]
    fn writing_back_replaces_the_string_and_time() {
        let mut d = empty_desc();
        d.tres_per_job = xstrdup("gres:gpu:mig:2");
        let mut view = unsafe { JobDesc::from_ptr(&mut *d) }.unwrap();
        view.set_tres(TresField::PerJob, "gres:gpu:2g.10gb:2");
        view.set_time_limit(42);
        assert_eq!(view.job(0).unwrap().tres.0[1], Some("gres:gpu:2g.10gb:2"));
        assert_eq!(view.job(0).unwrap().time_limit_min, Some(42));
        unsafe { xfree(&mut d.tres_per_job) };
    }

    #[test]
    fn a_gpu_request_that_is_not_utf8_is_an_error_and_other_such_text_counts_as_absent() {
        let mut d = empty_desc();
        let bad = [0xffu8, 0xfe, 0];
        let tres = CString::new("gres:gpu:mig:1").unwrap();
        d.comment = bad.as_ptr() as *mut c_char;
        d.name = bad.as_ptr() as *mut c_char;
        d.tres_per_node = tres.as_ptr() as *mut c_char;
        let view = unsafe { JobDesc::from_ptr(&mut *d) }.unwrap();
        let job = view.job(0).expect("the GPU request reads");
        assert_eq!((job.name, job.comment), (None, None));
        assert_eq!(job.tres.0[0], Some("gres:gpu:mig:1"));
        d.tres_per_task = bad.as_ptr() as *mut c_char;
        let view = unsafe { JobDesc::from_ptr(&mut *d) }.unwrap();
        assert!(view.job(0).is_err());
        d.comment = std::ptr::null_mut();
        d.name = std::ptr::null_mut();
        d.tres_per_node = std::ptr::null_mut();
        d.tres_per_task = std::ptr::null_mut();
    }

    #[test]
    fn err_msg_keeps_another_plugins_message_and_adds_ours_on_a_new_line() {
        // JobSubmitPlugins=lua,smartmig: lua's slurm.user_msg() text is already there.
        let mut msg: *mut c_char = xstrdup("site: please add --account");
        unsafe { add_err_msg(&mut msg, "smartmig: routed to gpu:1g.5gb:1") };
        assert_eq!(
            unsafe { CStr::from_ptr(msg) }.to_str().unwrap(),
            "site: please add --account\nsmartmig: routed to gpu:1g.5gb:1"
        );
        unsafe { xfree(&mut msg) };
        assert!(msg.is_null());
        // Alone (or after an empty one), the message is ours only.
        for first in [std::ptr::null_mut(), xstrdup("")] {
            let mut msg = first;
            unsafe { add_err_msg(&mut msg, "smartmig: x") };
            assert_eq!(unsafe { CStr::from_ptr(msg) }.to_str().unwrap(), "smartmig: x");
            unsafe { clear_err_msg(&mut msg) };
            assert!(msg.is_null());
        }
        unsafe { add_err_msg(std::ptr::null_mut(), "nowhere to go") };
    }
}
