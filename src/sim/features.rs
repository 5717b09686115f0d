//! The mean-field features of MODEL.md §6, maintained as events happen so that reading
//! them costs the same whatever the number of GPUs and jobs.
//!
//! Per GPU model, in this order (D = K + 26):
//! - `K` shares of the model's GPUs in each configuration;
//! - waiting jobs per GPU;
//! - waiting jobs per GPU by time to deadline, bins edged at −100, 0, 0.05, 0.2, 0.5, 1,
//!   5, 10, 20, 30, ∞ minutes (jobs already more than 100 minutes late count in the
//!   first bin);
//! - waiting jobs per GPU by remaining work on a 1g slice, bins edged at 0, 1, 2, 5, 10,
//!   20, 40, 60, ∞ minutes;
//! - waiting jobs per GPU by throughput class 1..4;
//! - busy share of the model's compute slices;
//! - time of day as sin and cos of its angle.
//!
//! Counts are divided by the number of GPUs so that one policy reads a small and a large
//! cluster alike (the mean-field view).

use crate::workload::Job;

/// Time-to-deadline bin edges, minutes.
pub const DEADLINE_EDGES: [f64; 11] = [
    -100.0,
    0.0,
    0.05,
    0.2,
    0.5,
    1.0,
    5.0,
    10.0,
    20.0,
    30.0,
    f64::INFINITY,
];
/// Remaining-work bin edges (on a 1g slice), minutes.
pub const DURATION_EDGES: [f64; 9] = [0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 60.0, f64::INFINITY];
/// Features besides the K configuration shares.
pub const EXTRA_FEATURES: usize = 1 + (DEADLINE_EDGES.len() - 1) + (DURATION_EDGES.len() - 1) + 4 + 1 + 2;

/// Feature vector length for `k` configurations.
pub fn feature_dim(k: usize) -> usize {
    k + EXTRA_FEATURES
}

/// Deadlines are counted in cells of this many minutes (1 s).
const CELL: f64 = 1.0 / 60.0;

/// Counts of waiting jobs by absolute deadline, with prefix sums in O(log n).
#[derive(Debug, Clone)]
struct Fenwick {
    tree: Vec<u32>,
}

impl Fenwick {
    fn new(n: usize) -> Fenwick {
        Fenwick { tree: vec![0; n + 1] }
    }
    fn add(&mut self, i: usize, delta: i32) {
        let mut i = i + 1;
        while i < self.tree.len() {
            self.tree[i] = (self.tree[i] as i64 + i64::from(delta)) as u32;
            i += i & i.wrapping_neg();
        }
    }
    /// Sum of cells [0, i).
    fn prefix(&self, i: usize) -> u32 {
        let mut i = i.min(self.tree.len() - 1);
        let mut s = 0;
        while i > 0 {
            s += self.tree[i];
            i -= i & i.wrapping_neg();
        }
        s
    }
}

/// Waiting-queue statistics, updated on every enqueue and start.
#[derive(Debug, Clone)]
pub struct FeatureTracker {
    deadlines: Fenwick,
    cells: usize,
    durations: [u32; DURATION_EDGES.len() - 1],
    classes: [u32; 4],
    waiting: u32,
}

impl FeatureTracker {
    /// A tracker for jobs whose deadlines end by `horizon` minutes.
    pub fn new(horizon: f64) -> FeatureTracker {
        let cells = (horizon.max(0.0) / CELL).ceil() as usize + 2;
        FeatureTracker {
            deadlines: Fenwick::new(cells),
            cells,
            durations: [0; DURATION_EDGES.len() - 1],
            classes: [0; 4],
            waiting: 0,
        }
    }

    fn cell(&self, t: f64) -> usize {
        ((t.max(0.0) / CELL) as usize).min(self.cells - 1)
    }

    fn duration_bin(work_1g: f64) -> usize {
        DURATION_EDGES[1..]
            .iter()
            .position(|&e| work_1g < e)
            .unwrap_or(DURATION_EDGES.len() - 2)
    }

    fn update(&mut self, job: &Job, rem: f64, delta: i32) {
        let c = self.cell(job.deadline);
        self.deadlines.add(c, delta);
        let d = Self::duration_bin(rem * job.times[0]);
        let k = usize::from(job.throughput_class().clamp(1, 4)) - 1;
        let apply = |x: &mut u32| *x = (i64::from(*x) + i64::from(delta)) as u32;
        apply(&mut self.durations[d]);
        apply(&mut self.classes[k]);
        apply(&mut self.waiting);
    }

