//! The slice choice (CEDF-style, docs/model.md §5) and the whole routing of one job.

use super::classes::{glob_match, speedup_on, JobClass};
use super::config::RoutingConfig;
use super::hints::{parse_hints, HintError, Hints};
use super::request::{parse_request, rewrite, GpuEntry, GpuRequest, RequestError, TresField, TresStrings};
use super::snapshot::Snapshot;
use crate::mig::{GpuModel, Kind};

/// A GPU type routing may choose.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Slurm type name (`3g.20gb`).
    pub name: String,
    /// Compute slices (what sets speed).
    pub compute: u8,
    /// Memory of one instance in GB.
    pub memory_gb: f64,
    /// Most instances one GPU holds.
    pub max_count: u64,
}

impl Candidate {
    /// Whether one instance has the job's memory and one GPU holds what must share it.
    pub fn holds(&self, need: &Need) -> bool {
        self.memory_gb + 1e-9 >= need.gpumem_gb && need.on_one_gpu <= self.max_count
    }
}

/// The candidate kinds: the base sizes and the double-memory 1g (same speed as 1g, more
/// memory). `1g+me` is left out: media engines are a resource users ask for by name.
const CANDIDATE_KINDS: [Kind; 6] = [Kind::G1, Kind::G1Double, Kind::G2, Kind::G3, Kind::G4, Kind::G7];

/// The candidates of the configured models, slowest first, then smallest memory first.
pub fn candidates(models: &[GpuModel]) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    for p in models
        .iter()
        .flat_map(|m| m.profiles.iter())
        .filter(|p| CANDIDATE_KINDS.contains(&p.kind))
    {
        match out.iter_mut().find(|c| c.name.eq_ignore_ascii_case(&p.name)) {
            // The same name on two models (1g.10gb is 1g* on A100-40GB, 1g on A100-80GB):
            // keep the weaker promise so every instance of that name satisfies it.
            Some(c) => {
                c.compute = c.compute.min(p.compute);
                c.memory_gb = c.memory_gb.min(p.memory_gb);
                c.max_count = c.max_count.max(u64::from(p.max_count));
            }
            None => out.push(Candidate {
                name: p.name.clone(),
                compute: p.compute,
                memory_gb: p.memory_gb,
                max_count: u64::from(p.max_count),
            }),
        }
    }
    out.sort_by(|a, b| {
        a.compute
            .cmp(&b.compute)
            .then(a.memory_gb.total_cmp(&b.memory_gb))
    });
    out
}

/// What the choice needs to know about a job.
#[derive(Debug, Clone, PartialEq)]
pub struct Need {
    /// Speed-up over 1g on 1g/2g/3g/4g/7g.
    pub speedup: [f64; 5],
    /// GPU memory per instance, GB.
    pub gpumem_gb: f64,
    /// Compute slices of the slice `run_min` refers to.
    pub ref_compute: u8,
    /// Run time on the reference slice, minutes.
    pub run_min: f64,
    /// Minutes from now to the due time; None: the site's soft due rule.
    pub due_in_min: Option<f64>,
    /// Instances asked for.
    pub count: u64,
    /// Instances that must fit on one GPU: the count of a per-node, per-task or per-socket
    /// request; 1 for `--gpus` (a per-job count, which Slurm may spread over GPUs).
    pub on_one_gpu: u64,
}

impl Need {
    /// Estimated run time on a slice of `compute` slices, minutes.
    pub fn run_on(&self, compute: u8) -> f64 {
        self.run_min * speedup_on(&self.speedup, self.ref_compute) / speedup_on(&self.speedup, compute)
    }
}

/// How available a type is in the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Availability {
    /// Enough instances idle now.
    Free,
    /// Enough idle now or expected idle within the snapshot's horizon.
    SoonFree,
    /// Not enough, or no snapshot to tell.
    Unknown,
}

/// The chosen slice.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// Index into the candidates.
    pub index: usize,
    /// Estimated run time on it, minutes.
    pub run_min: f64,
    /// The due time used, minutes from now.
    pub due_in_min: f64,
    /// Whether it is expected to finish by the due time.
    pub meets_due: bool,
    /// Its availability in the snapshot.
    pub availability: Availability,
}

