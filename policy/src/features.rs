//! The mean-field features of docs/model.md §6, maintained as events happen so that reading
//! them costs the same whatever the number of GPUs and jobs.
//!
//! What is computed, in which order and with which bins is a
//! [`FeatureLayout`](crate::FeatureLayout), the same one a policy file carries
//! in its metadata; [`layout`] is smartmig's default. Durations are remaining work on a
//! 1g slice; time to deadline is `deadline − now` (negative once late). Splitting the
//! histograms by slice size is not computed here (a layout asking for it is refused).

use crate::contract::{TimeOfDay, PAPER_EDGES_MIN};
use crate::job::Job;
use crate::FeatureLayout;

/// Remaining-work histogram lower edges (on a 1g slice), minutes.
pub const DURATION_EDGES_MIN: [f64; 8] = [0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 60.0];

/// smartmig's feature layout for `k` configurations: duration bins above, the paper's
/// deadline bins, the queue summary and sin/cos time of day.
pub fn layout(k: usize) -> FeatureLayout {
    FeatureLayout {
        configurations: k,
        duration_edges_min: DURATION_EDGES_MIN.to_vec(),
        deadline_edges_min: PAPER_EDGES_MIN.to_vec(),
        slice_sizes: Vec::new(),
        time_of_day: TimeOfDay::SinCos,
        queue_summary: true,
    }
}

/// Feature vector length of [`layout`] for `k` configurations.
pub fn feature_dim(k: usize) -> usize {
    layout(k).dim()
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
            self.tree[i] = (i64::from(self.tree[i]) + i64::from(delta)) as u32;
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

/// A layout the tracker cannot compute.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("feature layout not supported by the simulator: {0}")]
pub struct UnsupportedLayout(pub String);

/// Waiting-queue statistics, updated on every enqueue and start.
#[derive(Debug, Clone)]
pub struct FeatureTracker {
    layout: FeatureLayout,
    deadlines: Fenwick,
    cells: usize,
    durations: Vec<u32>,
    classes: [u32; 4],
    waiting: u32,
}

impl FeatureTracker {
    /// A tracker for `layout`, for jobs whose deadlines end by `horizon` minutes.
    pub fn new(layout: FeatureLayout, horizon: f64) -> Result<FeatureTracker, UnsupportedLayout> {
        layout.validate().map_err(|e| UnsupportedLayout(e.to_string()))?;
        if !layout.slice_sizes.is_empty() {
            return Err(UnsupportedLayout("histograms split by slice size".into()));
        }
        let cells = (horizon.max(0.0) / CELL).ceil() as usize + 2;
        Ok(FeatureTracker {
            deadlines: Fenwick::new(cells),
            cells,
            durations: vec![0; layout.duration_edges_min.len()],
            classes: [0; 4],
            waiting: 0,
            layout,
        })
    }

    fn cell(&self, t: f64) -> usize {
        ((t.max(0.0) / CELL) as usize).min(self.cells - 1)
    }

    fn update(&mut self, job: &Job, rem: f64, delta: i32) {
        let c = self.cell(job.deadline);
        self.deadlines.add(c, delta);
        let d = FeatureLayout::bin(&self.layout.duration_edges_min, rem * job.times[0]);
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

    /// Appends the features of one GPU model to `out`, in the layout's order.
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
        out.extend(self.durations.iter().map(|&c| c as f32 * per_gpu));
        // Deadline bin i holds deadlines in [now + e_i, now + e_{i+1}); bin 0 also all below.
        let edges = &self.layout.deadline_edges_min;
        let mut prev = 0;
        for i in 0..edges.len() {
            let below = match edges.get(i + 1) {
                Some(&e) => self.deadlines.prefix(self.cell(now + e)),
                None => self.waiting,
            };
            out.push(below.saturating_sub(prev) as f32 * per_gpu);
            prev = below;
        }
        if self.layout.queue_summary {
            out.push(self.waiting as f32 * per_gpu);
            out.extend(self.classes.iter().map(|&c| c as f32 * per_gpu));
            out.push(busy_slices as f32 / (7.0 * n_model));
        }
        if self.layout.time_of_day == TimeOfDay::SinCos {
            let angle = (now.rem_euclid(1440.0) / 1440.0 * std::f64::consts::TAU) as f32;
            out.push(angle.sin());
            out.push(angle.cos());
        }
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

    fn tracker() -> FeatureTracker {
        FeatureTracker::new(layout(2), 100.0).unwrap()
    }

    const DEADLINE: std::ops::Range<usize> = 2 + 8..2 + 8 + 10;

    #[test]
    fn deadline_bins_move_with_time_without_rescans() {
        let mut f = tracker();
        let jobs = [job(10.0, 3.0), job(12.0, 30.0), job(40.0, 0.5)];
        for j in &jobs {
            f.enqueue(j, 1.0);
        }
        let mut out = Vec::new();
        f.write(0.0, &[2, 0], 0, 2, &mut out);
        assert_eq!(out.len(), feature_dim(2));
        // At t=0: deadlines 10 and 12 are in [10, 20), 40 in [30, ∞); per GPU (2 GPUs).
        assert_eq!(
            out[DEADLINE].to_vec(),
            vec![0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.5]
        );
        out.clear();
        // At t=11: job 1 is late by 1 (bin 0), job 2 has 1 minute left ([1, 5)), job 3 29 ([20, 30)).
        f.write(11.0, &[2, 0], 0, 2, &mut out);
        assert_eq!(
            out[DEADLINE].to_vec(),
            vec![0.5, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.5, 0.0]
        );
        f.dequeue(&jobs[0], 1.0);
        out.clear();
        f.write(11.0, &[2, 0], 0, 2, &mut out);
        assert_eq!(out[DEADLINE.start], 0.0);
        assert_eq!(out[DEADLINE.end], 1.0, "two jobs waiting over two GPUs");
    }

    #[test]
    fn duration_class_and_busy_features_count_remaining_work() {
        let mut f = FeatureTracker::new(layout(1), 100.0).unwrap();
        f.enqueue(&job(50.0, 3.0), 1.0); // 3 min on 1g: [2, 5)
        f.enqueue(&job(50.0, 30.0), 0.5); // 15 min left: [10, 20)
        let mut out = Vec::new();
        f.write(0.0, &[1], 7, 1, &mut out);
        assert_eq!(&out[1..9], &[0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
        let summary = &out[19..25];
        assert_eq!(
            summary,
            &[2.0, 2.0, 0.0, 0.0, 0.0, 1.0],
            "waiting, classes (linear = 1), busy share"
        );
        assert_eq!(out.len(), layout(1).dim());
    }

    #[test]
    fn a_layout_split_by_slice_size_is_refused() {
        let l = FeatureLayout {
            slice_sizes: vec![1, 7],
            ..layout(12)
        };
        assert!(FeatureTracker::new(l, 10.0).is_err());
    }
}
