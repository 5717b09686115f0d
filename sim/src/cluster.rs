//! The simulated cluster: GPUs, their instance slots, and an index of free slices that
//! lets a scheduler find "the first GPU in my order with a free slice of at least size k"
//! in logarithmic time, whatever the number of GPUs.

use std::collections::BTreeSet;

use smartmig_core::mig::{Instance, Layout};

use crate::scenario::ResolvedScenario;
use crate::workload::size_index;

/// Most GPU instances on one GPU.
pub const SLOTS: usize = 7;
/// A job: its index in the run's job list, as a 32-bit id (the engine's queues and slots
/// hold many of them). Made only by [`JobId::of`], which refuses an index that does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(u32);

impl JobId {
    /// The id of the job at `index` of the run's list.
    ///
    /// # Panics
    /// When `index` does not fit 32 bits: a job list that long (over 4·10⁹ jobs, hundreds
    /// of GB) cannot have been read, so this is a bug, never bad input.
    pub fn of(index: usize) -> JobId {
        JobId(u32::try_from(index).expect("a job list fits 32-bit job ids"))
    }

    /// The job's index in the run's list.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One instance slot of a GPU.
#[derive(Debug, Clone, Copy)]
pub struct Slice {
    /// Owning GPU.
    pub gpu: u32,
    /// Compute slices; 0 for an empty slot.
    pub compute: u8,
    /// The placed instance (for transition plans).
    pub instance: Instance,
    /// Running job.
    pub job: Option<JobId>,
    /// When the running job (re)started.
    pub started: f64,
    /// Bumped whenever the running job changes, to cancel stale completions.
    pub epoch: u32,
    /// Created and not being torn down: may take jobs.
    pub ready: bool,
    /// Will be destroyed by a pending re-layout: takes no new jobs.
    pub draining: bool,
}

impl Slice {
    const EMPTY: Slice = Slice {
        gpu: 0,
        compute: 0,
        instance: Instance { start: 0, profile: 0 },
        job: None,
        started: 0.0,
        epoch: 0,
        ready: false,
        draining: false,
    };

    /// Whether a job may start here now.
    pub fn is_free(&self) -> bool {
        self.compute > 0 && self.ready && !self.draining && self.job.is_none()
    }
}

/// One GPU.
#[derive(Debug, Clone)]
pub struct Gpu {
    /// Index into the scenario's models.
    pub model: u16,
    /// Current configuration index.
    pub config: u16,
    /// Configuration a drain is heading to.
    pub target: Option<u16>,
    /// Busy compute slices.
    pub busy: u8,
    /// Order key for schedulers that sort GPUs by layout (CEDF): lower first.
    pub rank: u32,
    /// Key the GPU is indexed under, if it has free slices.
    indexed_key: Option<u32>,
    /// Size indices it is indexed under.
    indexed_mask: u8,
}

/// How GPUs are ordered in the free index; set by the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuOrder {
    /// Most busy slices first (EDF most packed).
    MostBusy,
    /// By `rank` (CEDF: largest mean slice size first).
    Rank,
    /// Least busy first (MET queries by busy level).
    LeastBusy,
}

/// GPUs, slots and the free-slice index.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// GPUs.
    pub gpus: Vec<Gpu>,
    /// `SLOTS` slots per GPU: slot `g * SLOTS + i`.
    pub slices: Vec<Slice>,
    order: GpuOrder,
    /// For each size index, GPUs with a free slice of that size, by (key, gpu).
    by_size: [BTreeSet<(u32, u32)>; 5],
    /// Every free slice, for uniform sampling.
    free_list: Vec<u32>,
    free_pos: Vec<u32>,
    /// GPUs in each configuration, per model.
    pub config_counts: Vec<Vec<u32>>,
}

impl Cluster {
    /// A cluster of the scenario's GPUs, all in configuration 0 until [`Cluster::set_layout`].
    pub fn new(sc: &ResolvedScenario, order: GpuOrder) -> Cluster {
        let gpus: Vec<Gpu> = sc
            .gpus
            .iter()
            .map(|g| Gpu {
                model: g.model as u16,
                config: 0,
                target: None,
                busy: 0,
                rank: 0,
                indexed_key: None,
                indexed_mask: 0,
            })
            .collect();
        let n = gpus.len();
        let config_counts = sc
            .models
            .iter()
            .map(|m| vec![0; m.configurations.len()])
            .collect();
        Cluster {
            gpus,
            slices: vec![Slice::EMPTY; n * SLOTS],
            order,
            by_size: Default::default(),
            free_list: Vec::new(),
            free_pos: vec![u32::MAX; n * SLOTS],
            config_counts,
        }
    }

