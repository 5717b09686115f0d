//! Scheduling heuristics for fixed layouts (docs/model.md §5), as decision functions: given a
//! ready job and the free slices, they return the slice to start it on.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::cluster::{Cluster, GpuOrder};
use crate::workload::Job;

/// A scheduling heuristic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Scheduler {
    /// Earliest deadline first onto the most packed GPU.
    Edf,
    /// Marginal energy-tardiness.
    Met,
    /// Categorical EDF: by throughput class, then deadline; GPUs by mean slice size.
    Cedf,
    /// Earliest deadline first onto a uniformly random free slice.
    Random,
}

/// What a decision may look at besides the cluster.
pub struct PickContext<'a> {
    /// Power curve (W by busy slices) of each model.
    pub power: &'a [Vec<f64>],
    /// Weight `a` of energy against tardiness.
    pub energy_weight: f64,
}

impl Scheduler {
    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scheduler::Edf => "edf",
            Scheduler::Met => "met",
            Scheduler::Cedf => "cedf",
            Scheduler::Random => "random",
        }
    }

    /// How the free index orders GPUs for this heuristic.
    pub fn gpu_order(self) -> GpuOrder {
        match self {
            Scheduler::Edf | Scheduler::Random => GpuOrder::MostBusy,
            Scheduler::Cedf => GpuOrder::Rank,
            Scheduler::Met => GpuOrder::LeastBusy,
        }
    }

    /// The rank under which a GPU whose configuration has these slice sizes is visited
    /// when the free index orders by rank ([`GpuOrder::Rank`]): CEDF visits GPUs by mean
    /// slice size, largest first (ties by GPU index).
    pub fn gpu_rank(self, sizes: &[u8]) -> u32 {
        let mean = sizes.iter().map(|&s| f64::from(s)).sum::<f64>() / sizes.len().max(1) as f64;
        (1000.0 - mean * 100.0).round() as u32
    }

    /// Queue priority of a job: lower first.
    pub fn queue_key(self, job: &Job) -> (u8, f64) {
        match self {
            Scheduler::Cedf => (job.throughput_class(), job.deadline),
            _ => (0, job.deadline),
        }
    }

    /// The slice to start `job` on (with `rem` of its work left), or `None` if no slice is free.
    pub fn pick(
        self,
        cluster: &Cluster,
        ctx: &PickContext<'_>,
        job: &Job,
        rem: f64,
        now: f64,
        rng: &mut ChaCha8Rng,
    ) -> Option<u32> {
        match self {
            Scheduler::Edf | Scheduler::Cedf => {
                if let Some(smin) = min_size_meeting_deadline(job, rem, now) {
                    if let Some(g) = cluster.first_gpu_with_free_at_least(smin) {
                        return cluster.smallest_free_on(g, smin);
                    }
                }
                let (s, g) = cluster.largest_free()?;
                cluster.smallest_free_on(g, s)
            }
            Scheduler::Random => {
                let n = cluster.free_count();
                (n > 0).then(|| cluster.free_at(rng.random_range(0..n)))
            }
            Scheduler::Met => pick_met(cluster, ctx, job, rem, now),
        }
    }
}

/// The smallest slice size index on which the job still meets its deadline.
pub fn min_size_meeting_deadline(job: &Job, rem: f64, now: f64) -> Option<usize> {
    (0..5).find(|&s| now + rem * job.times[s] <= job.deadline)
}

/// MET: the free slice minimising (a·ΔE/P7 + T)/(a+1), where ΔE is the extra energy the
/// GPU draws while the job runs, as if no other job joined it, and P7 (full-GPU power)
/// turns it into minutes so that both terms share a unit.
fn pick_met(cluster: &Cluster, ctx: &PickContext<'_>, job: &Job, rem: f64, now: f64) -> Option<u32> {
    let a = ctx.energy_weight;
    let mut best: Option<(f64, u32, usize)> = None;
    for s in cluster.free_sizes() {
        let k = crate::workload::SLICE_SIZES[s];
        let dur = rem * job.times[s];
        let tard = (now + dur - job.deadline).max(0.0);
        for busy in 0..=7u8 {
            let Some(g) = cluster.gpu_with_busy_and_size(busy, s) else {
                continue;
            };
            let p = &ctx.power[cluster.gpus[g as usize].model as usize];
            let top = p.len() - 1;
            let de = (p[usize::from(busy + k).min(top)] - p[usize::from(busy).min(top)]) * dur / p[top];
            let cost = (a * de + tard) / (a + 1.0);
            if best.is_none_or(|(c, _, _)| cost < c) {
                best = Some((cost, g, s));
            }
        }
    }
    let (_, g, s) = best?;
    cluster.smallest_free_on(g, s)
}
