//! The real [`SlurmApi`]: libslurm through bindgen's types. Every buffer Slurm returns is
//! freed with Slurm's own free function before the call returns.

#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    clippy::all
)]

mod sys {
    #![allow(
        non_upper_case_globals,
        non_camel_case_types,
        non_snake_case,
        dead_code,
        clippy::all
    )]
    include!(concat!(env!("OUT_DIR"), "/slurm_bindings.rs"));
}

use std::ffi::{c_char, CStr, CString};
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::Once;

use super::{JobState, JobUpdate, NodeUpdate, SlurmApi, SlurmError, SlurmJob, SlurmNode};

/// Slurm's API, through `libslurm.so`, configured from `$SLURM_CONF` (or Slurm's default).
/// Node and job tables are read incrementally: slurmctld is asked for what changed since
/// the last read and answers "no change" cheaply when nothing did.
#[derive(Debug)]
pub struct Libslurm {
    nodes: Option<(i64, Vec<SlurmNode>)>,
    jobs: Option<(i64, Vec<SlurmJob>)>,
}

static INIT: Once = Once::new();

impl Libslurm {
    /// Loads Slurm's configuration once per process (`slurm_init`).
    pub fn new() -> Libslurm {
        // SAFETY: slurm_init(NULL) reads $SLURM_CONF or the default path; Once makes it
        // run a single time, before any other call.
        INIT.call_once(|| unsafe { sys::slurm_init(ptr::null()) });
        Libslurm {
            nodes: None,
            jobs: None,
        }
    }

    /// The Slurm release the bindings were generated for (`SLURM_VERSION_NUMBER`).
    pub fn version() -> u32 {
        sys::SLURM_VERSION_NUMBER
    }
}

impl Default for Libslurm {
    fn default() -> Self {
        Libslurm::new()
    }
}

/// The error number of the last failed API call: `slurm_get_errno()` up to Slurm 23.x; later
/// releases set `errno` itself (build.rs chooses from the headers).
fn slurm_errno() -> i32 {
    #[cfg(not(slurm_errno_is_errno))]
    // SAFETY: slurm_get_errno reads a thread-local.
    let errno = unsafe { sys::slurm_get_errno() };
    #[cfg(slurm_errno_is_errno)]
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    errno
}

