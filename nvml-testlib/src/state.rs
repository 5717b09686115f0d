//! The library's state, kept under a root directory so that a restarted process (or a
//! second one, such as `smartmig mig probe` beside the agent) sees what the last call
//! left:
//!
//! - `nvml.json`: the GPUs, their instances and processes ([`Node`]), rewritten atomically
//!   after every change, under `.lock` (flock);
//! - `faults.json` (optional): errors to inject ([`Faults`]);
//! - `proc/driver/nvidia-caps/mig-minors`: the capability minors, as the driver lists them;
//! - `dev/nvidia<minor>` and `dev/nvidia-caps/nvidia-cap<minor>`: the device files, made as
//!   compute instances come and go.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::tables::{self, GiProfile};

/// The environment variable that names the root directory.
pub const ROOT_ENV: &str = "SMARTMIG_NVML_TEST_ROOT";
/// The state file's name.
pub const STATE_FILE: &str = "nvml.json";
/// The fault file's name.
pub const FAULTS_FILE: &str = "faults.json";
/// The mig-minors file, relative to the root.
pub const MIG_MINORS: &str = "proc/driver/nvidia-caps/mig-minors";
/// GPU instance ids a GPU has (the driver's `gpu<N>/gi<id>` entries).
pub const GI_IDS: u32 = 15;
/// Compute instance ids a GPU instance has.
pub const CI_IDS: u32 = 8;