/// CEDF's slice choice for one job: the slowest candidate that fits the job's memory and
/// still meets its due time, preferring types free (then soon free) in the snapshot; if
/// none meets it, the fastest that fits. `soft_due` gives the due time (minutes from now)
/// of a job without one, from its run time on 7g. None when no candidate has enough
/// memory or instances.
pub fn choose(
    cands: &[Candidate],
    need: &Need,
    soft_due: impl Fn(f64) -> f64,
    snapshot: Option<&Snapshot>,
) -> Option<Choice> {
    let due_in = need.due_in_min.unwrap_or_else(|| soft_due(need.run_on(7)));
    let availability = |c: &Candidate| -> (Availability, f64) {
        let Some(s) = snapshot else {
            return (Availability::Unknown, 0.0);
        };
        let st = s.state(&c.name);
        if u64::from(st.free) >= need.count {
            (Availability::Free, 0.0)
        } else if u64::from(st.free) + u64::from(st.soon_free) >= need.count {
            // Jobs already queued compete for the instances that free up.
            (
                Availability::SoonFree,
                s.soon_free_within_s / 60.0 * s.queue_pressure.max(1.0),
            )
        } else {
            (Availability::Unknown, 0.0)
        }
    };
    let mut best: Option<(Choice, (u8, u8, u8))> = None;
    for (index, c) in cands.iter().enumerate() {
        if !c.holds(need) {
            continue;
        }
        let (avail, wait) = availability(c);
        let run_min = need.run_on(c.compute);
        let meets_due = wait + run_min <= due_in + 1e-9;
        // Smaller key wins. Meeting the due time first; among those, free or soon free
        // (the wait for a soon-free one is already in `meets_due`), then the slowest
        // slice. Among those missing it, the fastest slice, then free or soon free.
        let unknown = u8::from(avail == Availability::Unknown);
        let key = if meets_due {
            (0, unknown, c.compute)
        } else {
            (1, u8::MAX - c.compute, unknown)
        };
        if best.as_ref().is_none_or(|(_, k)| key < *k) {
            let choice = Choice {
                index,
                run_min,
                due_in_min: due_in,
                meets_due,
                availability: avail,
            };
            best = Some((choice, key));
        }
    }
    best.map(|(c, _)| c)
}

/// Whether the job's hints say its untyped GPUs are `gpu:mig` ones (`gpus=mig`, set by
/// the cli_filter plugin for `srun`). Bad hints are reported when the job is routed.
fn untyped_marked_mig(job: &Job<'_>) -> bool {
    job.comment
        .and_then(|c| parse_hints(c).ok())
        .is_some_and(|h| h.gpus_mig == Some(true))
}

/// Why no candidate holds a job: too little memory everywhere, or too many instances for
/// one GPU of every type with enough memory.
fn no_fit(present: &[Candidate], need: &Need) -> RouteError {
    let roomy: Vec<&Candidate> = present
        .iter()
        .filter(|c| c.memory_gb + 1e-9 >= need.gpumem_gb)
        .collect();
    match roomy.iter().max_by_key(|c| c.max_count) {
        None => RouteError::NoMemory {
            need_gb: need.gpumem_gb,
            largest_gb: present.iter().map(|c| c.memory_gb).fold(0.0, f64::max),
        },
        Some(c) => RouteError::NoRoom {
            count: need.on_one_gpu,
            most: format!("{} holds at most {} per GPU", c.name, c.max_count),
        },
    }
}

/// A job as the plugin sees it at submission.
#[derive(Debug, Clone, Default)]
pub struct Job<'a> {
    /// The four tres strings.
    pub tres: TresStrings<'a>,
    /// `--job-name`.
    pub name: Option<&'a str>,
    /// `--account`.
    pub account: Option<&'a str>,
    /// `--partition` (may be a comma list).
    pub partition: Option<&'a str>,
    /// `--comment`.
    pub comment: Option<&'a str>,
    /// `--time` in minutes.
    pub time_limit_min: Option<u32>,
    /// `--deadline`, Unix seconds.
    pub deadline: Option<i64>,
    /// `--begin`, Unix seconds.
    pub begin: Option<i64>,
    /// `--time-min` in minutes.
    pub time_min_min: Option<u32>,
    /// Now, Unix seconds.
    pub now: i64,
}

/// What to do with a job.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Leave the job as it is.
    Unchanged(&'static str),
    /// Rewrite it.
    Routed(Routed),
}

