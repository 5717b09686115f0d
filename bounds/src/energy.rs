//! The energy lower bound: E_LB = C*·Σ_g P_g[0] + α·Σ_j w_j (docs/model.md §7).
//!
//! What it relaxes, on top of the linearisation of [`super`]:
//! - **Power**: every GPU draws at least its idle power plus α per busy compute slice,
//!   α = min over the cluster's models and b = 1..7 of (P[b] − P[0])/b. For a concave
//!   curve the minimum is at b = 7 (the chord from idle to full), so a homogeneous
//!   cluster gets docs/model.md's E_LB = W·P[7] + (m·C* − W)·P[0] with W = Σ_j w_j/7; taking
//!   the minimum over every b keeps the bound valid for a curve that is not concave.
//! - **Heterogeneous clusters**: idle power is paid by every GPU until the last
//!   completion, so the idle term is C*·Σ_g P_g[0] with each GPU's own idle power; work
//!   is priced at the cheapest α of any model present (a lower bound whichever GPU runs
//!   it); C* is computed on the total machine count. Job times do not depend on the GPU
//!   model in this simulator, so the machines are identical for C*.
//! - **Makespan**: the simulator integrates power from 0 to its last completion C_max,
//!   and C_max ≥ C*, the least makespan of *preemptive* schedules of the relaxed jobs on
//!   m identical machines with release dates ([`min_makespan`], exact).
//!
//! Hence for any simulated run: E = Σ_g ∫_0^{C_max} P_g(b_g(t)) dt ≥ C_max·Σ_g P_g[0] +
//! α·Σ_j (slice-minutes of j) ≥ C*·Σ_g P_g[0] + α·Σ_j w_j = E_LB. On one model with a
//! concave curve the bound is attained by the relaxed problem: an optimal preemptive
//! schedule on m whole GPUs runs W machine-minutes at P[7] and idles the rest of m·C*.

use serde::Serialize;

use super::RelaxedJob;
use smartmig_sim::scenario::ResolvedScenario;

/// The power side of the bound: what a cluster draws at least.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct EnergyModel {
    /// Machines (GPUs).
    pub machines: usize,
    /// Σ over GPUs of idle power, W.
    pub idle_w: f64,
    /// Least extra power per busy compute slice over every model and load, W.
    pub slice_w: f64,
}

impl EnergyModel {
    /// From a resolved scenario's GPUs and their models' power curves.
    pub fn from_scenario(sc: &ResolvedScenario) -> EnergyModel {
        EnergyModel::from_curves(
            sc.gpus
                .iter()
                .map(|g| sc.models[g.model].model.power_w.as_slice()),
        )
    }

    /// From one power curve (W by busy slices 0..=its compute slices) per GPU.
    pub fn from_curves<'a>(curves: impl IntoIterator<Item = &'a [f64]>) -> EnergyModel {
        let mut machines = 0;
        let mut idle_w = 0.0;
        let mut slice_w = f64::INFINITY;
        for p in curves {
            machines += 1;
            idle_w += p[0];
            for (b, w) in p.iter().enumerate().skip(1) {
                slice_w = slice_w.min((w - p[0]) / b as f64);
            }
        }
        EnergyModel {
            machines,
            idle_w,
            // A curve that drops below idle under load would make α negative; the bound
            // stays valid with it, but no catalogue model does that.
            slice_w: if slice_w.is_finite() { slice_w } else { 0.0 },
        }
    }
}

/// The energy bound and its parts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct EnergyBound {
    /// E_LB, W·min.
    pub energy_wmin: f64,
    /// C*: least makespan of the relaxed problem, minutes.
    pub makespan_min: f64,
    /// W = Σ_j w_j / 7: busy machine-minutes of the relaxed problem.
    pub work_machine_min: f64,
    /// The power side.
    pub model: EnergyModel,
}

/// E_LB for relaxed jobs on a cluster (see the module doc for what it relaxes).
pub fn energy_bound(jobs: &[RelaxedJob], model: EnergyModel) -> EnergyBound {
    let c = min_makespan(jobs, model.machines);
    let work: f64 = jobs.iter().map(|j| j.length).sum();
    EnergyBound {
        energy_wmin: c * model.idle_w + model.slice_w * 7.0 * work,
        makespan_min: c,
        work_machine_min: work,
        model,
    }
}