/// Why the state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file is not valid JSON of its shape.
    #[error("{path}: {reason}")]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The set-up asked for something the library does not know.
    #[error("{0}")]
    Setup(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `nvml.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// What `nvmlSystemGetDriverVersion` answers; before R510 a 4-slice and a 3-slice GPU
    /// instance may not share a GPU.
    pub driver_version: String,
    /// The GPUs, by index.
    pub gpus: Vec<Gpu>,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// Product name.
    pub name: String,
    /// UUID.
    pub uuid: String,
    /// Device minor (`/dev/nvidia<minor>`).
    pub minor: u32,
    /// Compute slices.
    pub compute_slices: u32,
    /// Memory slices.
    pub memory_slices: u32,
    /// MIG mode now.
    pub mig_current: bool,
    /// MIG mode after the next GPU reset.
    pub mig_pending: bool,
    /// GPU-instance profiles (empty: no MIG).
    pub profiles: Vec<GiProfile>,
    /// GPU instances.
    pub gpu_instances: Vec<GpuInstance>,
    /// Processes on compute instances.
    pub processes: Vec<Process>,
    /// Power draw, mW (None: NOT_SUPPORTED).
    pub power_mw: Option<u32>,
    /// Energy since the driver loaded, mJ (None: NOT_SUPPORTED).
    pub energy_mj: Option<u64>,
}

/// A GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuInstance {
    /// Id on its GPU.
    pub id: u32,
    /// Profile id.
    pub profile_id: u32,
    /// Placement start.
    pub start: u32,
    /// Placement size.
    pub size: u32,
    /// Compute instances.
    pub compute_instances: Vec<ComputeInstance>,
}

/// A compute instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeInstance {
    /// Id in its GPU instance.
    pub id: u32,
    /// Compute-instance profile id.
    pub profile_id: u32,
    /// Compute slices.
    pub slices: u32,
}

/// A process using a compute instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    /// PID.
    pub pid: u32,
    /// GPU instance id.
    pub gpu_instance: u32,
    /// Compute instance id.
    pub compute_instance: u32,
}

/// `faults.json`: what the next calls meet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Faults {
    /// Errors returned instead of running a call.
    #[serde(default)]
    pub errors: Vec<ErrorFault>,
    /// Abort the process (as a kill would) right after this many more calls have changed
    /// the state and saved it.
    #[serde(default)]
    pub abort_after_changes: Option<u32>,
}

/// An NVML call that fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorFault {
    /// The function, e.g. `nvmlDeviceCreateGpuInstanceWithPlacement`.
    pub call: String,
    /// GPU index; any GPU when absent.
    #[serde(default)]
    pub gpu: Option<u32>,
    /// NVML's name of the error, e.g. `NVML_ERROR_INSUFFICIENT_RESOURCES`.
    pub error: String,
    /// Matching calls to let through first.
    #[serde(default)]
    pub skip: u32,
    /// Fail every matching call from then on, not just one.
    #[serde(default)]
    pub always: bool,
}

impl ErrorFault {
    /// One failure of `call` with `error` on any GPU.
    pub fn once(call: &str, error: &str) -> ErrorFault {
        ErrorFault {
            call: call.to_string(),
            gpu: None,
            error: error.to_string(),
            skip: 0,
            always: false,
        }
    }
}

/// What a test sets up for one GPU.
#[derive(Debug, Clone)]
pub struct GpuSetup {
    /// Product key of [`tables::products`] (`a100-40gb`, `a30-24gb`, `l40s`).
    pub product: String,
    /// GPU instances made at start, each with one compute instance of all its slices:
    /// (profile name, placement start).
    pub instances: Vec<(String, u32)>,
}

/// A node of fake GPUs under a root directory: what tests set up and inspect.
#[derive(Debug, Clone)]
pub struct TestNode {
    root: PathBuf,
}

/// Writes `bytes` to `path` durably: a crash leaves the old or the new content.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    smartmig_core::durable::write(path, bytes).map_err(|e| StateError::Bad {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// An exclusive lock on the root, held until dropped.
pub struct Locked {
    _file: std::fs::File,
}

impl TestNode {
    /// Creates a node in `root` with the given GPUs (MIG on where the product has it),
    /// driver 550.54.15, the mig-minors file and the GPUs' device files.
    pub fn create(root: &Path, gpus: &[GpuSetup]) -> Result<TestNode, StateError> {
        std::fs::create_dir_all(root).map_err(io(root))?;
        let node = TestNode {
            root: root.to_path_buf(),
        };
        let mut state = Node {
            driver_version: "550.54.15".into(),
            gpus: Vec::new(),
        };
        for (i, g) in gpus.iter().enumerate() {
            let p = tables::product(&g.product).ok_or_else(|| {
                StateError::Setup(format!("no product `{}` in the library's tables", g.product))
            })?;
            let mig = !p.profiles.is_empty();
            let mut gpu = Gpu {
                name: p.name,
                uuid: format!("GPU-7e570000-0000-4000-8000-{i:012}"),
                minor: i as u32,
                compute_slices: p.compute_slices,
                memory_slices: p.memory_slices,
                mig_current: mig,
                mig_pending: mig,
                profiles: p.profiles,
                gpu_instances: Vec::new(),
                processes: Vec::new(),
                power_mw: None,
                energy_mj: None,
            };
            for (name, start) in &g.instances {
                let prof = gpu
                    .profiles
                    .iter()
                    .find(|q| q.name == *name)
                    .cloned()
                    .ok_or_else(|| StateError::Setup(format!("GPU {i}: no profile `{name}`")))?;
                let gi = crate::ops::create_gi(&state.driver_version, &mut gpu, &prof, *start).map_err(
                    |code| StateError::Setup(format!("GPU {i}: {name}@{start}: NVML error {code}")),
                )?;
                crate::ops::create_ci(&mut gpu, gi, crate::ops::full_ci_profile(prof.slices)).map_err(
                    |code| {
                        StateError::Setup(format!(
                            "GPU {i}: {name}@{start}: compute instance: NVML error {code}"
                        ))
                    },
                )?;
            }
            state.gpus.push(gpu);
        }
        node.write_minors(state.gpus.len() as u32)?;
        node.save(&state)?;
        for g in &state.gpus {
            node.make_device(&node.root.join(format!("dev/nvidia{}", g.minor)))?;
            for gi in &g.gpu_instances {
                for ci in &gi.compute_instances {
                    node.make_cap_devices(g.minor, gi.id, ci.id)?;
                }
            }
        }
        Ok(node)
    }

    /// The node in `root` (made by [`TestNode::create`]).
    pub fn open(root: &Path) -> TestNode {
        TestNode {
            root: root.to_path_buf(),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Takes the node's lock (every call of the library takes it).
    pub fn lock(&self) -> Result<Locked, StateError> {
        let path = self.root.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        // SAFETY: a valid open file descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io(&path)(std::io::Error::last_os_error()));
        }
        Ok(Locked { _file: file })
    }

    /// Reads `nvml.json`.
    pub fn load(&self) -> Result<Node, StateError> {
        let path = self.root.join(STATE_FILE);
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        serde_json::from_str(&text).map_err(|e| StateError::Bad {
            path,
            reason: e.to_string(),
        })
    }

    /// Writes `nvml.json` atomically.
    pub fn save(&self, state: &Node) -> Result<(), StateError> {
        let path = self.root.join(STATE_FILE);
        let text = serde_json::to_vec_pretty(state).map_err(|e| StateError::Bad {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        write_atomic(&path, &text)
    }

    /// Changes the state under the lock.
    pub fn update<T>(&self, f: impl FnOnce(&mut Node) -> T) -> Result<T, StateError> {
        let _l = self.lock()?;
        let mut s = self.load()?;
        let out = f(&mut s);
        self.save(&s)?;
        Ok(out)
    }

    /// Reads `faults.json` (none when absent).
    pub fn faults(&self) -> Result<Faults, StateError> {
        let path = self.root.join(FAULTS_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| StateError::Bad {
                path,
                reason: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Faults::default()),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// Writes `faults.json`.
    pub fn set_faults(&self, faults: &Faults) -> Result<(), StateError> {
        let path = self.root.join(FAULTS_FILE);
        let text = serde_json::to_vec_pretty(faults).map_err(|e| StateError::Bad {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        write_atomic(&path, &text)
    }

    /// Starts a process on the compute instance of GPU `gpu`'s GPU instance at placement
    /// `start`; its PID.
    pub fn start_process(&self, gpu: u32, start: u32) -> Result<u32, StateError> {
        self.update(|s| {
            let g = s
                .gpus
                .get_mut(gpu as usize)
                .ok_or_else(|| StateError::Setup(format!("no GPU {gpu}")))?;
            let gi = g
                .gpu_instances
                .iter()
                .find(|gi| gi.start == start)
                .ok_or_else(|| StateError::Setup(format!("GPU {gpu}: no GPU instance at {start}")))?;
            let ci = gi.compute_instances.first().ok_or_else(|| {
                StateError::Setup(format!(
                    "GPU {gpu}: the instance at {start} has no compute instance"
                ))
            })?;
            let pid = 40_000 + g.processes.len() as u32;
            let p = Process {
                pid,
                gpu_instance: gi.id,
                compute_instance: ci.id,
            };
            g.processes.push(p);
            Ok(pid)
        })?
    }

    /// Ends every process of GPU `gpu`.
    pub fn end_processes(&self, gpu: u32) -> Result<(), StateError> {
        self.update(|s| {
            if let Some(g) = s.gpus.get_mut(gpu as usize) {
                g.processes.clear();
            }
        })
    }

    /// The driver's capability minor of `gpu<minor>/gi<gi>/access` (`ci`: None) or
    /// `gpu<minor>/gi<gi>/ci<ci>/access`.
    pub fn cap_minor(minor: u32, gi: u32, ci: Option<u32>) -> u32 {
        let per_gi = 1 + CI_IDS;
        3 + minor * GI_IDS * per_gi + gi * per_gi + ci.map_or(0, |c| 1 + c)
    }

    /// Writes the mig-minors file for `gpus` GPUs: every GPU-instance and compute-instance
    /// id, whether it exists or not, as the driver lists them.
    fn write_minors(&self, gpus: u32) -> Result<(), StateError> {
        let path = self.root.join(MIG_MINORS);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let mut text = String::from("config 1\nmonitor 2\n");
        for g in 0..gpus {
            for gi in 0..GI_IDS {
                text.push_str(&format!(
                    "gpu{g}/gi{gi}/access {}\n",
                    Self::cap_minor(g, gi, None)
                ));
                for ci in 0..CI_IDS {
                    text.push_str(&format!(
                        "gpu{g}/gi{gi}/ci{ci}/access {}\n",
                        Self::cap_minor(g, gi, Some(ci))
                    ));
                }
            }
        }
        std::fs::write(&path, text).map_err(io(&path))
    }

    /// The capability device files of a compute instance and its GPU instance.
    pub fn make_cap_devices(&self, minor: u32, gi: u32, ci: u32) -> Result<(), StateError> {
        for m in [
            Self::cap_minor(minor, gi, None),
            Self::cap_minor(minor, gi, Some(ci)),
        ] {
            self.make_device(&self.root.join(format!("dev/nvidia-caps/nvidia-cap{m}")))?;
        }
        Ok(())
    }

    /// A device file: a character device with /dev/null's numbers when run as root (what
    /// slurmd accepts as a GPU file), else an empty file.
    fn make_device(&self, path: &Path) -> Result<(), StateError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        if path.exists() {
            return Ok(());
        }
        let made = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .ok()
            .is_some_and(|c| {
                // SAFETY: `c` is a valid NUL-terminated path; mknod only reads it.
                unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) == 0 }
            });
        if !made {
            std::fs::write(path, b"").map_err(io(path))?;
        }
        Ok(())
    }

    /// The layout of GPU `gpu` as `name@start` of each GPU instance, by start; GPU
    /// instances without a compute instance end with `!`.
    pub fn layout(&self, gpu: u32) -> Result<Vec<String>, StateError> {
        let s = self.load()?;
        let g = s
            .gpus
            .get(gpu as usize)
            .ok_or_else(|| StateError::Setup(format!("no GPU {gpu}")))?;
        let mut v: Vec<&GpuInstance> = g.gpu_instances.iter().collect();
        v.sort_by_key(|gi| gi.start);
        Ok(v.iter()
            .map(|gi| {
                let name = g
                    .profiles
                    .iter()
                    .find(|p| p.id == gi.profile_id)
                    .map_or("?", |p| p.name.as_str());
                let bang = if gi.compute_instances.is_empty() { "!" } else { "" };
                format!("{name}@{}{bang}", gi.start)
            })
            .collect())
    }
}