    /// Slot ids of a GPU.
    pub fn slots(g: u32) -> std::ops::Range<u32> {
        g * SLOTS as u32..(g + 1) * SLOTS as u32
    }

    /// Busy instances of GPU `g` that a move to `target` would destroy (what it stops).
    pub fn busy_destroyed(&self, g: u32, target: &Layout) -> u32 {
        self.busy_destroyed_before(g, target, f64::INFINITY)
    }

    /// [`Cluster::busy_destroyed`], counting only the jobs that started before `since`.
    pub fn busy_destroyed_before(&self, g: u32, target: &Layout, since: f64) -> u32 {
        Cluster::slots(g)
            .map(|id| &self.slices[id as usize])
            .filter(|s| {
                s.compute > 0 && s.job.is_some() && s.started < since && !target.contains(&s.instance)
            })
            .count() as u32
    }

    /// Number of free slices.
    pub fn free_count(&self) -> usize {
        self.free_list.len()
    }

    /// The `i`-th free slice (any order; for uniform sampling).
    pub fn free_at(&self, i: usize) -> u32 {
        self.free_list[i]
    }

    fn key(&self, g: &Gpu) -> u32 {
        match self.order {
            GpuOrder::MostBusy => 7 - u32::from(g.busy.min(7)),
            GpuOrder::Rank => g.rank,
            GpuOrder::LeastBusy => u32::from(g.busy),
        }
    }

    /// Re-indexes GPU `g` after any change to its slots or busy count.
    pub fn refresh(&mut self, g: u32) {
        let gi = g as usize;
        if let Some(old) = self.gpus[gi].indexed_key.take() {
            let mask = self.gpus[gi].indexed_mask;
            for s in 0..5 {
                if mask & (1 << s) != 0 {
                    self.by_size[s].remove(&(old, g));
                }
            }
        }
        let mut mask = 0u8;
        for id in Cluster::slots(g) {
            let sl = &self.slices[id as usize];
            let free = sl.is_free();
            if free {
                mask |= 1 << size_index(sl.compute);
            }
            let listed = self.free_pos[id as usize] != u32::MAX;
            if free && !listed {
                self.free_pos[id as usize] = self.free_list.len() as u32;
                self.free_list.push(id);
            } else if !free && listed {
                let pos = self.free_pos[id as usize] as usize;
                self.free_list.swap_remove(pos);
                if let Some(&moved) = self.free_list.get(pos) {
                    self.free_pos[moved as usize] = pos as u32;
                }
                self.free_pos[id as usize] = u32::MAX;
            }
        }
        if mask != 0 {
            let key = self.key(&self.gpus[gi]);
            for s in 0..5 {
                if mask & (1 << s) != 0 {
                    self.by_size[s].insert((key, g));
                }
            }
            self.gpus[gi].indexed_key = Some(key);
        }
        self.gpus[gi].indexed_mask = mask;
    }

    /// The first GPU in index order with a free slice of size index >= `min_size`.
    pub fn first_gpu_with_free_at_least(&self, min_size: usize) -> Option<u32> {
        (min_size..5)
            .filter_map(|s| self.by_size[s].first())
            .min()
            .map(|&(_, g)| g)
    }

    /// The largest size index with any free slice, and the first GPU in order having one.
    pub fn largest_free(&self) -> Option<(usize, u32)> {
        (0..5)
            .rev()
            .find_map(|s| self.by_size[s].first().map(|&(_, g)| (s, g)))
    }

    /// The first GPU (lowest index) with `busy` busy slices and a free slice of size index `s`.
    /// Only meaningful with [`GpuOrder::LeastBusy`].
    pub fn gpu_with_busy_and_size(&self, busy: u8, s: usize) -> Option<u32> {
        let b = u32::from(busy);
        self.by_size[s].range((b, 0)..(b + 1, 0)).next().map(|&(_, g)| g)
    }

    /// Size indices with any free slice.
    pub fn free_sizes(&self) -> impl Iterator<Item = usize> + '_ {
        (0..5).filter(|&s| !self.by_size[s].is_empty())
    }

    /// The free slice of GPU `g` with the smallest size index >= `min_size`.
    pub fn smallest_free_on(&self, g: u32, min_size: usize) -> Option<u32> {
        Cluster::slots(g)
            .filter(|&id| {
                let sl = &self.slices[id as usize];
                sl.is_free() && size_index(sl.compute) >= min_size
            })
            .min_by_key(|&id| (self.slices[id as usize].compute, id))
    }
}