/// A routed job: the new request fields and the message for the user.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    /// The chosen type.
    pub gpu_type: String,
    /// New text of the tres fields that changed.
    pub tres: Vec<(TresField, String)>,
    /// New time limit in minutes (None: unchanged).
    pub time_limit_min: Option<u32>,
    /// The class used.
    pub class: String,
    /// One line for the user.
    pub message: String,
}

/// Why a job is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RouteError {
    /// The GPU request is bad.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// A hint is bad.
    #[error("--comment: {0}")]
    Hint(#[from] HintError),
    /// A class hint names no known class.
    #[error("--comment: unknown class `{name}` (known: {known})")]
    UnknownClass {
        /// The name given.
        name: String,
        /// The classes known.
        known: String,
    },
    /// No slice present in the cluster has the memory asked for.
    #[error("no MIG slice in the cluster has {need_gb} GB of memory; the largest has {largest_gb} GB")]
    NoMemory {
        /// Memory asked for, GB.
        need_gb: f64,
        /// Memory of the largest slice, GB.
        largest_gb: f64,
    },
    /// No type with enough memory fits that many instances on one GPU.
    #[error("{count} instances of one type do not fit on one GPU: {most}; ask for fewer per node, or for {count} anywhere with --gpus=mig:{count}")]
    NoRoom {
        /// Instances that must share a GPU.
        count: u64,
        /// The most any suitable type present holds, e.g. `7g.40gb holds 1 per GPU`.
        most: String,
    },
    /// The fastest slice present cannot finish the job by its `--deadline`.
    #[error("--deadline: no MIG slice present can finish the job in time: on {gpu_type}, the fastest, it needs {need_min} min, and {left_min} min are left from its earliest start; ask for a later deadline, or a shorter --time")]
    PastDeadline {
        /// The slice chosen.
        gpu_type: String,
        /// Minutes the job needs there (its time limit, or `--time-min`).
        need_min: u32,
        /// Minutes from its earliest start to its deadline.
        left_min: i64,
    },
    /// The configuration leaves nothing to route to.
    #[error("the configured GPU models have no MIG profile to route to")]
    NoCandidates,
    /// An untyped GPU request on a cluster whose MIG nodes carry padding records, which
    /// Slurm could hand it.
    #[error("untyped GPU request `{0}`: this cluster's MIG nodes carry padding records (not GPUs) that Slurm could give it; ask for --gres=gpu:mig:N or a MIG type")]
    UntypedPadded(String),
}

/// Minutes a slice chosen for a job with a `--deadline` keeps in hand: its time limit is
/// rounded up to whole minutes, and Slurm checks it against the deadline a moment later.
const DEADLINE_MARGIN_MIN: f64 = 1.0;

/// Routing state built once from the config: classes and candidates.
#[derive(Debug, Clone)]
pub struct Router {
    config: RoutingConfig,
    /// The MIG nodes carry padding records (`[controller.central] padding`).
    padded: bool,
    classes: Vec<JobClass>,
    candidates: Vec<Candidate>,
    static_types: Vec<String>,
    max_auto: u64,
}

impl Router {
    /// Builds a router for the cluster's GPU models.
    pub fn new(config: &RoutingConfig, models: &[GpuModel]) -> Result<Router, RouteError> {
        let candidates = candidates(models);
        let max_auto = candidates
            .iter()
            .map(|c| c.max_count)
            .max()
            .ok_or(RouteError::NoCandidates)?;
        Ok(Router {
            config: config.clone(),
            padded: false,
            classes: config.all_classes(),
            candidates,
            static_types: Vec::new(),
            max_auto,
        })
    }

    /// Builds a router from a resolved smartmig.toml; without a usable snapshot it routes
    /// only to the types of `policy.static_layout` (the layout GPUs keep when the
    /// controller is not running), since Slurm refuses a type no node has.
    pub fn from_resolved(r: &crate::config::Resolved) -> Result<Router, RouteError> {
        let models: Vec<GpuModel> = r.models.iter().map(|m| m.model.clone()).collect();
        let mut static_types: Vec<String> = Vec::new();
        for m in &r.models {
            for &ci in &m.static_layout {
                for inst in m.configurations[ci].layout.instances() {
                    let name = &m.model.profiles[inst.profile].name;
                    if !static_types.contains(name) {
                        static_types.push(name.clone());
                    }
                }
            }
        }
        let mut router = Router::new(&r.config.routing, &models)?.with_static_types(static_types);
        router.padded = r.config.controller.central.padding;
        Ok(router)
    }