    /// A job joins the queue with `rem` of its work left.
    pub fn enqueue(&mut self, job: &Job, rem: f64) {
        self.update(job, rem, 1);
    }

    /// A job leaves the queue (it started).
    pub fn dequeue(&mut self, job: &Job, rem: f64) {
        self.update(job, rem, -1);
    }

    /// Jobs waiting.
    pub fn waiting(&self) -> u32 {
        self.waiting
    }

    /// Appends the features of one GPU model to `out`.
    ///
    /// `config_counts`: the model's GPUs per configuration; `busy_slices`: its busy compute
    /// slices; `gpus_total`: all GPUs (queue counts are per GPU of the cluster).
    pub fn write(
        &self,
        now: f64,
        config_counts: &[u32],
        busy_slices: u32,
        gpus_total: usize,
        out: &mut Vec<f32>,
    ) {
        let n_model = config_counts.iter().sum::<u32>().max(1) as f32;
        let per_gpu = 1.0 / gpus_total.max(1) as f32;
        out.extend(config_counts.iter().map(|&c| c as f32 / n_model));
        out.push(self.waiting as f32 * per_gpu);
        // Deadline bins: cumulative counts below now + edge; the first bin takes everything
        // below the second edge, the last everything from the last finite edge.
        let below = |edge: f64| -> u32 {
            if edge.is_infinite() {
                self.waiting
            } else {
                self.deadlines.prefix(self.cell(now + edge))
            }
        };
        let mut prev = 0;
        for &edge in &DEADLINE_EDGES[1..] {
            let b = below(edge);
            out.push(b.saturating_sub(prev) as f32 * per_gpu);
            prev = b;
        }
        out.extend(self.durations.iter().map(|&c| c as f32 * per_gpu));
        out.extend(self.classes.iter().map(|&c| c as f32 * per_gpu));
        out.push(busy_slices as f32 / (7.0 * n_model));
        let angle = (now.rem_euclid(1440.0) / 1440.0 * std::f64::consts::TAU) as f32;
        out.push(angle.sin());
        out.push(angle.cos());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(deadline: f64, t1: f64) -> Job {
        Job {
            id: 0,
            release: 0.0,
            deadline,
            times: [t1, t1 / 2.0, t1 / 3.0, t1 / 4.0, t1 / 7.0],
            class: 0,
        }
    }

    #[test]
    fn deadline_bins_move_with_time_without_rescans() {
        let mut f = FeatureTracker::new(100.0);
        let jobs = [job(10.0, 3.0), job(12.0, 30.0), job(40.0, 0.5)];
        for j in &jobs {
            f.enqueue(j, 1.0);
        }
        let mut out = Vec::new();
        f.write(0.0, &[2, 0], 0, 2, &mut out);
        assert_eq!(out.len(), feature_dim(2));
        let deadline_bins = |o: &[f32]| o[3..13].to_vec();
        // At t=0: deadlines 10 and 12 are in [10, 20), 40 in [30, ∞); per GPU (2 GPUs).
        assert_eq!(
            deadline_bins(&out),
            vec![0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.5]
        );
        out.clear();
        // At t=11: job 1 is late by 1 ([−100, 0) bin), job 2 has 1 minute left ([1, 5)),
        // job 3 has 29 ([20, 30)).
        f.write(11.0, &[2, 0], 0, 2, &mut out);
        assert_eq!(
            deadline_bins(&out),
            vec![0.5, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.5, 0.0]
        );
        f.dequeue(&jobs[0], 1.0);
        out.clear();
        f.write(11.0, &[2, 0], 0, 2, &mut out);
        assert_eq!(deadline_bins(&out)[0], 0.0);
        assert_eq!(out[2], 1.0, "two jobs waiting over two GPUs");
    }

    #[test]
    fn duration_and_class_bins_count_remaining_work() {
        let mut f = FeatureTracker::new(100.0);
        f.enqueue(&job(50.0, 3.0), 1.0); // 3 min on 1g: [2, 5)
        f.enqueue(&job(50.0, 30.0), 0.5); // 15 min left: [10, 20)
        let mut out = Vec::new();
        f.write(0.0, &[1], 7, 1, &mut out);
        let dur = &out[1 + 1 + 10..1 + 1 + 10 + 8];
        assert_eq!(dur, &[0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
        let classes = &out[1 + 1 + 10 + 8..1 + 1 + 10 + 8 + 4];
        assert_eq!(classes, &[2.0, 0.0, 0.0, 0.0], "linear jobs are class 1");
        assert_eq!(out[1 + 1 + 10 + 8 + 4], 1.0, "7 of 7 slices busy");
    }
}