fn last_error(call: String) -> SlurmError {
    let errno = slurm_errno();
    // SAFETY: slurm_strerror returns a static string.
    let message = unsafe {
        let p = sys::slurm_strerror(errno);
        if p.is_null() {
            format!("errno {errno}")
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    SlurmError::Call { call, errno, message }
}

/// A C string owned by Slurm's buffer, copied out.
///
/// # Safety
/// `p` is null or a NUL-terminated string valid for the call.
unsafe fn text(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        Some(CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

fn cstring(what: &str, value: &str) -> Result<CString, SlurmError> {
    CString::new(value).map_err(|_| SlurmError::Value {
        what: what.to_string(),
        why: "contains a NUL byte".into(),
    })
}

/// Expands a host list (`n[1-3],m`) with Slurm's own parser.
fn expand_hostlist(list: &str) -> Vec<String> {
    let Ok(c) = CString::new(list) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // SAFETY: the hostlist is created, drained and destroyed here; each shifted name is
    // malloc'ed by Slurm and freed with free().
    unsafe {
        let hl = sys::slurm_hostlist_create(c.as_ptr());
        if hl.is_null() {
            return out;
        }
        loop {
            let h = sys::slurm_hostlist_shift(hl);
            if h.is_null() {
                break;
            }
            out.push(CStr::from_ptr(h).to_string_lossy().into_owned());
            libc_free(h.cast());
        }
        sys::slurm_hostlist_destroy(hl);
    }
    out
}

extern "C" {
    #[link_name = "free"]
    fn libc_free(p: *mut std::ffi::c_void);
}

fn limit(v: u32) -> Option<u32> {
    (v != sys::NO_VAL && v != sys::INFINITE).then_some(v)
}

/// A message Slurm allocated, freed with Slurm's own free function when dropped: on every
/// path out of the function holding it, unwinding included.
struct SlurmOwned<M> {
    msg: *mut M,
    free: unsafe extern "C" fn(*mut M),
}

impl<M> Drop for SlurmOwned<M> {
    fn drop(&mut self) {
        // SAFETY: `msg` is a non-null message Slurm allocated, and `free` is its free
        // function; it is freed once, here.
        unsafe { (self.free)(self.msg) }
    }
}

/// Loads a Slurm message with `load` (a `slurm_load_*` call named `call`), maps each of its
/// records with `map` (`None` skips one), and frees the message with `free`, whatever
/// happens. Returns the records and the message's update time (`stamp`), or None when
/// slurmctld answered that nothing changed since the update time the call gave.
///
/// # Safety
/// `load` writes into its argument null or a message that `free` frees; `records` returns
/// the record array of such a message (null or `count` valid records) and its count.
unsafe fn load_each<M, R, T>(
    call: &str,
    load: impl FnOnce(*mut *mut M) -> std::ffi::c_int,
    free: unsafe extern "C" fn(*mut M),
    records: impl FnOnce(&M) -> (*const R, u32, i64),
    map: impl FnMut(&R) -> Option<T>,
) -> Result<Option<(Vec<T>, i64)>, SlurmError> {
    let mut msg: *mut M = ptr::null_mut();
    let rc = load(&mut msg);
    // Owned from here, so a message Slurm wrote is freed on failure too (after Slurm's errno
    // is read: the return value is built before locals drop).
    let owned = (!msg.is_null()).then_some(SlurmOwned { msg, free });
    let owned = match owned {
        Some(owned) if rc == sys::SLURM_SUCCESS as i32 => owned,
        _ if slurm_errno() == sys::SLURM_NO_CHANGE_IN_DATA as i32 => return Ok(None),
        _ => return Err(last_error(call.into())),
    };
    let (array, count, stamp) = records(&*owned.msg);
    let records = if array.is_null() {
        &[][..]
    } else {
        std::slice::from_raw_parts(array, count as usize)
    };
    Ok(Some((records.iter().filter_map(map).collect(), stamp)))
}

/// A node record as smartmig needs it.
///
/// # Safety
/// `n` is a record of a node_info_msg_t Slurm returned, still allocated.
unsafe fn node_record(n: &sys::node_info_t) -> Option<SlurmNode> {
    Some(SlurmNode {
        name: text(n.name)?,
        gres: text(n.gres).unwrap_or_default(),
        gres_used: text(n.gres_used).unwrap_or_default(),
        drain: n.node_state & sys::NODE_STATE_DRAIN != 0,
        down: n.node_state & sys::NODE_STATE_BASE == sys::NODE_STATE_DOWN,
        invalid_reg: n.node_state & sys::NODE_STATE_INVALID_REG != 0,
        silent: n.node_state & sys::NODE_STATE_BASE == sys::NODE_STATE_UNKNOWN
            || n.node_state & sys::NODE_STATE_NO_RESPOND != 0,
        reason: text(n.reason).filter(|r| !r.is_empty()),
        extra: text(n.extra).filter(|r| !r.is_empty()),
        comment: text(n.comment).filter(|r| !r.is_empty()),
        partitions: text(n.partitions)
            .map(|p| {
                p.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// A table read incrementally: the cached copy when slurmctld says nothing changed.
fn incremental<T: Clone>(
    cache: &mut Option<(i64, Vec<T>)>,
    read: impl FnOnce(i64) -> Result<Option<(Vec<T>, i64)>, SlurmError>,
) -> Result<Vec<T>, SlurmError> {
    let since = cache.as_ref().map_or(0, |c| c.0);
    match read(since)? {
        Some((records, stamp)) => {
            *cache = Some((stamp, records.clone()));
            Ok(records)
        }
        None => Ok(cache.as_ref().map(|c| c.1.clone()).unwrap_or_default()),
    }
}

impl SlurmApi for Libslurm {
    fn jobs(&mut self) -> Result<Vec<SlurmJob>, SlurmError> {
        // SAFETY: slurm_load_jobs allocates a job_info_msg_t freed by slurm_free_job_info_msg;
        // job_array holds record_count records; the strings read are null or NUL-terminated.
        incremental(&mut self.jobs, |since| unsafe {
            load_each(
                "slurm_load_jobs",
                |msg| sys::slurm_load_jobs(since, msg, (sys::SHOW_ALL | sys::SHOW_DETAIL) as u16),
                sys::slurm_free_job_info_msg,
                |m| (m.job_array.cast_const(), m.record_count, m.last_update),
                |j| {
                    let tres = [
                        text(j.tres_per_node),
                        text(j.tres_per_job),
                        text(j.tres_per_task),
                        text(j.tres_per_socket),
                    ];
                    if !tres.iter().flatten().any(|t| t.contains("gpu")) {
                        return None;
                    }
                    let state = match j.job_state & sys::JOB_STATE_BASE {
                        s if s == sys::JOB_PENDING => JobState::Pending,
                        // A suspended job keeps its GPUs: it counts as running.
                        s if s == sys::JOB_RUNNING || s == sys::JOB_SUSPENDED => JobState::Running,
                        _ => return None,
                    };
                    let gres_detail = if j.gres_detail_str.is_null() {
                        Vec::new()
                    } else {
                        std::slice::from_raw_parts(j.gres_detail_str, j.gres_detail_cnt as usize)
                            .iter()
                            .map(|p| text(*p).unwrap_or_default())
                            .collect()
                    };
                    Some(SlurmJob {
                        id: j.job_id,
                        state,
                        tres,
                        nodes: text(j.nodes).map(|n| expand_hostlist(&n)).unwrap_or_default(),
                        gres_detail,
                        submit: j.submit_time,
                        start: j.start_time,
                        time_limit_min: limit(j.time_limit),
                        time_min_min: limit(j.time_min).filter(|&m| m > 0),
                        deadline: (j.deadline > 0).then_some(j.deadline),
                        comment: text(j.comment).filter(|c| !c.is_empty()),
                        name: text(j.name),
                        account: text(j.account),
                        partition: text(j.partition),
                        admin_comment: text(j.admin_comment).filter(|c| !c.is_empty()),
                        // A federated job's id carries its origin cluster's id above
                        // MAX_JOB_ID; Slurm requeues it through its origin, where a requeue
                        // limited to running jobs finds the job pending and does nothing.
                        requeueable: j.batch_flag != 0 && j.requeue != 0 && j.job_id <= sys::MAX_JOB_ID,
                    })
                },
            )
        })
    }

    fn nodes(&mut self) -> Result<Vec<SlurmNode>, SlurmError> {
        // SAFETY: as in jobs(), with node_info_msg_t, slurm_free_node_info_msg and node_array.
        incremental(&mut self.nodes, |since| unsafe {
            load_each(
                "slurm_load_node",
                |msg| sys::slurm_load_node(since, msg, (sys::SHOW_ALL | sys::SHOW_DETAIL) as u16),
                sys::slurm_free_node_info_msg,
                |m| (m.node_array.cast_const(), m.record_count, m.last_update),
                |n| node_record(n),
            )
        })
    }

    fn node(&mut self, name: &str) -> Result<Option<SlurmNode>, SlurmError> {
        let c = cstring(&format!("node {name}"), name)?;
        // SAFETY: as in nodes(); slurm_load_node_single only reads the name.
        let got = unsafe {
            load_each(
                &format!("slurm_load_node_single({name})"),
                |msg| {
                    sys::slurm_load_node_single(
                        msg,
                        c.as_ptr().cast_mut(),
                        (sys::SHOW_ALL | sys::SHOW_DETAIL) as u16,
                    )
                },
                sys::slurm_free_node_info_msg,
                |m| (m.node_array.cast_const(), m.record_count, m.last_update),
                |n| node_record(n),
            )
        };
        match got {
            Ok(Some((records, _))) => Ok(records.into_iter().find(|n| n.name == name)),
            Ok(None) => Ok(None),
            Err(SlurmError::Call { errno, .. }) if errno == sys::ESLURM_INVALID_NODE_NAME as i32 => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn slurmd_timeout(&mut self) -> Result<u32, SlurmError> {
        let mut conf: *mut sys::slurm_conf_t = ptr::null_mut();
        // SAFETY: slurm_load_ctl_conf allocates the configuration, freed right after the one
        // field is read.
        unsafe {
            let rc = sys::slurm_load_ctl_conf(0, &mut conf);
            if rc != sys::SLURM_SUCCESS as i32 || conf.is_null() {
                return Err(last_error("slurm_load_ctl_conf".into()));
            }
            let t = u32::from((*conf).slurmd_timeout);
            sys::slurm_free_ctl_conf(conf);
            Ok(t)
        }
    }

    fn update_node(&mut self, u: &NodeUpdate) -> Result<(), SlurmError> {
        let what = |f: &str| format!("node {} {f}", u.node);
        let name = cstring(&what("name"), &u.node)?;
        let extra = u
            .extra
            .as_deref()
            .map(|e| cstring(&what("Extra"), e))
            .transpose()?;
        let comment = u
            .comment
            .as_deref()
            .map(|c| cstring(&what("Comment"), c))
            .transpose()?;
        let reason = u
            .drain
            .as_deref()
            .map(|r| cstring(&what("reason"), r))
            .transpose()?;
        let gres = u.gres.as_deref().map(|g| cstring(&what("Gres"), g)).transpose()?;
        let mut msg = MaybeUninit::<sys::update_node_msg_t>::uninit();
        // SAFETY: slurm_init_update_node_msg fills every field; the strings outlive the call
        // and Slurm only reads them.
        let rc = unsafe {
            sys::slurm_init_update_node_msg(msg.as_mut_ptr());
            let m = msg.assume_init_mut();
            m.node_names = name.as_ptr().cast_mut();
            if let Some(e) = &extra {
                m.extra = e.as_ptr().cast_mut();
            }
            if let Some(c) = &comment {
                m.comment = c.as_ptr().cast_mut();
            }
            if let Some(g) = &gres {
                m.gres = g.as_ptr().cast_mut();
            }
            if let Some(r) = &reason {
                m.node_state = sys::NODE_STATE_DRAIN;
                m.reason = r.as_ptr().cast_mut();
                m.reason_uid = libc_getuid();
            } else if u.resume {
                m.node_state = sys::NODE_RESUME;
            }
            sys::slurm_update_node(m)
        };
        if rc != sys::SLURM_SUCCESS as i32 {
            return Err(last_error(format!("slurm_update_node({})", u.node)));
        }
        Ok(())
    }

    fn update_job(&mut self, u: &JobUpdate) -> Result<(), SlurmError> {
        let job = u.job;
        let v = u
            .tres
            .as_ref()
            .map(|(_, v)| cstring(&format!("job {job} tres"), v))
            .transpose()?;
        let comment = u
            .admin_comment
            .as_deref()
            .map(|c| cstring(&format!("job {job} admin comment"), c))
            .transpose()?;
        let mut msg = MaybeUninit::<sys::job_desc_msg_t>::uninit();
        // SAFETY: slurm_init_job_desc_msg fills every field; `v` and `comment` outlive the call.
        let rc = unsafe {
            sys::slurm_init_job_desc_msg(msg.as_mut_ptr());
            let m = msg.assume_init_mut();
            m.job_id = job;
            if let (Some((field, _)), Some(v)) = (&u.tres, &v) {
                let p = v.as_ptr().cast_mut();
                match field {
                    0 => m.tres_per_node = p,
                    1 => m.tres_per_job = p,
                    2 => m.tres_per_task = p,
                    _ => m.tres_per_socket = p,
                }
            }
            if let Some(t) = u.time_limit_min {
                m.time_limit = t;
            }
            if let Some(c) = &comment {
                m.admin_comment = c.as_ptr().cast_mut();
            }
            sys::slurm_update_job(m)
        };
        if rc != sys::SLURM_SUCCESS as i32 {
            return Err(last_error(format!("slurm_update_job({job}, {u:?})")));
        }
        Ok(())
    }

    fn requeue(&mut self, job: u32) -> Result<(), SlurmError> {
        // JOB_RUNNING: only a job still running (or suspended) is requeued. Without it
        // Slurm requeues a finished batch job too, and a job that ended or that its user
        // cancelled between smartmigd's view and this call would run again.
        // SAFETY: plain call with a job id and a flag.
        let rc = unsafe { sys::slurm_requeue(job, sys::JOB_RUNNING) };
        if rc != sys::SLURM_SUCCESS as i32 {
            return Err(last_error(format!("slurm_requeue({job})")));
        }
        Ok(())
    }

    fn as_any(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn ping(&mut self) -> Result<(), SlurmError> {
        // SAFETY: plain call; 0 is the primary controller.
        let rc = unsafe { sys::slurm_ping(0) };
        if rc != sys::SLURM_SUCCESS as i32 {
            return Err(last_error("slurm_ping".into()));
        }
        Ok(())
    }

    fn reconfigure(&mut self) -> Result<(), SlurmError> {
        // SAFETY: plain call without arguments.
        let rc = unsafe { sys::slurm_reconfigure() };
        if rc != sys::SLURM_SUCCESS as i32 {
            return Err(last_error("slurm_reconfigure".into()));
        }
        Ok(())
    }
}

extern "C" {
    #[link_name = "getuid"]
    fn libc_getuid() -> u32;
}