/// Exact least makespan of preemptive schedules on `m` identical machines with release
/// dates (P|pmtn, r_j|C_max), in O(n log n).
///
/// Why it is exact. A makespan C is feasible iff, at every time s ≤ C, the work that no
/// schedule can have done by s fits on the machines after s:
///
///   (1) f(s) = Σ_j (p_j − (s − r_j)⁺)⁺ ≤ m·(C − s)   for all s ∈ [0, C], and
///   (2) r_j + p_j ≤ C for every j.
///
/// Necessity: job j runs at rate ≤ 1 from r_j, so at least (p_j − (s − r_j)⁺)⁺ of it is
/// left at s, and at most m·(C − s) can be done after s. Sufficiency: feasibility is a
/// flow from jobs to the intervals between consecutive release dates and C (job → interval
/// capacity = its length, interval → sink capacity m × length; Horn 1974). A cut that
/// keeps a set T of interval→sink edges costs m|T| + Σ_j min(p_j, |[r_j, C] ∖ T|); all
/// windows [r_j, C] end at C, so of all sets of measure |T| the suffix [C − |T|, C]
/// meets every window most and gives the least cut. Min-cut ≥ Σ p_j for every suffix
/// is exactly (1) with s = C − |T|, and T = ∅ gives (2).
///
/// Since f does not depend on C, (1) reads C ≥ s + f(s)/m for every s, and
/// C* = max(max_j (r_j + p_j), max_s (s + f(s)/m)). The right-hand side is piecewise
/// linear in s with breakpoints at the r_j and r_j + p_j, so its maximum is at one of
/// them; a sweep evaluates f at every breakpoint.
pub fn min_makespan(jobs: &[RelaxedJob], m: usize) -> f64 {
    if jobs.is_empty() || m == 0 {
        return if jobs.is_empty() { 0.0 } else { f64::INFINITY };
    }
    let m = m as f64;
    // Events: at r_j job j starts to deplete its unavoidable remainder at rate 1, at
    // r_j + p_j it stops. (time, +1 start / −1 stop)
    let mut events: Vec<(f64, i32)> = Vec::with_capacity(2 * jobs.len());
    let mut best: f64 = 0.0;
    let mut f: f64 = 0.0;
    for j in jobs {
        events.push((j.release, 1));
        events.push((j.release + j.length, -1));
        best = best.max(j.release + j.length);
        f += j.length;
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut active: i64 = 0;
    let mut last = 0.0;
    best = best.max(f / m);
    for (t, delta) in events {
        f -= active as f64 * (t - last);
        last = t;
        active += i64::from(delta);
        // Evaluating before all simultaneous events are applied is harmless: f is
        // continuous, only its slope changes at an event.
        best = best.max(t + f.max(0.0) / m);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: [f64; 8] = [40.0, 119.0, 160.0, 205.3, 243.9, 247.7, 248.5, 248.5];

    fn rj(release: f64, length: f64) -> RelaxedJob {
        RelaxedJob {
            release,
            deadline: release + length,
            length,
        }
    }

    /// Max-flow feasibility of makespan `c` (Horn's network), independent of the formula:
    /// jobs → intervals between release dates and c → sink. Returns the flow.
    fn max_flow_at(jobs: &[RelaxedJob], m: usize, c: f64) -> f64 {
        let mut cuts: Vec<f64> = jobs.iter().map(|j| j.release).filter(|&r| r < c).collect();
        cuts.push(c);
        cuts.sort_by(f64::total_cmp);
        cuts.dedup();
        let intervals: Vec<(f64, f64)> = cuts.windows(2).map(|w| (w[0], w[1])).collect();
        let n = jobs.len();
        let k = intervals.len();
        // Nodes: 0 source, 1..=n jobs, n+1..=n+k intervals, n+k+1 sink.
        let size = n + k + 2;
        let sink = size - 1;
        let mut cap = vec![vec![0.0f64; size]; size];
        for (i, j) in jobs.iter().enumerate() {
            cap[0][1 + i] = j.length;
            for (q, &(a, b)) in intervals.iter().enumerate() {
                if a >= j.release {
                    cap[1 + i][n + 1 + q] = b - a;
                }
            }
        }
        for (q, &(a, b)) in intervals.iter().enumerate() {
            cap[n + 1 + q][sink] = m as f64 * (b - a);
        }
        // Edmonds–Karp.
        let mut flow = 0.0;
        loop {
            let mut prev = vec![usize::MAX; size];
            prev[0] = 0;
            let mut queue = std::collections::VecDeque::from([0usize]);
            while let Some(u) = queue.pop_front() {
                for (v, &c) in cap[u].iter().enumerate() {
                    if prev[v] == usize::MAX && c > 1e-12 {
                        prev[v] = u;
                        queue.push_back(v);
                    }
                }
            }
            if prev[sink] == usize::MAX {
                return flow;
            }
            let mut bottleneck = f64::INFINITY;
            let mut v = sink;
            while v != 0 {
                bottleneck = bottleneck.min(cap[prev[v]][v]);
                v = prev[v];
            }
            let mut v = sink;
            while v != 0 {
                cap[prev[v]][v] -= bottleneck;
                cap[v][prev[v]] += bottleneck;
                v = prev[v];
            }
            flow += bottleneck;
        }
    }

    #[test]
    fn three_equal_jobs_on_two_machines_wrap_around_to_one_and_a_half() {
        // McNaughton: 3 × 1 on 2 machines = 1.5; without preemption it would be 2.
        let jobs = [rj(0.0, 1.0), rj(0.0, 1.0), rj(0.0, 1.0)];
        assert!((min_makespan(&jobs, 2) - 1.5).abs() < 1e-12);
    }

    #[test]
    fn a_late_release_sets_the_makespan_and_the_idle_energy() {
        // A at 0 for 1, B at 5 for 1 on two GPUs: C* = 6, W = 2, so
        // E = 2·P7 + (2·6 − 2)·P0.
        let jobs = [rj(0.0, 1.0), rj(5.0, 1.0)];
        let model = EnergyModel::from_curves([&P[..], &P[..]]);
        let b = energy_bound(&jobs, model);
        assert!((b.makespan_min - 6.0).abs() < 1e-12);
        let e = 2.0 * P[7] + 10.0 * P[0];
        assert!((b.energy_wmin - e).abs() < 1e-9, "{} vs {e}", b.energy_wmin);
    }

    #[test]
    fn a_burst_after_a_quiet_start_is_bounded_by_the_work_left_at_the_burst() {
        // m = 2: one job 0..4 (length 4), then three jobs of 2 at t = 1. At s = 1 the
        // work left is 3 + 6 = 9 → C ≥ 1 + 4.5 = 5.5 (the 4-long job alone needs 4).
        let jobs = [rj(0.0, 4.0), rj(1.0, 2.0), rj(1.0, 2.0), rj(1.0, 2.0)];
        assert!((min_makespan(&jobs, 2) - 5.5).abs() < 1e-12);
    }

    #[test]
    fn a_long_job_cannot_be_split_across_machines() {
        // One job of 10 and one of 1 on 4 machines: 10, not 11/4.
        assert!((min_makespan(&[rj(0.0, 10.0), rj(0.0, 1.0)], 4) - 10.0).abs() < 1e-12);
    }

    #[test]
    fn the_bound_uses_the_chord_of_a_concave_curve_and_the_sum_of_idle_powers() {
        let big = [60.0, 100.0, 150.0, 200.0, 250.0, 300.0, 350.0, 400.0];
        let m = EnergyModel::from_curves([&P[..], &big[..]]);
        assert_eq!(m.machines, 2);
        assert!((m.idle_w - 100.0).abs() < 1e-12);
        // A100 chord: (248.5 − 40)/7 = 29.79 W per slice; the big curve: 340/7 = 48.6.
        assert!((m.slice_w - (P[7] - P[0]) / 7.0).abs() < 1e-12);
    }

    #[test]
    fn min_makespan_is_exactly_the_least_feasible_makespan_of_the_flow_network() {
        // Random small instances: the flow is complete at C* and short just below it.
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..300 {
            let n = rng.random_range(1..8);
            let m = rng.random_range(1..4);
            let jobs: Vec<RelaxedJob> = (0..n)
                .map(|_| {
                    rj(
                        rng.random_range(0..6) as f64 * 0.5,
                        rng.random_range(1..9) as f64 * 0.25,
                    )
                })
                .collect();
            let total: f64 = jobs.iter().map(|j| j.length).sum();
            let c = min_makespan(&jobs, m);
            let at = max_flow_at(&jobs, m, c);
            assert!(
                at >= total - 1e-9,
                "{jobs:?} m={m}: C*={c} not feasible ({at} < {total})"
            );
            let delta = 1e-6 * c.max(1.0);
            let below = max_flow_at(&jobs, m, c - delta);
            assert!(
                below < total - delta / 2.0,
                "{jobs:?} m={m}: {} is feasible too",
                c - delta
            );
        }
    }

    #[test]
    fn the_energy_bound_equals_the_optimal_energy_of_the_relaxed_problem() {
        // Optimal energy on m whole GPUs: every schedule draws W·P7 busy plus P0 for
        // the rest of m·C, least at the least feasible C, found here by bisection on the
        // flow network alone (no use of min_makespan).
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for _ in 0..50 {
            let n = rng.random_range(1..7);
            let m = rng.random_range(1..4);
            let jobs: Vec<RelaxedJob> = (0..n)
                .map(|_| {
                    rj(
                        rng.random_range(0..5) as f64,
                        rng.random_range(1..12) as f64 / 3.0,
                    )
                })
                .collect();
            let total: f64 = jobs.iter().map(|j| j.length).sum();
            let (mut lo, mut hi) = (0.0, 100.0);
            for _ in 0..60 {
                let mid = 0.5 * (lo + hi);
                if max_flow_at(&jobs, m, mid) >= total - 1e-9 {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            let optimal = total * P[7] + (m as f64 * hi - total) * P[0];
            let curves = vec![P; m];
            let b = energy_bound(&jobs, EnergyModel::from_curves(curves.iter().map(|c| &c[..])));
            assert!(
                (b.energy_wmin - optimal).abs() < 1e-6 * optimal,
                "{jobs:?} m={m}: {} vs {optimal}",
                b.energy_wmin
            );
        }
    }

    #[test]
    fn the_reference_day_takes_well_under_a_second() {
        // Not a benchmark (BENCHMARKS.md has the release timing); guards against an
        // accidentally quadratic sweep, which would take seconds even in a debug build.
        let jobs: Vec<RelaxedJob> = (0..200_000)
            .map(|i| rj(f64::from(i) * 0.01, 0.3 + f64::from(i % 7) * 0.1))
            .collect();
        let t = std::time::Instant::now();
        let c = min_makespan(&jobs, 8);
        assert!(c >= 1999.99 + 0.3);
        assert!(t.elapsed().as_secs_f64() < 5.0, "{:?}", t.elapsed());
    }
}