    /// A router for nodes that carry padding records or not (`[controller.central]
    /// padding`): untyped requests it does not route are then refused.
    pub fn with_padding(mut self, padded: bool) -> Router {
        self.padded = padded;
        self
    }

    /// Restricts routing without a snapshot to these types (empty: no restriction).
    pub fn with_static_types(mut self, types: Vec<String>) -> Router {
        self.static_types = types;
        self
    }

    /// The types routing may choose without a snapshot (empty: any candidate).
    pub fn static_types(&self) -> &[String] {
        &self.static_types
    }

    /// The candidates that exist now: those the snapshot lists, or without one the
    /// static layout's types.
    fn present(&self, snapshot: Option<&Snapshot>) -> Vec<Candidate> {
        let listed = |name: &str| match snapshot {
            Some(s) if !s.types.is_empty() => s.types.contains_key(name),
            Some(_) => true,
            None => self.static_types.is_empty() || self.static_types.iter().any(|t| t == name),
        };
        self.candidates
            .iter()
            .filter(|c| listed(&c.name))
            .cloned()
            .collect()
    }

    /// The routing config.
    pub fn config(&self) -> &RoutingConfig {
        &self.config
    }

    /// The candidates, slowest first.
    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    /// The class of a job: hint, then the first matching rule, then the default.
    fn class_of(&self, job: &Job<'_>, hints: &Hints) -> Result<&JobClass, RouteError> {
        let find = |name: &str| self.classes.iter().find(|c| c.name == name);
        if let Some(name) = &hints.class {
            return find(name).ok_or_else(|| RouteError::UnknownClass {
                name: name.clone(),
                known: self
                    .classes
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let matches = |glob: &Option<String>, value: Option<&str>, list: bool| match glob {
            None => true,
            Some(g) => value.is_some_and(|v| {
                if list {
                    v.split(',').any(|p| glob_match(g, p))
                } else {
                    glob_match(g, v)
                }
            }),
        };
        let rule = self.config.rules.iter().find(|r| {
            matches(&r.name, job.name, false)
                && matches(&r.account, job.account, false)
                && matches(&r.partition, job.partition, true)
        });
        let name = rule.map_or(self.config.default_class.as_str(), |r| r.class.as_str());
        // `check` guarantees rule and default classes exist; fall back to the last
        // built-in (`default`) rather than fail if a caller skipped it.
        Ok(find(name).unwrap_or_else(|| &self.classes[self.classes.len() - 1]))
    }

    /// Routes one job: validate its GPU request and, if it asks for routing, choose a slice.
    pub fn route(&self, job: &Job<'_>, snapshot: Option<&Snapshot>) -> Result<Outcome, RouteError> {
        let entries: Vec<GpuEntry> = match parse_request(&job.tres, self.max_auto)? {
            GpuRequest::None => return Ok(Outcome::Unchanged("no GPU request")),
            GpuRequest::Concrete(_) => return Ok(Outcome::Unchanged("concrete GPU type")),
            GpuRequest::Untyped(e) if !self.config.route_untyped && !untyped_marked_mig(job) => {
                if self.padded {
                    let asked: Vec<String> = e.iter().map(ToString::to_string).collect();
                    return Err(RouteError::UntypedPadded(asked.join(",")));
                }
                return Ok(Outcome::Unchanged("untyped GPU request (route_untyped = false)"));
            }
            GpuRequest::Untyped(e) => {
                if let Some(big) = e
                    .iter()
                    .find(|e| e.field != TresField::PerJob && e.count > self.max_auto)
                {
                    return Err(RequestError::TooMany {
                        entry: big.to_string(),
                        count: big.count,
                        max: self.max_auto,
                    }
                    .into());
                }
                e
            }
            GpuRequest::Auto(e) => e,
        };
        let hints = job.comment.map(parse_hints).transpose()?.unwrap_or_default();
        let class = self.class_of(job, &hints)?;
        let time_on = hints.time_on.unwrap_or(self.config.time_refers_to);
        let ref_compute = match time_on {
            Kind::G1 => 1,
            Kind::G2 => 2,
            Kind::G3 => 3,
            Kind::G4 => 4,
            _ => 7,
        };
        // Slurm measures a deadline from the job's earliest start: `--begin`, or now.
        let start = job.begin.map_or(job.now, |b| b.max(job.now));
        let due_in_min = match (job.deadline, hints.due_min) {
            (Some(d), _) => Some(d.saturating_sub(start) as f64 / 60.0),
            (None, Some(m)) => Some(m),
            (None, None) => None,
        };
        let need = Need {
            speedup: hints.speedup.unwrap_or(class.speedup),
            gpumem_gb: hints.gpumem_gb.unwrap_or(class.gpumem_gb),
            ref_compute,
            run_min: job
                .time_limit_min
                .map_or(self.config.default_runtime_min, f64::from),
            // A `--deadline` is Slurm's to enforce: a slice must fit the time limit written
            // in whole minutes, checked a moment after this.
            due_in_min: due_in_min.map(|d| match job.deadline {
                Some(_) => d - DEADLINE_MARGIN_MIN,
                None => d,
            }),
            count: entries.iter().map(|e| e.count).max().unwrap_or(1),
            on_one_gpu: entries
                .iter()
                .filter(|e| e.field != TresField::PerJob)
                .map(|e| e.count)
                .max()
                .unwrap_or(1),
        };
        let present = self.present(snapshot);
        let choice = choose(&present, &need, |t7| self.config.soft_due_min(t7), snapshot)
            .ok_or_else(|| no_fit(&present, &need))?;
        let chosen = &present[choice.index];
        let cap = self.config.time_cap(job.partition);
        let time_limit_min = job.time_limit_min.map(|_| {
            // Below Slurm's NO_VAL (u32::MAX - 1, "unset") and INFINITE (u32::MAX).
            let t = choice.run_min.ceil().clamp(1.0, f64::from(u32::MAX - 2)) as u32;
            let t = cap.map_or(t, |c| t.min(c));
            // Slurm refuses a time limit below `--time-min`.
            job.time_min_min.map_or(t, |m| t.max(m))
        });
        // Slurm (from 23.02.5) refuses a job whose time (its `--time-min` if given, else its
        // limit) runs past its `--deadline` from its earliest start; 22.05 would take it and
        // cancel it at the deadline. Said here, with the slice that made it so.
        if let (Some(deadline), Some(limit)) = (job.deadline, time_limit_min) {
            let need = job.time_min_min.unwrap_or(limit);
            let left_s = deadline.saturating_sub(start);
            if i64::from(need).saturating_mul(60) > left_s {
                return Err(RouteError::PastDeadline {
                    gpu_type: chosen.name.clone(),
                    need_min: need,
                    left_min: left_s.max(0) / 60,
                });
            }
        }
        let tres = rewrite(&job.tres, &entries, &chosen.name);
        let mut message = format!(
            "smartmig: routed to gpu:{}:{} (class {}, est. {:.0} min on {}g, due in {:.0} min{}{})",
            chosen.name,
            need.count,
            if hints.speedup.is_some() {
                format!("{} with speedup hint", class.name)
            } else {
                class.name.clone()
            },
            choice.run_min,
            chosen.compute,
            due_in_min.unwrap_or(choice.due_in_min),
            if choice.meets_due {
                ""
            } else {
                ", fastest slice: due time cannot be met"
            },
            match (snapshot, choice.availability) {
                (None, _) => ", no controller snapshot",
                (Some(_), Availability::Free) => ", free now",
                (Some(_), Availability::SoonFree) => ", free soon",
                (Some(_), Availability::Unknown) => ", busy now",
            }
        );
        if let (Some(old), Some(new)) = (job.time_limit_min, time_limit_min) {
            let capped = if cap == Some(new) && f64::from(new) < choice.run_min.ceil() {
                " (capped by partition limit)"
            } else {
                ""
            };
            message.push_str(&format!("; time limit {old} -> {new} min{capped}"));
        }
        Ok(Outcome::Routed(Routed {
            gpu_type: chosen.name.clone(),
            tres,
            time_limit_min,
            class: class.name.clone(),
            message,
        }))
    }
}

#[cfg(test)]
mod tests;
